package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A step's completion is held briefly for the job's next call to agq, so
// that it shares that call's round trip and commit: the next step's begin
// carries it (STEP.COMPLETE … NEXT), and the final report is pipelined
// behind it; any other step call sends it first. A job of n steps then
// costs n+1 round trips instead of 2n+1. A handler that goes on for longer
// than heldStepFor before its next call has the completion sent alone
// then, so that a finished step's output is kept soon whatever the
// handler does next.
const heldStepFor = 50 * time.Millisecond

// heldStep is a step's completion not sent yet.
type heldStep struct {
	id     string
	output string
}

// heldSteps is a delivery's completion held (at most one: the last step
// that ended).
type heldSteps struct {
	// mu is held while the completion is sent, so that the job's step
	// calls reach agq in the order the handler made them.
	mu    sync.Mutex
	held  *heldStep
	timer *time.Timer
}

// take returns the completion held, if any, and holds none. Called with
// mu held.
func (h *heldSteps) take() *heldStep {
	d := h.held
	h.held = nil
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	return d
}

// holdCompletion holds step id's completion with output until the job's
// next call, or heldStepFor.
func (j *Job) holdCompletion(id, output string) error {
	h := &j.run.steps
	h.mu.Lock()
	defer h.mu.Unlock()
	// Two steps run at once by one handler: the first is sent now.
	if err := j.sendHeld(h.take()); err != nil {
		return err
	}
	h.held = &heldStep{id: id, output: output}
	h.timer = time.AfterFunc(heldStepFor, func() {
		if err := j.flushHeld(); err != nil && !errors.Is(err, ErrCancelled) && !errors.Is(err, ErrDeliveryLost) {
			j.w.log.Warn("could not complete the step", "job_id", j.ID(), "error", err)
		}
	})
	return nil
}

// flushHeld sends the completion held, if any, before another step call.
func (j *Job) flushHeld() error {
	h := &j.run.steps
	h.mu.Lock()
	defer h.mu.Unlock()
	return j.sendHeld(h.take())
}

// sendHeld sends completion d alone (none: nothing to send). Work done is
// kept even when the handler's ctx ended meanwhile.
func (j *Job) sendHeld(d *heldStep) error {
	if d == nil {
		return nil
	}
	ctx, cancel := detached(context.Background())
	defer cancel()
	_, err := j.stepCommand(ctx, "STEP.COMPLETE", d.id, d.output)
	return err
}

// beginStep begins step id with body (STEP.BEGIN's JSON), completing the
// step held in the same call. A ctx that ended before the call still has
// the held step completed.
func (j *Job) beginStep(ctx context.Context, id, body string) (string, error) {
	h := &j.run.steps
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.take()
	if d == nil {
		return j.stepCommand(ctx, "STEP.BEGIN", id, body)
	}
	if ctx.Err() == nil {
		reply, err := j.stepCommand(ctx, "STEP.COMPLETE", d.id, d.output, "NEXT", id, body)
		if err == nil || ctx.Err() == nil {
			return reply, err
		}
	}
	// The handler's ctx ended before agq answered: the step is completed
	// alone (a completion sent again answers OK).
	if err := j.sendHeld(d); err != nil {
		return "", err
	}
	return "", ctx.Err()
}

// takeHeld is the completion held once the handler returned, for the
// final report to carry; the timer no longer sends it.
func (r *runningJob) takeHeld() *heldStep {
	h := &r.steps
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.take()
}
