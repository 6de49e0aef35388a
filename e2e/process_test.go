package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
)

// process is a program the tests run: agw, or the cookbook's worker.
type process struct {
	name     string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once the process has been waited for
	readDone chan struct{} // closed once its output is read to the end

	mu    sync.Mutex
	lines []string
}

// startAgw runs agw as worker id of the agq at addr with the worker key
// key; env adds or overrides settings ("AGW_TOOLS=sh,sleep"). Its log goes
// to the test log. It is killed, if it still runs, when the test ends.
func startAgw(t *testing.T, addr, id, key string, env ...string) *process {
	t.Helper()
	cmd := exec.Command(agwBinary(t))
	cmd.Env = append(cleanEnv(),
		"AGQ_ADDR="+addr, "AGQ_WORKER_ID="+id, "AGQ_KEY="+key,
		"AGW_CONCURRENCY=1", "AGW_SHUTDOWN_TIMEOUT=30s", "AGW_LOG_FORMAT=json")
	cmd.Env = append(cmd.Env, env...) // later entries win
	var p *process
	t.Cleanup(func() { // runs after startProcess's cleanup has read the whole log
		if p != nil && p.logContains(key) {
			t.Errorf("%s logged its key", id)
		}
	})
	p = startProcess(t, id, cmd)
	return p
}

// cleanEnv is the test's environment without agq's, agw's and redis-cli's
// settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGQ_") && !strings.HasPrefix(kv, "AGW_") && !strings.HasPrefix(kv, "REDISCLI_") {
			env = append(env, kv)
		}
	}
	return env
}

// startProcess starts cmd, copies what it prints (stdout and stderr) to
// the test log line by line, and kills it, if it still runs, when the test
// ends.
func startProcess(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	w.Close()
	p := &process{name: name, cmd: cmd, exited: make(chan struct{}), readDone: make(chan struct{})}
	go func() {
		defer close(p.readDone)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			t.Logf("%s | %s", name, line)
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.mu.Unlock()
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		<-p.readDone
		if p.logContains("WARNING: DATA RACE") {
			t.Errorf("%s had a data race", name)
		}
	})
	return p
}

// signal sends sig to the process.
func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %s: %v", p.name, err)
	}
}

// waitExit waits for the process to exit and returns its exit code.
func (p *process) waitExit(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		<-p.readDone
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("%s did not exit within %v", p.name, within)
		return -1
	}
}

// running reports whether the process has not exited.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// logContains reports whether a line of the process's output contains
// every part.
func (p *process) logContains(parts ...string) bool {
	return p.logCount(parts...) > 0
}

// logCount counts the lines of the process's output that contain every
// part.
func (p *process) logCount(parts ...string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, line := range p.lines {
		all := true
		for _, part := range parts {
			all = all && strings.Contains(line, part)
		}
		if all {
			n++
		}
	}
	return n
}

// waitLog waits until a line of the process's output contains every part.
func (p *process) waitLog(t *testing.T, within time.Duration, parts ...string) {
	t.Helper()
	agqtest.Eventually(t, within, func() error {
		if !p.logContains(parts...) {
			if !p.running() {
				return fmt.Errorf("%s exited", p.name)
			}
			return fmt.Errorf("%s has not logged %q", p.name, parts)
		}
		return nil
	})
}

// msg is how agw's JSON log names a message, for waitLog.
func msg(text string) string { return `"message":"` + text + `"` }
