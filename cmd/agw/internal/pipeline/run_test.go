package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// newExecutor offers the default tools found on PATH plus extra ones (sh,
// in the tests that need a task that forks).
func newExecutor(t *testing.T, extra ...string) *Executor {
	t.Helper()
	ts, missing, err := ResolveTools(append(append([]string(nil), DefaultTools...), extra...), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		if m == "sort" || m == "uniq" || m == "sleep" || m == "sh" || m == "seq" || m == "head" || m == "grep" {
			t.Fatalf("the tests need %s on PATH", m)
		}
	}
	return &Executor{Tools: ts, KillGrace: 300 * time.Millisecond}
}

func task(tool string, args ...string) Task { return Task{Tool: tool, Args: args} }

func TestRunPipeline(t *testing.T) {
	t.Parallel()

	t.Run("SortUniqCount", func(t *testing.T) {
		t.Parallel()
		e := newExecutor(t)
		res, err := e.Run(context.Background(), Spec{
			Tasks: []Task{task("sort"), task("uniq", "-c")},
			Stdin: "pear\napple\npear\nfig\npear\napple\n",
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := "      2 apple\n      1 fig\n      3 pear\n"; res.Output != want {
			t.Fatalf("output %q, want %q", res.Output, want)
		}
		if len(res.Tasks) != 2 || res.Tasks[0].Tool != "sort" || res.Tasks[1].Tool != "uniq" {
			t.Fatalf("task results %+v", res.Tasks)
		}
		for _, tr := range res.Tasks {
			if tr.ExitCode != 0 || tr.Stderr != "" || tr.Signal != "" || tr.DurationMS < 0 {
				t.Fatalf("task result %+v", tr)
			}
		}
	})

	t.Run("ReverseSortThenCount", func(t *testing.T) {
		t.Parallel()
		res, err := newExecutor(t).Run(context.Background(), Spec{
			Tasks: []Task{task("sort", "-r"), task("uniq", "-c"), task("sort", "-k1,1nr", "-k2"), task("head", "-n", "1")},
			Stdin: "b\na\nb\nc\nb\n",
		}, nil)
		if err != nil || res.Output != "      3 b\n" {
			t.Fatalf("%q, %v", res.Output, err)
		}
	})

	t.Run("NoStdinReadsNothing", func(t *testing.T) {
		t.Parallel()
		res, err := newExecutor(t).Run(context.Background(), Spec{Tasks: []Task{task("cat"), task("wc", "-c")}}, nil)
		if err != nil || strings.TrimSpace(res.Output) != "0" {
			t.Fatalf("%q, %v", res.Output, err)
		}
	})

	t.Run("ReportsProgressPerTask", func(t *testing.T) {
		t.Parallel()
		var got []Progress
		_, err := newExecutor(t).Run(context.Background(), Spec{
			Tasks: []Task{task("sort"), task("uniq"), task("wc", "-l")},
			Stdin: "x\n",
		}, func(p Progress) { got = append(got, p) })
		if err != nil {
			t.Fatal(err)
		}
		want := []Progress{{1, 3, 33}, {2, 3, 66}, {3, 3, 100}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("progress %v, want %v", got, want)
		}
	})

	t.Run("EarlyExitDownstreamIsNotAFailure", func(t *testing.T) {
		t.Parallel()
		res, err := newExecutor(t).Run(context.Background(), Spec{Tasks: []Task{task("seq", "1", "10000000"), task("head", "-n", "1")}}, nil)
		if err != nil || res.Output != "1\n" {
			t.Fatalf("%q, %v", res.Output, err)
		}
		if res.Tasks[0].Signal != "SIGPIPE" || res.Tasks[0].ExitCode != 128+int(syscall.SIGPIPE) {
			t.Fatalf("seq result %+v, want it killed by SIGPIPE", res.Tasks[0])
		}
	})
}

func TestRunRefuses(t *testing.T) {
	t.Parallel()
	e := newExecutor(t) // sh is not offered
	for _, tt := range []struct {
		name string
		spec Spec
	}{
		{"Shell", Spec{Tasks: []Task{task("sh", "-c", "touch /tmp/agw-pwned")}}},
		{"AbsolutePath", Spec{Tasks: []Task{task("/bin/sort")}}},
		{"RelativePath", Spec{Tasks: []Task{task("sort"), task("../sort")}}},
		{"UnknownTool", Spec{Tasks: []Task{task("nosuchtool-agw")}}},
		{"RefusedArgument", Spec{Tasks: []Task{task("sort", "-o", "/tmp/agw-pwned")}}},
		{"EmptyPlan", Spec{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := e.Run(context.Background(), tt.spec, nil)
			if !errors.Is(err, ErrRefused) || Retryable(err) {
				t.Fatalf("err = %v, want a refusal that is not retryable", err)
			}
			if len(res.Tasks) != 0 {
				t.Fatalf("tasks ran: %+v", res.Tasks)
			}
			if e.Check(tt.spec) == nil {
				t.Fatal("Check accepted what Run refused")
			}
		})
	}
	if _, err := os.Stat("/tmp/agw-pwned"); err == nil {
		t.Fatal("a refused task ran")
	}
}

func TestRunFailures(t *testing.T) {
	t.Parallel()

	t.Run("NonZeroExitNamesTheTask", func(t *testing.T) {
		t.Parallel()
		res, err := newExecutor(t).Run(context.Background(), Spec{
			Tasks: []Task{task("sort"), task("grep", "zzz"), task("wc", "-l")},
			Stdin: "a\nb\n",
		}, nil)
		var e *Error
		if !errors.As(err, &e) || e.Task != 2 || e.Tool != "grep" || !errors.Is(err, ErrTaskFailed) || !Retryable(err) {
			t.Fatalf("err = %#v", err)
		}
		if err.Error() != "task 2 (grep): exited with status 1" {
			t.Fatalf("message %q", err)
		}
		if res.Tasks[1].ExitCode != 1 || res.Tasks[0].ExitCode != 0 || strings.TrimSpace(res.Output) != "0" {
			t.Fatalf("result %+v", res)
		}
	})

	t.Run("ErrorQuotesStderr", func(t *testing.T) {
		t.Parallel()
		res, err := newExecutor(t).Run(context.Background(), Spec{Tasks: []Task{task("sort", "--no-such-option"), task("uniq")}}, nil)
		var e *Error
		if !errors.As(err, &e) || e.Task != 1 || !strings.Contains(err.Error(), "no-such-option") {
			t.Fatalf("err = %v", err)
		}
		if !strings.Contains(res.Tasks[0].Stderr, "no-such-option") {
			t.Fatalf("stderr %q", res.Tasks[0].Stderr)
		}
	})

	t.Run("StderrKeepsTheTail", func(t *testing.T) {
		t.Parallel()
		e := newExecutor(t, "sh")
		e.StderrTail = 16
		res, err := e.Run(context.Background(), Spec{Tasks: []Task{task("sh", "-c", "seq 1 5000 >&2")}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := "\n4998\n4999\n5000\n"; res.Tasks[0].Stderr != want {
			t.Fatalf("stderr %q, want %q", res.Tasks[0].Stderr, want)
		}
	})

	t.Run("OutputIsCapped", func(t *testing.T) {
		t.Parallel()
		e := newExecutor(t)
		e.MaxOutput = 1000
		res, err := e.Run(context.Background(), Spec{Tasks: []Task{task("seq", "1", "200000")}}, nil)
		if err != nil {
			t.Fatalf("a capped output is not a failure: %v", err)
		}
		if len(res.Output) != 1000 || !res.OutputTruncated || !strings.HasPrefix(res.Output, "1\n2\n3\n") {
			t.Fatalf("output %d bytes, truncated %v", len(res.Output), res.OutputTruncated)
		}
		if res.Tasks[0].ExitCode != 0 {
			t.Fatalf("seq %+v: it should have been drained, not killed", res.Tasks[0])
		}
	})
}

func TestRunStops(t *testing.T) {
	t.Parallel()

	t.Run("JobTimeoutKillsTheWholeGroup", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "pid")
		start := time.Now()
		res, err := newExecutor(t, "sh").Run(context.Background(), Spec{
			Tasks:   []Task{task("sh", "-c", "sleep 60 & echo $! > "+pidFile+"; wait"), task("cat")},
			Timeout: time.Second,
		}, nil)
		elapsed := time.Since(start)
		if !errors.Is(err, ErrTimeout) || !Retryable(err) || err.Error() != "job timed out after 1s" {
			t.Fatalf("err = %v", err)
		}
		if elapsed > 3*time.Second {
			t.Fatalf("took %v to stop a job with a 1s timeout", elapsed)
		}
		if res.Tasks[0].Signal != "SIGTERM" {
			t.Fatalf("sh result %+v", res.Tasks[0])
		}
		requireGone(t, readPid(t, pidFile))
	})

	t.Run("TermIgnoredMeansKill", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "pid")
		start := time.Now()
		res, err := newExecutor(t, "sh").Run(context.Background(), Spec{
			Tasks:   []Task{task("sh", "-c", "trap '' TERM; sleep 60 & echo $! > "+pidFile+"; wait")},
			Timeout: time.Second,
		}, nil)
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v", err)
		}
		if elapsed := time.Since(start); elapsed > 3*time.Second {
			t.Fatalf("took %v", elapsed)
		}
		if res.Tasks[0].Signal != "SIGKILL" || res.Tasks[0].ExitCode != 137 {
			t.Fatalf("sh result %+v", res.Tasks[0])
		}
		requireGone(t, readPid(t, pidFile))
	})

	t.Run("TaskTimeout", func(t *testing.T) {
		t.Parallel()
		res, err := newExecutor(t).Run(context.Background(), Spec{
			Tasks: []Task{task("cat"), {Tool: "sleep", Args: []string{"30"}, Timeout: 300 * time.Millisecond}},
		}, nil)
		var e *Error
		if !errors.As(err, &e) || e.Task != 2 || !errors.Is(err, ErrTimeout) || err.Error() != "task 2 (sleep): timed out after 300ms" {
			t.Fatalf("err = %v", err)
		}
		if res.Tasks[1].DurationMS > 2000 {
			t.Fatalf("sleep ran %dms", res.Tasks[1].DurationMS)
		}
	})

	t.Run("CancellationKills", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "pid")
		ctx, cancel := context.WithCancelCause(context.Background())
		shutdown := errors.New("agw shutting down")
		go func() {
			waitForFile(t, pidFile)
			cancel(shutdown)
		}()
		start := time.Now()
		_, err := newExecutor(t, "sh").Run(ctx, Spec{Tasks: []Task{task("sh", "-c", "sleep 60 & echo $! > "+pidFile+"; wait")}}, nil)
		if !errors.Is(err, shutdown) || err.Error() != "cancelled: agw shutting down" {
			t.Fatalf("err = %v", err)
		}
		if elapsed := time.Since(start); elapsed > 3*time.Second {
			t.Fatalf("took %v", elapsed)
		}
		requireGone(t, readPid(t, pidFile))
	})

	t.Run("AlreadyCancelledRunsNothing", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := newExecutor(t).Run(ctx, Spec{Tasks: []Task{task("sleep", "30")}}, nil)
		if !errors.Is(err, context.Canceled) || len(res.Tasks) != 0 {
			t.Fatalf("%+v, %v", res, err)
		}
	})

	t.Run("LeftoversOfAFinishedTaskAreKilled", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "pid")
		start := time.Now()
		res, err := newExecutor(t, "sh").Run(context.Background(), Spec{
			Tasks: []Task{task("sh", "-c", "sleep 60 & echo $! > "+pidFile+"; echo done")},
		}, nil)
		if err != nil || res.Output != "done\n" {
			t.Fatalf("%q, %v", res.Output, err)
		}
		if elapsed := time.Since(start); elapsed > 3*time.Second {
			t.Fatalf("the background sleep held the job for %v", elapsed)
		}
		requireGone(t, readPid(t, pidFile))
	})
}

