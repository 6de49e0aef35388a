// Package pipeline runs agq job plans: a list of tasks, each a tool from
// the worker's offered set with an argument vector, joined stdout to stdin
// the way a shell joins "sort -r | uniq -c", but with no shell anywhere.
//
// The tasks run at the same time, connected by pipes, exactly like a shell
// pipeline, rather than one after another through buffers. Streaming keeps
// memory bounded whatever the size of the intermediate data (a sequential
// run must either hold each intermediate result whole or cut it, and a cut
// intermediate silently corrupts the result), lets "head" end a pipeline
// early, and gives each tool the input behaviour it was written for.
//
// Every task runs in a process group of its own. A task's timeout, the
// job's timeout and the cancellation of the context all end the same way:
// SIGTERM to the whole group, SIGKILL after a grace period. When a task's
// leader exits, whatever it left running in its group is killed at once, so
// a task never outlives itself. Tools get a fresh temporary directory as
// working directory and TMPDIR, removed afterwards, and an environment with
// nothing of agw's secrets in it (see childEnv).
//
// This is not a sandbox. Tools run as agw's user and can read whatever that
// user can read; what the offered set and the argument policies prevent is
// running another program, writing files of the submitter's choosing, and
// setting the clock. Run agw as a dedicated unprivileged user.
package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Defaults for an Executor's zero fields.
const (
	DefaultMaxOutput  = 1 << 20
	DefaultStderrTail = 4 << 10
	DefaultKillGrace  = 5 * time.Second
	// readerGrace is how long the output readers may keep reading after
	// every task has exited and its group has been killed. Only a process
	// that left its group (setsid) can still hold a pipe open by then.
	readerGrace = 2 * time.Second
)

// Executor runs plans with the tools of one Toolset. It is safe for
// concurrent use; each Run is independent.
type Executor struct {
	Tools      *Toolset
	MaxOutput  int           // bytes of the last task's stdout kept (default 1 MiB)
	StderrTail int           // bytes of each task's stderr kept, from the end (default 4 KiB)
	KillGrace  time.Duration // from SIGTERM to SIGKILL (default 5s)
	Env        []string      // environment of every tool (default: childEnv of agw's)
	TempDir    string        // where per-job working directories go (default os.TempDir())
}

// Progress is passed to the progress callback each time a task exits.
type Progress struct {
	Finished int // tasks that have exited so far
	Total    int
	Percent  int // Finished as a whole percentage of Total
}

// Result is what a run produced, complete or not.
type Result struct {
	Output          string // the last task's stdout, at most MaxOutput bytes
	OutputTruncated bool
	Tasks           []TaskResult // one per started task, in pipeline order
}

// TaskResult is one entry of a job's "task_results".
type TaskResult struct {
	Tool string `json:"tool"`
	// ExitCode is the exit status, or 128 plus the signal number for a
	// task killed by a signal (the shell's convention), or -1 when unknown.
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"` // "SIGKILL", when killed by a signal
	Stderr     string `json:"stderr"`           // the last StderrTail bytes
	DurationMS int64  `json:"duration_ms"`
}

// Check refuses a plan this executor would not run: an unoffered tool, a
// path, a refused argument. Run checks too; Check lets a caller refuse
// before doing anything else.
func (e *Executor) Check(spec Spec) error {
	_, err := e.resolve(spec)
	return err
}

func (e *Executor) resolve(spec Spec) ([]string, error) {
	switch {
	case len(spec.Tasks) == 0:
		return nil, refused(0, "", "the plan has no tasks")
	case e.Tools == nil:
		return nil, refused(0, "", "this worker offers no tools")
	}
	paths := make([]string, len(spec.Tasks))
	for i, t := range spec.Tasks {
		path, err := e.Tools.lookup(i+1, t.Tool)
		if err != nil {
			return nil, err
		}
		if err := checkArgs(i+1, t.Tool, t.Args); err != nil {
			return nil, err
		}
		paths[i] = path
	}
	return paths, nil
}

// Run runs spec to the end, until its timeout, or until ctx is done. The
// Result holds whatever was produced even when the error is not nil. An
// error is an *Error; when ctx ended the run, its Kind is context.Cause(ctx).
// progress, when not nil, is called from Run's goroutine each time a task
// exits and must not block.
func (e *Executor) Run(ctx context.Context, spec Spec, progress func(Progress)) (Result, error) {
	paths, err := e.resolve(spec)
	if err != nil {
		return Result{}, err
	}
	if ctx.Err() != nil {
		return Result{}, cancelled(ctx)
	}
	dir, err := os.MkdirTemp(e.TempDir, "agw-job-")
	if err != nil {
		return Result{}, &Error{Msg: fmt.Sprintf("creating the job's directory: %v", err), Kind: ErrStart}
	}
	defer os.RemoveAll(dir)

	r := &run{
		exec:  e,
		spec:  spec,
		dir:   dir,
		grace: cmp.Or(e.KillGrace, DefaultKillGrace),
		out:   headBuffer{max: cmp.Or(e.MaxOutput, DefaultMaxOutput)},
		done:  make(chan *proc, len(spec.Tasks)),
	}
	env := e.Env
	if env == nil {
		env = childEnv(os.Environ())
	}
	r.env = append(append([]string(nil), env...), "TMPDIR="+dir)
	defer r.stopTimers()

	if err := r.start(paths); err != nil {
		return r.result(), err
	}
	runErr := r.wait(ctx, progress)
	return r.result(), runErr
}

