package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// Durable steps (STEP.*): a job's holder names the steps of its work, and
// agq keeps their outputs so that a later delivery resumes after the last
// completed one. Each call is durable when answered. Begins and
// completions share commits in groups, as final reports do; the other
// calls take the locked path alone.

// inNamespace is step call p made in e's namespace: its job is looked for
// there, whichever group serves the call.
func (e *Engine) inNamespace(p records.StepParams) records.StepParams {
	p.Namespace = e.ns
	return p
}

// checkStep refuses a step id that breaks its rule.
func checkStep(p records.StepParams) error {
	if !names.Step(p.StepID) {
		return &records.InvalidNameError{What: "step_id", Rule: names.StepRule}
	}
	return nil
}

// StepBegin is STEP.BEGIN: run the step now, or use the output it
// completed with in an earlier delivery for an equal input. It joins the
// next group of begins at once, sharing its commit, and answers how to
// await its outcome, as StepComplete does.
func (e *Engine) StepBegin(p records.StepBeginParams) (wait func(context.Context) (records.StepBeginResult, error)) {
	if err := checkStep(p.StepParams); err != nil {
		return func(context.Context) (records.StepBeginResult, error) { return records.StepBeginResult{}, err }
	}
	p.StepParams = e.inNamespace(p.StepParams)
	pending := e.groups.stepBegins.Add(p)
	return func(ctx context.Context) (records.StepBeginResult, error) {
		res, err := pending.Wait(ctx)
		if err != nil {
			return records.StepBeginResult{}, refusal(aJob, p.JobID, err)
		}
		return res.Result, refusal(aJob, p.JobID, res.Err)
	}
}

// runStepBegins serves a group of STEP.BEGINs, a statement for the calls
// of each namespace, whose effects are published there; a begin past its
// step's attempts fails the job.
func (e *Engine) runStepBegins(ctx context.Context, calls []records.StepBeginParams) []store.StepBeginOutcome {
	return byNamespace(e, calls, stepBeginNamespace, func(e *Engine, calls []records.StepBeginParams) []store.StepBeginOutcome {
		res, sfx := e.store.StepsBegin(ctx, calls)
		e.publish(ctx, stepEffects(sfx))
		return res
	})
}

func stepBeginNamespace(c records.StepBeginParams) string { return c.Namespace }

func stepCompleteNamespace(c store.StepCompletion) string { return c.Namespace }

// StepComplete is STEP.COMPLETE: the step's output is kept. It joins the
// next group of completions at once, sharing its commit, and answers how
// to await its outcome, as Report does. With next (STEP.COMPLETE … NEXT)
// the completion goes on to begin the next step, in the same commit when
// it can, and its outcome is that begin's.
func (e *Engine) StepComplete(p records.StepParams, output json.RawMessage, next *records.StepBeginParams) (wait func(context.Context) (records.StepBeginResult, error)) {
	if err := checkStep(p); err != nil {
		return func(context.Context) (records.StepBeginResult, error) { return records.StepBeginResult{}, err }
	}
	p = e.inNamespace(p)
	if next != nil {
		if err := checkStep(next.StepParams); err != nil {
			return func(context.Context) (records.StepBeginResult, error) { return records.StepBeginResult{}, err }
		}
		n := *next
		n.StepParams = e.inNamespace(n.StepParams)
		next = &n
	}
	pending := e.groups.stepCompletes.Add(store.StepCompletion{StepParams: p, Output: output, Next: next})
	return func(ctx context.Context) (records.StepBeginResult, error) {
		res, gerr := pending.Wait(ctx)
		if gerr != nil {
			return records.StepBeginResult{}, refusal(aJob, p.JobID, gerr)
		}
		if res.Err != nil || next == nil {
			return records.StepBeginResult{}, refusal(aJob, p.JobID, res.Err)
		}
		return res.Next.Result, refusal(aJob, p.JobID, res.Next.Err)
	}
}

// runStepCompletes serves a group of STEP.COMPLETEs, a statement for the
// calls of each namespace: step_completed for each step one completed,
// published in its namespace.
func (e *Engine) runStepCompletes(ctx context.Context, calls []store.StepCompletion) []store.StepCompleteResult {
	return byNamespace(e, calls, stepCompleteNamespace, func(e *Engine, calls []store.StepCompletion) []store.StepCompleteResult {
		return e.completeSteps(ctx, calls)
	})
}

