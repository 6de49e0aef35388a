package engine

import (
	"context"

	"github.com/agq/agq/records"
)

// SubmitBatch stores jobs in one transaction of their own: a bad one
// stores none.
func (e *Engine) SubmitBatch(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, error) {
	// A copy of their own: their trace context becomes the submission
	// spans'.
	res, err := e.submitBatch(ctx, jobs)
	return res, err
}

func (e *Engine) submitBatch(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, error) {
	if err := checkAfter(jobs); err != nil {
		return nil, err
	}
	spans := e.startSubmissions(jobs)
	var res []records.SubmitResult
	err := e.transition(ctx, func() (effects, error) {
		var notes []records.ReadyNote
		var err error
		res, notes, err = e.store.JobsSubmit(ctx, jobs)
		endSubmissions(spans, res, nil, err)
		if err != nil {
			return effects{}, err
		}
		return effects{Effects: records.Effects{Ready: notes}, Events: submittedEvents(jobs, res, nil)}, nil
	})
	return res, err
}

// submit is Submit for one job, SubmitBatch for more.
func (e *Engine) submit(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, error) {
	if len(jobs) > 1 {
		return e.SubmitBatch(ctx, jobs)
	}
	r, err := e.Submit(jobs[0])(ctx)
	if err != nil {
		return nil, err
	}
	return []records.SubmitResult{r}, nil
}

// Push is LPUSH: Submit, answering the queue's ready depth once the jobs
// committed, as Redis answers it: the jobs pushed still count when waiting
// pops took them at once — handed over in the submission's transaction,
// or claimed before the count — since Redis serves blocked clients only
// after it replies. A script's push of one job answers at least 1.
func (e *Engine) Push(ctx context.Context, queue string, jobs []records.NewJob) (int64, error) {
	res, err := e.submit(ctx, jobs)
	if err != nil {
		return 0, err
	}
	n, err := e.PushDepths(ctx, queue, []records.Pushed{{Jobs: jobs, Results: res}})
	if err != nil {
		return 0, err
	}
	return n[0], nil
}