func cancelled(ctx context.Context) *Error {
	cause := context.Cause(ctx)
	return &Error{Msg: "cancelled: " + cause.Error(), Kind: cause}
}

// run is the state of one Executor.Run.
type run struct {
	exec  *Executor
	spec  Spec
	dir   string
	env   []string
	grace time.Duration
	procs []*proc
	done  chan *proc

	out       headBuffer
	outR      *os.File
	outDone   chan struct{}
	stdinW    *os.File
	stdinDone chan struct{}

	timersMu      sync.Mutex
	timers        []*time.Timer
	timersStopped bool
}

// start creates the pipes and starts every task. On failure it kills and
// reaps whatever it had started.
func (r *run) start(paths []string) error {
	stdin, stdout, childEnds, err := r.pipes()
	if err != nil {
		return err
	}
	for i, t := range r.spec.Tasks {
		p := &proc{index: i + 1, task: t, stderr: tailBuffer{max: cmp.Or(r.exec.StderrTail, DefaultStderrTail)}}
		errR, errW, err := newPipe()
		if err == nil {
			childEnds = append(childEnds, errW)
			err = r.startOne(p, paths[i], stdin[i], stdout[i], errR, errW)
		}
		if err != nil {
			closeFiles(childEnds)
			r.abort()
			return err
		}
	}
	closeFiles(childEnds)
	r.readOutput()
	r.writeStdin()
	return nil
}

// pipes joins the tasks: stdin[i] and stdout[i] are task i's ends (stdin[0]
// nil without input), and childEnds every end a child gets, to close here
// once the children hold them. r.stdinW and r.outR are agw's ends. On
// failure it closes the child ends made so far.
func (r *run) pipes() (stdin, stdout, childEnds []*os.File, err error) {
	n := len(r.spec.Tasks)
	stdin, stdout = make([]*os.File, n), make([]*os.File, n)
	if r.spec.Stdin != "" {
		pr, pw, err := newPipe()
		if err != nil {
			return nil, nil, nil, err
		}
		stdin[0], r.stdinW = pr, pw
		childEnds = append(childEnds, pr)
	}
	for i := 0; i < n-1; i++ {
		pr, pw, err := newPipe()
		if err != nil {
			closeFiles(childEnds)
			return nil, nil, nil, err
		}
		stdout[i], stdin[i+1] = pw, pr
		childEnds = append(childEnds, pw, pr)
	}
	outR, outW, err := newPipe()
	if err != nil {
		closeFiles(childEnds)
		return nil, nil, nil, err
	}
	r.outR, stdout[n-1] = outR, outW
	childEnds = append(childEnds, outW)
	return stdin, stdout, childEnds, nil
}

func newPipe() (*os.File, *os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, &Error{Msg: fmt.Sprintf("creating a pipe: %v", err), Kind: ErrStart}
	}
	return pr, pw, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// readOutput reads the last task's stdout into r.out, passing each line to
// OnLine when it is set, and closes r.outDone at EOF.
func (r *run) readOutput() {
	r.outDone = make(chan struct{})
	go func() {
		defer close(r.outDone)
		if r.spec.OnLine == nil {
			_, _ = io.Copy(&r.out, r.outR)
			return
		}
		tap := &lineTap{fn: func(line string) { r.spec.OnLine(0, false, line) }}
		_, _ = io.Copy(io.MultiWriter(&r.out, tap), r.outR)
		tap.flush()
	}()
}

// writeStdin feeds the job's input to the first task, if it has any.
func (r *run) writeStdin() {
	if r.stdinW == nil {
		return
	}
	r.stdinDone = make(chan struct{})
	go func() {
		defer close(r.stdinDone)
		// EPIPE when the first task does not read all of its
		// input is its business, not an error of the run.
		_, _ = io.WriteString(r.stdinW, r.spec.Stdin)
		r.stdinW.Close()
	}()
}

