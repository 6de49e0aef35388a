package pipeline

import (
	"errors"
	"fmt"
)

// Sentinels that classify a failed run; match them with errors.Is on the
// error Run returns.
var (
	// ErrRefused marks a plan this worker will not run at all: malformed
	// JSON, a tool that is not offered, a path instead of a tool name, or an
	// argument the tool's policy forbids. Running it again cannot succeed.
	ErrRefused = errors.New("refused")

	// ErrTimeout marks a task or a whole job stopped by its timeout.
	ErrTimeout = errors.New("timed out")

	// ErrTaskFailed marks a task that exited with a non-zero status or was
	// killed by a signal it did not ask for.
	ErrTaskFailed = errors.New("task failed")

	// ErrStart marks a tool that could not be started (it vanished from
	// disk after agw started, or the system is out of processes).
	ErrStart = errors.New("could not start")
)

// Error is why a plan did not complete. Task is the 1-based index of the
// task at fault, or 0 when the plan or the job as a whole is (a bad plan, a
// job timeout, a cancellation). Kind is one of the sentinels above or, for
// a cancellation, the context's cause, so errors.Is sees through it.
type Error struct {
	Task int
	Tool string
	Msg  string
	Kind error
}

func (e *Error) Error() string {
	if e.Task > 0 {
		return fmt.Sprintf("task %d (%s): %s", e.Task, e.Tool, e.Msg)
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Kind }

// Retryable reports whether running the same plan again, here or on another
// worker, might succeed: everything except a refusal.
func Retryable(err error) bool { return err != nil && !errors.Is(err, ErrRefused) }

func refused(task int, tool, format string, args ...any) *Error {
	return &Error{Task: task, Tool: tool, Msg: "refused: " + fmt.Sprintf(format, args...), Kind: ErrRefused}
}
