package engine

import (
	"context"
	"time"

	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/records"
)

// Waits for the world (STEP.WAIT, JOB.SIGNAL): a step waits, durably, for a
// signal sent to its job or for other jobs to end. While it waits the job
// is awaiting and holds no worker; whatever ends the wait queues the job in
// the same commit, so the next delivery's STEP.WAIT answers the output.

// JobSignal is JOB.SIGNAL: the signal is stored once (per ID), and wakes
// the job's wait for it in the same commit.
func (e *Engine) JobSignal(ctx context.Context, p records.SignalParams) error {
	if !names.Step(p.Name) {
		return &records.InvalidNameError{What: "signal name", Rule: names.StepRule}
	}
	return e.transition(ctx, func() (effects, error) {
		res, sfx, err := e.store.JobSignal(ctx, p)
		fx := effects{Effects: sfx}
		if res.Stored {
			a := named("signal", p.JobID)
			a.Signal = p.Name
			fx.AsIs = append(fx.AsIs, a)
		}
		if res.Woke != "" {
			a := named("woken", p.JobID)
			a.StepID = res.Woke
			fx.AsIs = append(fx.AsIs, a)
		}
		return fx, refusal(aJob, p.JobID, err)
	})
}

// StepWait is STEP.WAIT: the wait's output when it has ended (or its
// signal is already stored), else the job awaits until its deadline.
func (e *Engine) StepWait(ctx context.Context, p records.StepWaitParams) (records.StepWaitResult, error) {
	if err := checkStep(p.StepParams); err != nil {
		return records.StepWaitResult{}, err
	}
	if p.Signal != "" && !names.Step(p.Signal) {
		return records.StepWaitResult{}, &records.InvalidNameError{What: "signal name", Rule: names.StepRule}
	}
	p.StepParams = e.inNamespace(p.StepParams)
	p.ResultBudget = e.cfg.MaxParentResults
	var res records.StepWaitResult
	traces := e.attemptTraces(ctx, []string{p.JobID})
	err := e.transition(ctx, func() (effects, error) {
		r, changed, sfx, err := e.store.StepWait(ctx, p)
		res = r
		// An awaiting job is announced with its step below; one that ended
		// (its cancellation asked) by its status.
		fx := stored(sfx, "")
		if changed {
			fx.AsIs = []AsIs{stepNamed("awaiting", p.StepParams)}
			if t, ok := traces[p.JobID]; ok {
				e.trace.AttemptEnded(attemptOf(t), t.StartedAt, time.Now(), "awaiting", "")
			}
		}
		return fx, refusal(aJob, p.JobID, err)
	})
	return res, err
}

// ExpireWaits is the leader's sweep of waits whose deadline passed, in
// every namespace: each completes with its timeout output and its job is
// queued, woken, announced in its namespace. It ends up to limit waits
// and answers how many.
func (e *Engine) ExpireWaits(ctx context.Context, limit int) (int, error) {
	byNS, err := e.store.WaitsExpire(ctx, limit)
	if err != nil {
		return 0, err
	}
	n := 0
	for ns, sfx := range byNS {
		fx := effects{Effects: records.Effects{Ready: sfx.Ready}}
		if len(sfx.Moved) > 0 {
			fx.AsIs = []AsIs{named("woken", sfx.Moved...)}
		}
		e.in(ns).publish(ctx, fx)
		n += len(sfx.Moved)
	}
	return n, nil
}

// JobSignals reads a job's first signals, up to limit, in arrival order.
func (e *Engine) JobSignals(ctx context.Context, id string, limit int) ([]records.Signal, error) {
	return e.store.JobSignals(ctx, id, limit)
}