// startOne starts one task and the goroutines that collect its stderr and
// wait for it.
func (r *run) startOne(p *proc, path string, stdin, stdout, errR, errW *os.File) error {
	p.cmd = &exec.Cmd{
		Path:        path,
		Args:        append([]string{p.task.Tool}, p.task.Args...),
		Env:         r.env,
		Dir:         r.dir,
		Stdout:      stdout,
		Stderr:      errW,
		SysProcAttr: sysProcAttr(),
	}
	if stdin != nil { // nil: /dev/null, never agw's own stdin
		p.cmd.Stdin = stdin
	}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		errR.Close()
		return &Error{Task: p.index, Tool: p.task.Tool, Msg: fmt.Sprintf("could not start: %v", err), Kind: ErrStart}
	}
	r.procs = append(r.procs, p)
	p.stderrR, p.stderrDone = errR, make(chan struct{})
	go func() {
		defer close(p.stderrDone)
		if r.spec.OnLine == nil {
			_, _ = io.Copy(&p.stderr, errR)
			return
		}
		tap := &lineTap{fn: func(line string) { r.spec.OnLine(p.index, true, line) }}
		_, _ = io.Copy(io.MultiWriter(&p.stderr, tap), errR)
		tap.flush()
	}()
	if p.task.Timeout > 0 {
		r.after(p.task.Timeout, func() {
			p.markTimedOut()
			r.terminate(p)
		})
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		p.ended = time.Now()
		p.state = p.cmd.ProcessState
		// The leader is gone; so must be anything it left behind.
		p.signal(syscall.SIGKILL)
		r.done <- p
	}()
	return nil
}

// abort kills and reaps the tasks started so far, after a failed start.
func (r *run) abort() {
	for _, p := range r.procs {
		p.signal(syscall.SIGKILL)
	}
	for range r.procs {
		<-r.done
	}
	r.outR.Close()
	if r.stdinW != nil {
		r.stdinW.Close()
	}
	r.collectStderr(time.Now().Add(readerGrace))
}

// wait collects the tasks as they exit, stopping them all when the job's
// timeout passes or ctx is done, then collects their output.
func (r *run) wait(ctx context.Context, progress func(Progress)) error {
	var jobTimeout <-chan time.Time
	if r.spec.Timeout > 0 {
		t := time.NewTimer(r.spec.Timeout)
		defer t.Stop()
		jobTimeout = t.C
	}
	var stopped *Error
	ctxDone := ctx.Done()
	total := len(r.procs)
	for finished := 0; finished < total; {
		select {
		case <-r.done:
			finished++
			if progress != nil {
				progress(Progress{Finished: finished, Total: total, Percent: finished * 100 / total})
			}
		case <-ctxDone:
			ctxDone = nil
			if stopped == nil {
				stopped = cancelled(ctx)
				r.terminateAll()
			}
		case <-jobTimeout:
			jobTimeout = nil
			if stopped == nil {
				stopped = &Error{Msg: fmt.Sprintf("job timed out after %s", r.spec.Timeout), Kind: ErrTimeout}
				r.terminateAll()
			}
		}
	}
	r.collectOutput()
	if stopped != nil {
		return stopped
	}
	for _, p := range r.procs {
		if err := p.failure(); err != nil {
			return err
		}
	}
	return nil
}

// collectOutput waits for the readers of stdout and stderr. Every task has
// exited and its group has been killed, so the pipes are at EOF unless a
// process escaped its group; such a process gets readerGrace, then its
// pipes are closed under it.
func (r *run) collectOutput() {
	deadline := time.Now().Add(readerGrace)
	_ = r.outR.SetReadDeadline(deadline)
	<-r.outDone
	r.outR.Close()
	r.collectStderr(deadline)
	if r.stdinW != nil {
		r.stdinW.Close() // unblocks the writer if an escaped process holds the read end
		<-r.stdinDone
	}
}

func (r *run) collectStderr(deadline time.Time) {
	for _, p := range r.procs {
		_ = p.stderrR.SetReadDeadline(deadline)
		<-p.stderrDone
		p.stderrR.Close()
	}
}

// terminate asks a task's group to stop and kills it after the grace period.
func (r *run) terminate(p *proc) {
	p.signal(syscall.SIGTERM)
	r.after(r.grace, func() { p.signal(syscall.SIGKILL) })
}

func (r *run) terminateAll() {
	for _, p := range r.procs {
		r.terminate(p)
	}
}

// after runs f after d, unless the run is over by then.
func (r *run) after(d time.Duration, f func()) {
	r.timersMu.Lock()
	defer r.timersMu.Unlock()
	if !r.timersStopped {
		r.timers = append(r.timers, time.AfterFunc(d, f))
	}
}

// stopTimers cancels pending timeouts and kills once every task is reaped:
// a late signal could otherwise reach a process group id reused by another
// program.
func (r *run) stopTimers() {
	r.timersMu.Lock()
	defer r.timersMu.Unlock()
	r.timersStopped = true
	for _, t := range r.timers {
		t.Stop()
	}
}

func (r *run) result() Result {
	res := Result{Output: string(r.out.Bytes()), OutputTruncated: r.out.truncated}
	for _, p := range r.procs {
		res.Tasks = append(res.Tasks, p.result())
	}
	return res
}
