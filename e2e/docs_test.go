package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// TestQuickstartRunsAsPrinted runs the console blocks of docs/quickstart.md
// in one bash session whose output is a terminal, as a reader's would be,
// and compares what each command prints with the page. The node started
// here stands in for "go run ./cmd/agq": it generates its admin key into
// agq-data/admin.key under the session's directory. Two substitutions
// adapt the page to the test: agq's port for 6380, and the agw binary for
// "go run ./cmd/agw" (with AGQ_ADDR naming the test's node, where the
// reader's agw uses its default, agq's default address). A non-interactive
// shell prints no job numbers, so "[1] <pid>" after a background command
// is not expected from it.
func TestQuickstartRunsAsPrinted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := agqtest.Start(t, heartbeatEvery(time.Second), func(c *config.Config) {
		c.AdminKey = ""
		c.DataDir = filepath.Join(dir, "agq-data")
	})
	_, port, err := net.SplitHostPort(a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	agw := agwBinary(t)
	steps := consoleSteps(t, readPage(t, "quickstart.md"))
	if len(steps) == 0 {
		t.Fatal("the quickstart has no console blocks")
	}

	var script strings.Builder
	fmt.Fprintf(&script, "cd '%s' || exit 1\n", dir)
	for i, s := range steps {
		command := strings.ReplaceAll(s.command, "-p 6380", "-p "+port)
		command = strings.ReplaceAll(command, "go run ./cmd/agw", "'"+agw+"'")
		fmt.Fprintf(&script, "printf '\\036%d\\n'\n%s\n", i, command)
	}
	// Then wait, as the reader's terminal would stay open, for agw to
	// finish: the end of the session would hang it up.
	script.WriteString("printf '\\036end\\n'\nwait\n")
	scriptPath := filepath.Join(t.TempDir(), "quickstart.sh")
	if err := os.WriteFile(scriptPath, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	session := startTerminal(t, exec.Command("bash", scriptPath), append(cleanEnv(), "HOME="+dir, "AGQ_ADDR="+a.Addr))
	output := session.waitFor(t, "\x1eend\n", 90*time.Second)
	segments := strings.Split(output, "\x1e")[1:] // "<step>\n<what it printed>"
	if len(segments) != len(steps)+1 {
		t.Fatalf("the session printed %d markers for %d steps:\n%s", len(segments), len(steps), output)
	}
	for i, s := range steps {
		_, printed, _ := strings.Cut(segments[i], "\n")
		want := s.want
		if strings.HasSuffix(strings.TrimSpace(s.command), "&") {
			want = without(want, "[1] <pid>")
		}
		if got := outputLines(printed); !agqtest.LinesMatch(want, got) {
			t.Errorf("%s\n--- the page shows:\n%s\n--- the session printed:\n%s",
				s, strings.Join(s.want, "\n"), strings.Join(got, "\n"))
		}
	}

	// The last step stopped agw, which drains and unregisters.
	adminKey, err := os.ReadFile(filepath.Join(dir, "agq-data", "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	a.AdminKey = strings.TrimSpace(string(adminKey))
	waitWorker(t, a.Admin(t), "worker-001", "UNREGISTERED")
	if log, err := os.ReadFile(filepath.Join(dir, "agw.log")); err == nil {
		t.Logf("agw.log:\n%s", log)
	} else {
		t.Errorf("agw.log: %v", err)
	}
}

// without returns lines without those equal to drop.
func without(lines []string, drop string) []string {
	var out []string
	for _, l := range lines {
		if l != drop {
			out = append(out, l)
		}
	}
	return out
}

// terminal is a command whose standard streams are a pseudo-terminal.
type terminal struct {
	mu     sync.Mutex
	output bytes.Buffer
}

// startTerminal starts cmd in a new session on a pseudo-terminal and
// collects what it prints. When the test ends, the session's process group
// (the command and whatever it left in the background) is killed.
func startTerminal(t *testing.T, cmd *exec.Cmd, env []string) *terminal {
	t.Helper()
	cmd.Env = env
	tty, err := pty.Start(cmd) // also makes cmd a session and process group leader
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			term.mu.Lock()
			term.output.Write(buf[:n])
			term.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		tty.Close()
		<-readDone
	})
	return term
}

// waitFor waits until the terminal has printed marker and returns what it
// printed up to then, with the terminal's CR LF line ends made LF.
func (term *terminal) waitFor(t *testing.T, marker string, within time.Duration) string {
	t.Helper()
	var text string
	deadline := time.Now().Add(within)
	for {
		term.mu.Lock()
		text = strings.ReplaceAll(term.output.String(), "\r\n", "\n")
		term.mu.Unlock()
		if i := strings.Index(text, marker); i >= 0 {
			return text[:i+len(marker)]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session did not print %q within %v; it printed:\n%s", marker, within, text)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCookbookRunsAsPrinted builds the cookbook's go-redis worker from the
// page, as printed, inside this module (so that it gets the go-redis
// version of go.mod), runs it, and drives it with the page's shell script.
func TestCookbookRunsAsPrinted(t *testing.T) {
	t.Parallel()
	page := readPage(t, "cookbook.md")
	program := fencedBlock(t, page, "```go title=\"worker.go\"")
	script := fencedBlock(t, page, "```sh title=\"submit-and-wait.sh\"")
	shownOutput := strings.TrimSpace(fencedBlock(t, page, "```text title=\"output\""))
	graphScript := fencedBlock(t, page, "```sh title=\"fan-out-and-wait.sh\"")
	graphOutput := strings.TrimSpace(fencedBlock(t, page, "```text title=\"graph output\""))

	worker := buildCookbookWorker(t, program)
	scriptPath := filepath.Join(t.TempDir(), "submit-and-wait.sh")
	if err := os.WriteFile(scriptPath, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	graphPath := filepath.Join(filepath.Dir(scriptPath), "fan-out-and-wait.sh")
	if err := os.WriteFile(graphPath, []byte(graphScript), 0o755); err != nil {
		t.Fatal(err)
	}

	a := agqtest.Start(t, heartbeatEvery(time.Second))
	admin := a.Admin(t)
	_, port, err := net.SplitHostPort(a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(worker)
	cmd.Env = append(cleanEnv(), "AGQ_ADDR="+a.Addr, "AGQ_WORKER_ID=reverser-1", "AGQ_KEY="+a.CreateKey(t, "worker", "reverser-1"))
	startProcess(t, "worker.go", cmd)
	registered := waitWorker(t, admin, "reverser-1", "ACTIVE")
	producer := a.CreateKey(t, "producer", "scripts")

	// run runs the script as the page does, with a producer's key.
	run := func(t *testing.T, key string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command("sh", append([]string{scriptPath}, args...)...)
		cmd.Env = append(cleanEnv(), "REDISCLI_AUTH="+key, "AGQ_PORT="+port, "HOME="+t.TempDir())
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("running the script: %v", err)
		}
		t.Logf("submit-and-wait.sh %q: exit %d\nstdout: %s\nstderr: %s", args, cmd.ProcessState.ExitCode(), out.String(), errOut.String())
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}

	t.Run("Completes", func(t *testing.T) {
		stdout, _, code := run(t, producer, `{"type":"reverse","payload":{"text":"hello, agq"}}`)
		j := decodeJob(t, stdout)
		if code != 0 || j.Status != "completed" || j.worker() != "reverser-1" || string(j.Result) != `{"output":"qga ,olleh","status":"completed"}` {
			t.Fatalf("exit %d, job %+v, result %s", code, j, j.Result)
		}
		if !agqtest.LineMatches(shownOutput, strings.TrimSuffix(stdout, "\n")) {
			t.Fatalf("the script printed\n%s\nthe page shows\n%s", stdout, shownOutput)
		}
	})
	t.Run("Fails", func(t *testing.T) {
		stdout, _, code := run(t, producer, `{"type":"reverse","payload":{"text":""}}`, "20")
		j := decodeJob(t, stdout)
		if code != 1 || j.Status != "failed" || j.Attempt != 1 || len(j.Errors) != 1 || j.Errors[0].Error != "nothing to reverse" {
			t.Fatalf("exit %d, job %+v", code, j)
		}
	})
	t.Run("IsRefused", func(t *testing.T) {
		stdout, stderr, code := run(t, producer, `{"type":"reverse","colour":"blue"}`)
		if code != 2 || stdout != "" || stderr != "submit-and-wait: ERR invalid job: unknown field \"colour\"\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})
	t.Run("TimesOut", func(t *testing.T) {
		// Nobody offers "upper": the job waits in its queue.
		stdout, stderr, code := run(t, producer, `{"job_id":"nobody-1","type":"upper"}`, "0.5")
		if code != 1 || stdout != "" || stderr != "submit-and-wait: job nobody-1 did not end within 0.5 s\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})
	t.Run("NeedsAKey", func(t *testing.T) {
		_, stderr, code := run(t, "no-such-key", `{"type":"reverse","payload":{"text":"x"}}`)
		if code != 2 || !strings.Contains(stderr, "WRONGPASS") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("RunsAGraph", func(t *testing.T) {
		cmd := exec.Command("sh", graphPath, "alpha", "beta", "gamma")
		cmd.Env = append(cleanEnv(), "REDISCLI_AUTH="+producer, "AGQ_PORT="+port, "HOME="+t.TempDir())
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("fan-out-and-wait.sh: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
		}
		stdout := strings.TrimSuffix(out.String(), "\n")
		if !agqtest.LineMatches(graphOutput, stdout) {
			t.Fatalf("the script printed\n%s\nthe page shows\n%s", stdout, graphOutput)
		}
		last := decodeJob(t, stdout)
		var graph struct {
			After []string `json:"after"`
		}
		if err := json.Unmarshal([]byte(stdout), &graph); err != nil {
			t.Fatal(err)
		}
		if last.Status != "completed" || string(last.Result) != `{"output":"enod 3","status":"completed"}` || len(graph.After) != 3 {
			t.Fatalf("last job %+v, result %s, after %v", last, last.Result, graph.After)
		}
		for i, id := range graph.After {
			p := getJob(t, admin, id)
			want := []string{`"ahpla"`, `"ateb"`, `"ammag"`}[i]
			if p.Status != "completed" || !strings.Contains(string(p.Result), want) || p.FinishedAt.After(*last.StartedAt) {
				t.Errorf("parent %s: %+v, result %s; the last job started at %v", id, p, p.Result, last.StartedAt)
			}
		}
	})
	t.Run("Heartbeats", func(t *testing.T) {
		agqtest.Eventually(t, 5*time.Second, func() error {
			raw, err := admin.Do(context.Background(), "WORKER.GET", "reverser-1").Text()
			if err != nil {
				return err
			}
			var w struct {
				State           string    `json:"state"`
				LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
			}
			if err := json.Unmarshal([]byte(raw), &w); err != nil {
				return err
			}
			if w.State != "ACTIVE" || !w.LastHeartbeatAt.After(registered.RegisteredAt.Add(time.Second)) {
				return fmt.Errorf("no heartbeat since the registration: %s", raw)
			}
			return nil
		})
	})
}

// buildCookbookWorker writes the program to a directory of this module
// (under e2e/testdata, which go's ./... patterns skip), vets and builds it
// there, removes the source, and returns the binary's path.
func buildCookbookWorker(t *testing.T, program string) string {
	t.Helper()
	src := filepath.Join("testdata", fmt.Sprintf("tmp-%d", os.Getpid()))
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	defer func() {
		os.RemoveAll(src)
		os.Remove("testdata") // when nothing else is there
	}()
	if err := os.WriteFile(filepath.Join(src, "worker.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg := "./e2e/" + filepath.ToSlash(src)
	vet := exec.Command(goTool(), "vet", pkg)
	vet.Dir = ".."
	if out, err := vet.CombinedOutput(); err != nil {
		t.Fatalf("go vet of the cookbook's worker: %v\n%s", err, out)
	}
	bin := filepath.Join(t.TempDir(), "worker")
	if err := goBuild(bin, pkg); err != nil {
		t.Fatalf("the cookbook's worker does not build: %v", err)
	}
	return bin
}

// TestCookbookClientWorkerRunsAsPrinted builds the cookbook's worker
// written with the client package, as printed, runs it, and drives it with
// jobs that complete and fail; SIGTERM drains and unregisters it.
//
// Not parallel: buildCookbookWorker builds in one directory per process.
func TestCookbookClientWorkerRunsAsPrinted(t *testing.T) {
	page := readPage(t, "cookbook.md")
	program := fencedBlock(t, page, "```go title=\"client-worker.go\"")
	worker := buildCookbookWorker(t, program)

	a := agqtest.Start(t, heartbeatEvery(time.Second))
	admin := a.Admin(t)
	cmd := exec.Command(worker)
	cmd.Env = append(cleanEnv(), "AGQ_ADDR="+a.Addr, "AGQ_WORKER_ID=reverser-2", "AGQ_KEY="+a.CreateKey(t, "worker", "reverser-2"))
	p := startProcess(t, "client-worker.go", cmd)
	waitWorker(t, admin, "reverser-2", "ACTIVE")

	ctx := context.Background()
	wait := func(doc string) jobView {
		t.Helper()
		id, err := admin.Do(ctx, "JOB.SUBMIT", doc).Text()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := admin.Do(ctx, "JOB.WAIT", id, 20).Text()
		if err != nil {
			t.Fatalf("JOB.WAIT %s: %v", id, err)
		}
		return decodeJob(t, raw)
	}
	if j := wait(`{"type":"reverse","payload":{"text":"hello, agq"}}`); j.Status != "completed" || j.worker() != "reverser-2" ||
		!strings.Contains(string(j.Result), `"output":"qga ,olleh"`) {
		t.Fatalf("job %+v, result %s", j, j.Result)
	}
	if j := wait(`{"type":"reverse","payload":{"text":""},"max_attempts":3}`); j.Status != "failed" || j.Attempt != 1 ||
		len(j.Errors) != 1 || j.Errors[0].Error != "nothing to reverse" {
		t.Fatalf("job %+v", j)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.waitExit(t, 20*time.Second); code != 0 {
		t.Fatalf("the worker exited %d after SIGTERM", code)
	}
	waitWorker(t, admin, "reverser-2", "UNREGISTERED")
}

// TestCookbookApprovalRunsAsPrinted builds the cookbook's approval worker
// as printed, runs it, and runs the shell lines that submit a refund and
// approve it, on the test node's address: they print what the page shows.
//
// Not parallel: buildCookbookWorker builds in one directory per process.
func TestCookbookApprovalRunsAsPrinted(t *testing.T) {
	page := readPage(t, "cookbook.md")
	worker := buildCookbookWorker(t, fencedBlock(t, page, "```go title=\"approval-worker.go\""))
	script := fencedBlock(t, page, "```sh title=\"approve.sh\"")
	shown := strings.TrimSpace(fencedBlock(t, page, "```text title=\"approval output\""))

	a := agqtest.Start(t, heartbeatEvery(time.Second))
	admin := a.Admin(t)
	cmd := exec.Command(worker)
	cmd.Env = append(cleanEnv(), "AGQ_ADDR="+a.Addr, "AGQ_WORKER_ID=approver-1", "AGQ_KEY="+a.CreateKey(t, "worker", "approver-1"))
	startProcess(t, "approval-worker.go", cmd)
	waitWorker(t, admin, "approver-1", "ACTIVE")

	host, port, err := net.SplitHostPort(a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "approve.sh")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(script, "-p 6380", "-h "+host+" -p "+port)), 0o644); err != nil {
		t.Fatal(err)
	}
	run := exec.Command("sh", "-e", path)
	run.Env = append(cleanEnv(), "REDISCLI_AUTH="+a.AdminKey)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("approve.sh: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); !agqtest.LinesMatch(strings.Split(shown, "\n"), strings.Split(got, "\n")) {
		t.Fatalf("approve.sh printed:\n%s\nthe page shows:\n%s", got, shown)
	}
}
