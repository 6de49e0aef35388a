package pipeline

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one running task: the leader of its own process group.
type proc struct {
	index int // 1-based position in the pipeline
	task  Task
	cmd   *exec.Cmd

	stderr     tailBuffer
	stderrR    *os.File
	stderrDone chan struct{}

	started  time.Time
	ended    time.Time
	state    *os.ProcessState
	waitErr  error
	timedOut bool // stopped by its own timeout; written before the timer's signal
	mu       sync.Mutex
}

// signal sends sig to the task's whole process group. The error is
// ignored: ESRCH means the group is already gone, which is the goal.
func (p *proc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (p *proc) markTimedOut() {
	p.mu.Lock()
	p.timedOut = true
	p.mu.Unlock()
}

func (p *proc) wasTimedOut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.timedOut
}

// result describes the finished task for the job's task_results.
func (p *proc) result() TaskResult {
	r := TaskResult{
		Tool:       p.task.Tool,
		Stderr:     p.stderr.String(),
		DurationMS: p.ended.Sub(p.started).Milliseconds(),
		ExitCode:   -1,
	}
	if p.state == nil {
		return r
	}
	r.ExitCode = p.state.ExitCode()
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		// The shell's convention, so that "exit_code" alone is enough
		// to tell a kill from an exit.
		r.ExitCode = 128 + int(ws.Signal())
		r.Signal = signalName(ws.Signal())
	}
	return r
}

// failure explains why the task failed, or returns nil when it did not. A
// task killed by SIGPIPE did not fail: it wrote to a pipe whose reader had
// already finished, the way "seq 1000000 | head -1" ends in a shell.
func (p *proc) failure() *Error {
	e := &Error{Task: p.index, Tool: p.task.Tool, Kind: ErrTaskFailed}
	switch {
	case p.wasTimedOut():
		e.Msg, e.Kind = fmt.Sprintf("timed out after %s", p.task.Timeout), ErrTimeout
	case p.state == nil:
		e.Msg = fmt.Sprintf("could not be waited for: %v", p.waitErr)
	case p.state.Success():
		return nil
	default:
		ws, _ := p.state.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			if ws.Signal() == syscall.SIGPIPE {
				return nil
			}
			e.Msg = "killed by " + signalName(ws.Signal())
		} else {
			e.Msg = fmt.Sprintf("exited with status %d", p.state.ExitCode())
		}
		if line := lastLine(p.stderr.String()); line != "" {
			e.Msg += ": " + line
		}
	}
	return e
}

// lastLine picks the line of a task's stderr that best says what went
// wrong, shortened, for the job's error message (the whole tail is in
// task_results): the last one, unless it is GNU's "Try 'sort --help' for
// more information.", which follows the real message.
func lastLine(s string) string {
	var line string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && (line == "" || !strings.HasPrefix(l, "Try '")) {
			line = l
		}
	}
	if len(line) > 200 {
		line = string(trimPartialRuneEnd([]byte(line[:200]))) + "…"
	}
	return line
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS",
}

func signalName(s syscall.Signal) string {
	if name, ok := signalNames[s]; ok {
		return name
	}
	return fmt.Sprintf("signal %d", int(s))
}

// childEnv is the environment every tool gets: only what a text tool needs
// to find its way (PATH, HOME, locale, time zone). Everything else in agw's
// environment stays out, above all AGQ_KEY and whatever credentials the
// machine's service manager put there. POSIXLY_CORRECT stays out too, which
// argPolicy relies on.
func childEnv(environ []string) []string {
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "PATH", name == "HOME", name == "USER", name == "LOGNAME",
			name == "LANG", name == "LANGUAGE", name == "TZ",
			strings.HasPrefix(name, "LC_"):
			env = append(env, kv)
		}
	}
	return env
}
