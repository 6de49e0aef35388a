package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrAwaiting is returned by WaitSignal and WaitJobs when the job went to
// wait: the handler returns it, and agq delivers the job again when the
// wait ends.
var ErrAwaiting = errors.New("client: the job is awaiting")

// ErrWaitTimedOut is wrapped by the error of a wait whose deadline passed
// before its signal, or before every awaited job ended.
var ErrWaitTimedOut = errors.New("client: the wait timed out")

// WaitTimeoutError is a wait's timeout; Pending names the awaited jobs not
// ended by then (WaitJobs).
type WaitTimeoutError struct{ Pending []string }

func (e *WaitTimeoutError) Error() string {
	if len(e.Pending) == 0 {
		return ErrWaitTimedOut.Error()
	}
	return fmt.Sprintf("%s: %d jobs had not ended", ErrWaitTimedOut, len(e.Pending))
}

func (e *WaitTimeoutError) Unwrap() error { return ErrWaitTimedOut }

// AwaitedJob is how an awaited job ended; Result is nil when the results
// did not fit (AwaitedJobs.Truncated).
type AwaitedJob struct {
	Status string          `json:"status"`
	Result json.RawMessage `json:"result"`
}

// AwaitedJobs is the outcome of WaitJobs: each job by id.
type AwaitedJobs struct {
	Jobs map[string]AwaitedJob `json:"jobs"`
	// Truncated: the results passed agq's payload limit; statuses only.
	Truncated bool `json:"jobs_truncated"`
}

// waitOutput is a STEP.WAIT's output of either kind.
type waitOutput struct {
	Signal  string          `json:"signal"`
	Payload json.RawMessage `json:"payload"`
	Timeout bool            `json:"timeout"`
	Pending []string        `json:"pending"`
	AwaitedJobs
}

// WaitSignal waits, durably, for the signal name sent to the job
// (Producer.Signal, JOB.SIGNAL) as its step stepID, up to timeout (0: no
// deadline). A signal already sent is decoded into T at once. Otherwise
// the job goes to wait and WaitSignal returns an error wrapping
// ErrAwaiting, which the handler returns; in the delivery after the wait
// ended the same call returns the signal's payload, or a
// *WaitTimeoutError.
func WaitSignal[T any](ctx context.Context, j *Job, stepID, name string, timeout time.Duration) (T, error) {
	var zero T
	out, err := j.wait(ctx, stepID, []any{"SIGNAL", name}, timeout)
	if err != nil {
		return zero, err
	}
	var v T
	if err := json.Unmarshal(out.Payload, &v); err != nil {
		return zero, Permanent(fmt.Errorf("client: wait %s: decoding signal %s: %w", stepID, name, err))
	}
	return v, nil
}

// WaitJobs waits, durably, as the job's step stepID, until every job of
// ids has ended, up to timeout (0: no deadline). When they all have, it
// returns how each ended at once; otherwise as WaitSignal.
func WaitJobs(ctx context.Context, j *Job, stepID string, ids []string, timeout time.Duration) (AwaitedJobs, error) {
	args := make([]any, 0, len(ids)+1)
	args = append(args, "JOBS")
	for _, id := range ids {
		args = append(args, id)
	}
	out, err := j.wait(ctx, stepID, args, timeout)
	if err != nil {
		return AwaitedJobs{}, err
	}
	return out.AwaitedJobs, nil
}

// wait sends STEP.WAIT with what and timeout: the wait's output, or an
// error when it goes to wait or timed out.
func (j *Job) wait(ctx context.Context, stepID string, what []any, timeout time.Duration) (waitOutput, error) {
	if timeout > 0 {
		secs := strconv.FormatFloat(max(timeout.Seconds(), 1), 'f', -1, 64)
		what = append(what, "TIMEOUT", secs)
	}
	if err := j.flushHeld(); err != nil {
		return waitOutput{}, err
	}
	reply, err := j.stepCommand(ctx, "STEP.WAIT", stepID, what...)
	if err != nil {
		return waitOutput{}, err
	}
	if until, ok := strings.CutPrefix(reply, "AWAITING "); ok {
		j.endDelivery()
		return waitOutput{}, fmt.Errorf("%w until %s", ErrAwaiting, until)
	}
	var out waitOutput
	if err := json.Unmarshal([]byte(reply), &out); err != nil {
		return waitOutput{}, fmt.Errorf("client: STEP.WAIT %s answered %q: %w", stepID, reply, err)
	}
	if out.Timeout {
		return waitOutput{}, &WaitTimeoutError{Pending: out.Pending}
	}
	return out, nil
}
