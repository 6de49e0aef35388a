package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
)

// TestAgwRunsAPipelineSubmittedWithRedisCLI: a sort | uniq -c plan,
// submitted and waited for with nothing but redis-cli, and what JOB.WAIT
// prints for it, byte for byte but for times.
func TestAgwRunsAPipelineSubmittedWithRedisCLI(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, heartbeatEvery(time.Second))
	agw := startAgw(t, a.Addr, "agw-pipeline", a.CreateKey(t, "worker", "agw-pipeline"))
	producer := a.CreateKey(t, "producer", "shop")

	job := `{"job_id":"fruit","plan":{"tasks":[{"tool":"sort"},{"tool":"uniq","args":["-c"]}]},"inputs":{"stdin":"pear\napple\npear\nfig\n"}}`
	if got := cli(t, a, producer, "JOB.SUBMIT", job); got != "fruit" {
		t.Fatalf("JOB.SUBMIT printed %q", got)
	}
	out := cli(t, a, producer, "JOB.WAIT", "fruit", "30")
	j := decodeJob(t, out)
	if j.Status != "completed" || j.Attempt != 1 || j.worker() != "agw-pipeline" {
		t.Fatalf("JOB.WAIT printed %s", out)
	}
	want := regexp.MustCompile(`^\{"output":"      1 apple\\n      1 fig\\n      2 pear\\n","status":"completed","attempt":1,` +
		`"delivery":"[0-9a-f-]{36}","completed_at":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ","task_results":\[` +
		`\{"tool":"sort","stderr":"","exit_code":0,"duration_ms":\d+\},` +
		`\{"tool":"uniq","stderr":"","exit_code":0,"duration_ms":\d+\}\]\}$`)
	if !want.Match(j.Result) {
		t.Fatalf("the job's result is\n%s\nwant it to match\n%s", j.Result, want)
	}
	if !strings.Contains(out, `"result":`+string(j.Result)) {
		t.Fatalf("JOB.WAIT printed %s", out)
	}

	agw.signal(t, syscall.SIGTERM)
	if code := agw.waitExit(t, 10*time.Second); code != 0 {
		t.Fatalf("agw exited %d", code)
	}
	if w := getWorker(t, a.Admin(t), "agw-pipeline"); w.State != "UNREGISTERED" {
		t.Fatalf("after agw exited the worker is %s", w.State)
	}
}

// TestAgwNeverRunsWhatItDoesNotOffer: a job needing a tool agw does not
// offer is never claimed; a job that reaches agw (through an explicit
// "requires") naming a shell or a path is refused without running anything,
// and fails at once instead of being retried.
func TestAgwNeverRunsWhatItDoesNotOffer(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, heartbeatEvery(time.Second))
	admin := a.Admin(t)
	startAgw(t, a.Addr, "agw-strict", a.CreateKey(t, "worker", "agw-strict"), "AGW_TOOLS=sort,uniq")

	pwned := filepath.Join(t.TempDir(), "pwned")
	shell := `{"tool":"sh","args":["-c","echo ran > ` + pwned + `"]}`
	for _, job := range []string{
		// requires derived from the plans: no agw offering only sort
		// and uniq may take these.
		`{"job_id":"wants-tr","plan":{"tasks":[{"tool":"tr","args":["a-z","A-Z"]}]},"inputs":{"stdin":"x\n"}}`,
		`{"job_id":"wants-sh","plan":{"tasks":[` + shell + `]}}`,
		`{"job_id":"wants-path","plan":{"tasks":[{"tool":"/bin/sort"}]}}`,
		// requires given: they reach agw, which must refuse them.
		`{"job_id":"sneaks-sh","requires":["sort"],"plan":{"tasks":[{"tool":"sort"},` + shell + `]}}`,
		`{"job_id":"sneaks-path","requires":["sort"],"plan":{"tasks":[{"tool":"/bin/sort"}]},"inputs":{"stdin":"b\na\n"}}`,
		// Submitted last: once it is done, agw has had every other job
		// on offer.
		`{"job_id":"probe","plan":{"tasks":[{"tool":"sort"}]},"inputs":{"stdin":"b\na\n"}}`,
	} {
		submit(t, admin, job)
	}
	if j := waitJob(t, admin, "probe", 30*time.Second); j.Status != "completed" {
		t.Fatalf("probe %+v", j)
	}

	for _, id := range []string{"wants-tr", "wants-sh", "wants-path"} {
		if j := getJob(t, admin, id); j.Status != "queued" || j.Attempt != 0 || j.StartedAt != nil {
			t.Errorf("%s was claimed: %+v", id, j)
		}
	}
	for _, tt := range []struct{ id, error string }{
		{"sneaks-sh", `task 2 (sh): refused: tool "sh" is not offered by this worker (offered: sort, uniq)`},
		{"sneaks-path", `task 1 (/bin/sort): refused: "/bin/sort" is a path; tools are bare names from the offered set`},
	} {
		j := waitJob(t, admin, tt.id, 10*time.Second)
		f := j.failure(t)
		if j.Status != "failed" || j.Attempt != 1 || len(j.Errors) != 1 || j.Errors[0].Error != tt.error ||
			f.Error != tt.error || f.Retryable == nil || *f.Retryable || len(f.TaskResults) != 0 {
			t.Errorf("%s: %+v, result %s", tt.id, j, j.Result)
		}
	}
	if _, err := os.Stat(pwned); !os.IsNotExist(err) {
		t.Fatalf("the shell ran: %v", err)
	}
}

