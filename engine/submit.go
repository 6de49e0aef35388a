package engine

import (
	"context"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/store"
)

// Submit stores one job with the node's next group of single
// submissions, sharing its commit; it is handed straight to a waiting pop
// when one can run it. A job whose id exists with the same contents is the
// existing job, not a second one.
func (e *Engine) Submit(ctx context.Context, job api.NewJob) (api.SubmitResult, error) {
	res, err := e.submitOne(ctx, storeNewJob(job))
	return apiSubmitResult(res), apiError(err)
}

func (e *Engine) submitOne(ctx context.Context, job store.NewJob) (store.SubmitResult, error) {
	if err := checkAfter([]store.NewJob{job}); err != nil {
		return store.SubmitResult{}, err
	}
	out, err := e.groups.submits.Do(ctx, job)
	if err != nil {
		return store.SubmitResult{}, err
	}
	return out.res, out.err
}

// SubmitBatch stores jobs in one transaction of their own: a bad one
// stores none.
func (e *Engine) SubmitBatch(ctx context.Context, jobs []api.NewJob) ([]api.SubmitResult, error) {
	// A copy of their own: their trace context becomes the submission
	// spans'.
	res, err := e.submitBatch(ctx, storeNewJobs(jobs))
	return apiSubmitResults(res), err
}

func (e *Engine) submitBatch(ctx context.Context, jobs []store.NewJob) ([]store.SubmitResult, error) {
	if err := checkAfter(jobs); err != nil {
		return nil, apiError(err)
	}
	spans := e.startSubmissions(jobs)
	var res []store.SubmitResult
	err := e.transition(ctx, func() (Effects, error) {
		var notes []store.ReadyNote
		var err error
		res, notes, err = e.store.JobsSubmit(ctx, jobs)
		endSubmissions(spans, res, nil, err)
		if err != nil {
			return Effects{}, err
		}
		return Effects{Ready: notes, Events: submittedEvents(jobs, res, nil)}, nil
	})
	return res, err
}

// submit is Submit for one job, SubmitBatch for more.
func (e *Engine) submit(ctx context.Context, jobs []api.NewJob) ([]api.SubmitResult, error) {
	if len(jobs) > 1 {
		return e.SubmitBatch(ctx, jobs)
	}
	r, err := e.Submit(ctx, jobs[0])
	if err != nil {
		return nil, err
	}
	return []api.SubmitResult{r}, nil
}

// Push is LPUSH: Submit, answering the queue's ready depth once the jobs
// committed, as Redis answers it: the jobs pushed still count when waiting
// pops took them at once — handed over in the submission's transaction,
// or claimed before the count — since Redis serves blocked clients only
// after it replies. A script's push of one job answers at least 1.
func (e *Engine) Push(ctx context.Context, queue string, jobs []api.NewJob) (int64, error) {
	res, err := e.submit(ctx, jobs)
	if err != nil {
		return 0, err
	}
	n, err := e.PushDepths(ctx, queue, []api.Pushed{{Jobs: jobs, Results: res}})
	if err != nil {
		return 0, err
	}
	return n[0], nil
}