func TestRunEnvironment(t *testing.T) {
	t.Setenv("AGQ_KEY", "secret-key")
	t.Setenv("POSIXLY_CORRECT", "1")
	res, err := newExecutor(t, "sh").Run(context.Background(), Spec{Tasks: []Task{
		task("sh", "-c", `echo "${AGQ_KEY:-no key} ${POSIXLY_CORRECT:-lax} $PWD $TMPDIR"`),
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(res.Output)
	if len(f) != 5 || f[0]+" "+f[1] != "no key" || f[2] != "lax" {
		t.Fatalf("output %q: the tool saw agw's environment", res.Output)
	}
	if f[3] != f[4] || !strings.Contains(filepath.Base(f[3]), "agw-job-") {
		t.Fatalf("working dir %q, TMPDIR %q", f[3], f[4])
	}
	if _, err := os.Stat(f[3]); !os.IsNotExist(err) {
		t.Fatalf("the job's directory %s is still there: %v", f[3], err)
	}
}

func waitForFile(t *testing.T, path string) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("%s never appeared", path)
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	waitForFile(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid file %q", b)
	}
	return pid
}

// requireGone waits for pid to be dead: no such process, or a zombie
// waiting for whichever init reaps orphans here.
func requireGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if os.IsNotExist(err) || err == nil && zombie(string(stat)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d outlived its job: %s", pid, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func zombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i > 0 && len(stat) > i+2 && stat[i+2] == 'Z'
}