// completeSteps serves the STEP.COMPLETEs of a group made in e's
// namespace.
func (e *Engine) completeSteps(ctx context.Context, calls []store.StepCompletion) []store.StepCompleteResult {
	var traces []store.AttemptTrace
	if e.trace != nil {
		traces = make([]store.AttemptTrace, len(calls))
		for i, c := range calls {
			traces[i], _ = e.stepTrace(ctx, c.StepParams)
		}
	}
	res, sfx := e.store.StepsComplete(ctx, calls)
	fx := stepEffects(sfx)
	now := time.Now()
	for i, r := range res {
		if r.Changed {
			fx.AsIs = append(fx.AsIs, stepNamed("step_completed", calls[i].StepParams))
			if traces != nil && traces[i].TraceParent != "" {
				e.trace.StepEnded(attemptOf(traces[i]), calls[i].StepID, traces[i].StepBeganAt, now, "")
			}
		}
	}
	e.publish(ctx, fx)
	return res
}

// StepFail is STEP.FAIL: the job's attempt ends with the step's failure,
// retried or final as the retry policy decides with the step's attempts.
func (e *Engine) StepFail(ctx context.Context, p records.StepFailParams) (records.StepFailResult, error) {
	if err := checkStep(p.StepParams); err != nil {
		return records.StepFailResult{}, err
	}
	p.StepParams = e.inNamespace(p.StepParams)
	var res records.StepFailResult
	t, traced := e.stepTrace(ctx, p.StepParams)
	err := e.transition(ctx, func() (effects, error) {
		var sfx records.Effects
		var changed bool
		var err error
		res, changed, sfx, err = e.store.StepFail(ctx, p)
		fx := stepEffects(sfx)
		if changed {
			fx.AsIs = append([]AsIs{stepNamed("step_failed", p.StepParams)}, fx.AsIs...)
			if traced {
				// The step's failure ends the job's attempt too.
				now, outcome := time.Now(), records.StatusFailed
				if res.Retry {
					outcome = records.StatusRetrying
				}
				e.trace.StepEnded(attemptOf(t), p.StepID, t.StepBeganAt, now, p.Message)
				e.trace.AttemptEnded(attemptOf(t), t.StartedAt, now, outcome, p.Message)
			}
		}
		return fx, refusal(aJob, p.JobID, err)
	})
	return res, err
}

// StepSleep is STEP.SLEEP: the job sleeps until its wake time, or, in a
// delivery after it woke, carries on.
func (e *Engine) StepSleep(ctx context.Context, p records.StepSleepParams) (records.StepSleepResult, error) {
	if err := checkStep(p.StepParams); err != nil {
		return records.StepSleepResult{}, err
	}
	p.StepParams = e.inNamespace(p.StepParams)
	var res records.StepSleepResult
	traces := e.attemptTraces(ctx, []string{p.JobID})
	err := e.transition(ctx, func() (effects, error) {
		var sfx records.Effects
		var changed bool
		var err error
		res, changed, sfx, err = e.store.StepSleep(ctx, p)
		// A sleeping job is announced with its step below; one that
		// ended (its cancellation asked) by its status.
		fx := stored(sfx, "")
		if changed {
			fx.AsIs = []AsIs{stepNamed("sleeping", p.StepParams)}
			if t, ok := traces[p.JobID]; ok && res.Sleeping {
				e.trace.AttemptEnded(attemptOf(t), t.StartedAt, time.Now(), "sleeping", "")
			}
		}
		return fx, refusal(aJob, p.JobID, err)
	})
	return res, err
}

// JobSteps is JOB.STEPS: a page of the job's steps in the order first
// begun. A worker (p.Holder) reads only the steps of a job it holds.
func (e *Engine) JobSteps(ctx context.Context, p records.JobStepsParams) ([]records.Step, error) {
	steps, err := e.store.JobSteps(ctx, p)
	if errors.Is(err, records.ErrNotHolder) {
		err = records.ErrStepsNotHolder
	}
	if err != nil {
		return nil, refusal(aJob, p.JobID, err)
	}
	return steps, nil
}

// stepEffects are the effects of a step call that may have ended the job's
// attempt: announced as the job then is (retrying, failed, cancelled).
func stepEffects(sfx records.Effects) effects { return stored(sfx, records.StatusRetrying) }

// stepNamed announces a step's event on its job.
func stepNamed(event string, p records.StepParams) AsIs {
	a := named(event, p.JobID)
	a.StepID = p.StepID
	return a
}
