package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/store"
)

// Durable steps (STEP.*): a job's holder names the steps of its work, and
// agq keeps their outputs so that a later delivery resumes after the last
// completed one. Each call is durable when answered. Begins and
// completions share commits in groups, as final reports do; the other
// calls take the careful path alone.

// checkStep refuses a step id that breaks its rule.
func checkStep(p api.StepParams) error {
	if !names.Step(p.StepID) {
		return &api.InvalidNameError{What: "step_id", Rule: names.StepRule}
	}
	return nil
}

// stepError names the job a step call's refusal is about.
func stepError(id string, err error) error {
	var notBegun *store.StepNotBegunError
	var attempts *store.StepAttemptsError
	var kind *store.StepKindError
	var limit *store.StepLimitError
	if errors.As(err, &notBegun) || errors.As(err, &attempts) || errors.As(err, &kind) || errors.As(err, &limit) {
		return refused(id, err)
	}
	return jobError(id, err)
}

// StepBegin is STEP.BEGIN: run the step now, or use the output it
// completed with in an earlier delivery for an equal input. It shares the
// commit of the next group of begins.
func (e *Engine) StepBegin(ctx context.Context, p api.StepBeginParams) (api.StepBeginResult, error) {
	if err := checkStep(p.StepParams); err != nil {
		return api.StepBeginResult{}, err
	}
	res, err := e.groups.stepBegins.Add(storeStepBegin(p)).Wait(ctx)
	if err != nil {
		return api.StepBeginResult{}, jobError(p.JobID, err)
	}
	return api.StepBeginResult(res.Result), stepError(p.JobID, res.Err)
}

// runStepBegins serves a group of STEP.BEGINs; a begin past its step's
// attempts fails the job.
func (e *Engine) runStepBegins(ctx context.Context, calls []store.StepBeginParams) []store.StepBeginOutcome {
	res, sfx := e.store.StepsBegin(ctx, calls)
	e.publish(ctx, stepEffects(sfx))
	return res
}

// StepComplete is STEP.COMPLETE: the step's output is kept. It shares the
// commit of the next group of completions.
func (e *Engine) StepComplete(ctx context.Context, p api.StepParams, output json.RawMessage) error {
	return e.StepCompleteLater(p, output)(ctx)
}

// StepCompleteLater adds a STEP.COMPLETE to its group at once and answers
// how to await its outcome, as ReportLater does for reports.
func (e *Engine) StepCompleteLater(p api.StepParams, output json.RawMessage) (wait func(context.Context) error) {
	if err := checkStep(p); err != nil {
		return func(context.Context) error { return err }
	}
	pending := e.groups.stepCompletes.Add(store.StepCompletion{StepParams: store.StepParams(p), Output: output})
	return func(ctx context.Context) error {
		res, gerr := pending.Wait(ctx)
		if gerr != nil {
			return jobError(p.JobID, gerr)
		}
		return stepError(p.JobID, res.Err)
	}
}

// runStepCompletes serves a group of STEP.COMPLETEs: step_completed for
// each step one completed.
func (e *Engine) runStepCompletes(ctx context.Context, calls []store.StepCompletion) []store.StepCompleteResult {
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
func (e *Engine) StepFail(ctx context.Context, p api.StepFailParams) (api.StepFailResult, error) {
	if err := checkStep(p.StepParams); err != nil {
		return api.StepFailResult{}, err
	}
	var res store.StepFailResult
	t, traced := e.stepTrace(ctx, store.StepParams(p.StepParams))
	err := e.transition(ctx, func() (Effects, error) {
		var sfx store.Effects
		var changed bool
		var err error
		res, changed, sfx, err = e.store.StepFail(ctx, storeStepFail(p))
		fx := stepEffects(sfx)
		if changed {
			fx.AsIs = append([]AsIs{stepNamed("step_failed", store.StepParams(p.StepParams))}, fx.AsIs...)
			if traced {
				// The step's failure ends the job's attempt too.
				now, outcome := time.Now(), store.StatusFailed
				if res.Retry {
					outcome = store.StatusRetrying
				}
				e.trace.StepEnded(attemptOf(t), p.StepID, t.StepBeganAt, now, p.Message)
				e.trace.AttemptEnded(attemptOf(t), t.StartedAt, now, outcome, p.Message)
			}
		}
		return fx, stepError(p.JobID, err)
	})
	return api.StepFailResult(res), err
}

// StepSleep is STEP.SLEEP: the job sleeps until its wake time, or, in a
// delivery after it woke, carries on.
func (e *Engine) StepSleep(ctx context.Context, p api.StepSleepParams) (api.StepSleepResult, error) {
	if err := checkStep(p.StepParams); err != nil {
		return api.StepSleepResult{}, err
	}
	var res store.StepSleepResult
	traces := e.attemptTraces(ctx, []string{p.JobID})
	err := e.transition(ctx, func() (Effects, error) {
		var sfx store.Effects
		var changed bool
		var err error
		res, changed, sfx, err = e.store.StepSleep(ctx, storeStepSleep(p))
		fx := Effects{Ready: sfx.Ready, Done: sfx.Done, Freed: sfx.Freed, Parents: sfx.Done}
		if changed {
			fx.AsIs = []AsIs{stepNamed("sleeping", store.StepParams(p.StepParams))}
			if t, ok := traces[p.JobID]; ok && res.Sleeping {
				e.trace.AttemptEnded(attemptOf(t), t.StartedAt, time.Now(), "sleeping", "")
			}
		}
		return fx, stepError(p.JobID, err)
	})
	return api.StepSleepResult(res), err
}

// JobSteps is JOB.STEPS: a page of the job's steps in the order first
// begun. A worker (p.Holder) reads only the steps of a job it holds.
func (e *Engine) JobSteps(ctx context.Context, p api.JobStepsParams) ([]api.Step, error) {
	steps, err := e.store.JobSteps(ctx, store.JobStepsParams(p))
	if errors.Is(err, store.ErrNotHolder) {
		err = api.ErrStepsNotHolder
	}
	if errors.Is(err, api.ErrStepsNotHolder) || errors.Is(err, store.ErrNotFound) {
		return nil, refused(p.JobID, err)
	}
	return apiSteps(steps), apiError(err)
}

// stepEffects are the effects of a step call that may have ended the job's
// attempt: announced as the job then is (retrying, failed, cancelled). A
// job it ended releases its children right after the commit, as a report's
// end does.
func stepEffects(sfx store.Effects) Effects {
	fx := Effects{Ready: sfx.Ready, Done: sfx.Done, Freed: sfx.Freed, Parents: sfx.Done}
	if len(sfx.Moved) > 0 {
		fx.AsIs = []AsIs{finishedAsIs(sfx.Moved)}
	}
	return fx
}

// stepNamed announces a step's event on its job.
func stepNamed(event string, p store.StepParams) AsIs {
	a := named(event, p.JobID)
	a.StepID = p.StepID
	return a
}