// TestAgwKillsAJobPastItsTimeout offers sh (this test only) to run a task
// that forks: at the job's timeout, the whole process group goes, not only
// the task's own process.
func TestAgwKillsAJobPastItsTimeout(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, heartbeatEvery(time.Second))
	admin := a.Admin(t)
	startAgw(t, a.Addr, "agw-timeout", a.CreateKey(t, "worker", "agw-timeout"), "AGW_TOOLS=sh,sleep")

	secs := uniqueSleep(60)
	script := "sleep " + secs + " & sleep " + secs
	submit(t, admin, `{"job_id":"slow","timeout_seconds":2,"max_attempts":1,"plan":{"tasks":[{"tool":"sh","args":["-c","`+script+`"]}]}}`)
	waitProcesses(t, 10*time.Second, 2, "sleep", secs)
	start := time.Now()

	j := waitJob(t, admin, "slow", 20*time.Second)
	if j.Status != "failed" || j.Attempt != 1 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "timed out") {
		t.Fatalf("job %+v, result %s", j, j.Result)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the job ended %v after it started", d)
	}
	waitProcesses(t, time.Second, 0, "sleep", secs)
	waitProcesses(t, time.Second, 0, "sh", "-c", script)
	t.Logf("errors %+v, result %s", j.Errors, j.Result)
}

// TestAgwStopsACancelledJobWithinAHeartbeat: JOB.CANCEL of a running job
// reaches agw through its next heartbeat, the job's process is gone within
// one interval (1s here, plus slack for a loaded machine), and the job ends
// cancelled.
func TestAgwStopsACancelledJobWithinAHeartbeat(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, heartbeatEvery(time.Second))
	admin := a.Admin(t)
	startAgw(t, a.Addr, "agw-cancel", a.CreateKey(t, "worker", "agw-cancel"))
	producer := a.CreateKey(t, "producer", "shop")

	secs := uniqueSleep(60)
	submit(t, admin, `{"job_id":"long","plan":{"tasks":[{"tool":"sleep","args":["`+secs+`"]}]}}`)
	waitProcesses(t, 10*time.Second, 1, "sleep", secs)

	if got := cli(t, a, producer, "JOB.CANCEL", "long"); got != "OK" {
		t.Fatalf("JOB.CANCEL printed %q", got)
	}
	start := time.Now()
	waitProcesses(t, 5*time.Second, 0, "sleep", secs)
	stopped := time.Since(start)
	t.Logf("the process stopped %v after JOB.CANCEL", stopped)
	// One interval until the heartbeat that carries the cancellation, and
	// slack for a loaded machine (it takes 0.2 to 1 s when idle).
	if stopped > 2*time.Second {
		t.Fatalf("the process stopped %v after JOB.CANCEL; the heartbeat interval is 1s", stopped)
	}
	if j := waitJob(t, admin, "long", 5*time.Second); j.Status != "cancelled" || len(j.Errors) != 0 {
		t.Fatalf("job %+v", j)
	}
}

func TestAgwDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()

	t.Run("RunningJobsFinish", func(t *testing.T) {
		t.Parallel()
		a := agqtest.Start(t, heartbeatEvery(time.Second))
		admin := a.Admin(t)
		agw := startAgw(t, a.Addr, "agw-drain", a.CreateKey(t, "worker", "agw-drain"), "AGW_CONCURRENCY=3")
		var sleeps []string
		for _, id := range []string{"first", "second"} {
			secs := uniqueSleep(2)
			sleeps = append(sleeps, secs)
			submit(t, admin, `{"job_id":"`+id+`","plan":{"tasks":[{"tool":"sleep","args":["`+secs+`"]}]}}`)
		}
		for _, secs := range sleeps {
			waitProcesses(t, 10*time.Second, 1, "sleep", secs)
		}

		agw.signal(t, syscall.SIGTERM)
		agw.waitLog(t, 5*time.Second, msg("draining: no new jobs; waiting for the running ones"))
		submit(t, admin, `{"job_id":"late","plan":{"tasks":[{"tool":"true"}]}}`)
		if code := agw.waitExit(t, 15*time.Second); code != 0 {
			t.Fatalf("agw exited %d", code)
		}
		for _, id := range []string{"first", "second"} {
			if j := getJob(t, admin, id); j.Status != "completed" || j.worker() != "agw-drain" {
				t.Errorf("%s: %+v", id, j)
			}
		}
		if j := getJob(t, admin, "late"); j.Status != "queued" || j.Attempt != 0 {
			t.Errorf("a draining agw took a job: %+v", j)
		}
		if w := getWorker(t, admin, "agw-drain"); w.State != "UNREGISTERED" {
			t.Errorf("after agw exited the worker is %s", w.State)
		}
	})

	t.Run("UnfinishedJobsRunElsewhere", func(t *testing.T) {
		t.Parallel()
		a := agqtest.Start(t, heartbeatEvery(time.Second))
		admin := a.Admin(t)
		key := a.CreateKey(t, "worker", "fleet")
		agw := startAgw(t, a.Addr, "agw-leaving", key, "AGW_CONCURRENCY=2", "AGW_SHUTDOWN_TIMEOUT=1s")
		var sleeps []string
		for _, id := range []string{"first", "second"} {
			secs := uniqueSleep(3)
			sleeps = append(sleeps, secs)
			submit(t, admin, `{"job_id":"`+id+`","retry_backoff_seconds":0.1,"plan":{"tasks":[{"tool":"sleep","args":["`+secs+`"]}]}}`)
		}
		for _, secs := range sleeps {
			waitProcesses(t, 10*time.Second, 1, "sleep", secs)
		}

		agw.signal(t, syscall.SIGTERM)
		start := time.Now()
		if code := agw.waitExit(t, 15*time.Second); code != 0 {
			t.Fatalf("agw exited %d", code)
		}
		if d := time.Since(start); d < time.Second || d > 5*time.Second {
			t.Errorf("agw exited %v after SIGTERM; its shutdown timeout is 1s", d)
		}
		for _, secs := range sleeps {
			if pids := processes(t, "sleep", secs); len(pids) != 0 {
				t.Errorf("sleep %s outlived agw: pids %v", secs, pids)
			}
		}
		for _, id := range []string{"first", "second"} {
			j := getJob(t, admin, id)
			if j.Status != "retrying" && j.Status != "queued" || len(j.Errors) != 1 ||
				j.Errors[0].Error != "agw shutting down" || j.Errors[0].WorkerID != "agw-leaving" {
				t.Errorf("%s after agw left: %+v", id, j)
			}
		}
		if w := getWorker(t, admin, "agw-leaving"); w.State != "UNREGISTERED" {
			t.Errorf("after agw exited the worker is %s", w.State)
		}

		other := startAgw(t, a.Addr, "agw-staying", key, "AGW_CONCURRENCY=2")
		for _, id := range []string{"first", "second"} {
			if j := waitJob(t, admin, id, 30*time.Second); j.Status != "completed" || j.Attempt != 2 || j.worker() != "agw-staying" {
				t.Errorf("%s: %+v", id, j)
			}
		}
		other.signal(t, syscall.SIGTERM)
		if code := other.waitExit(t, 15*time.Second); code != 0 {
			t.Fatalf("the second agw exited %d", code)
		}
	})
}
