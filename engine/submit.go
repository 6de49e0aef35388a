package engine

import (
	"context"
	"slices"
	"time"

	"github.com/agq/agq/records"
)

// Submit stores one job with the node's next group of single
// submissions: it joins the group at once and answers how to await its
// outcome, so that a pipeline of submissions shares one commit instead of
// waiting for one each. The job is handed straight to a waiting pop when
// one can run it; a job whose id exists with the same contents is the
// existing job, not a second one.
//
// The job is submitted in e's namespace: its id, unique key, queue and
// parents are that namespace's.
func (e *Engine) Submit(job records.NewJob) (wait func(context.Context) (records.SubmitResult, error)) {
	job.Namespace = e.ns
	if err := checkAfter([]records.NewJob{job}); err != nil {
		return func(context.Context) (records.SubmitResult, error) { return records.SubmitResult{}, err }
	}
	// The namespace's settings come from this node's cache: no round
	// trip, unless it is a second old.
	ns, counted, err := e.counted(context.Background())
	if err != nil || counted {
		return func(ctx context.Context) (records.SubmitResult, error) {
			if err != nil {
				return records.SubmitResult{}, err
			}
			res, err := e.submitCounted(ctx, ns, []records.NewJob{job}, false)
			if err != nil {
				return records.SubmitResult{}, err
			}
			return res[0], nil
		}
	}
	pending := e.groups.submits.Add(job)
	return func(ctx context.Context) (records.SubmitResult, error) {
		out, err := pending.Wait(ctx)
		if err != nil {
			return records.SubmitResult{}, err
		}
		return out.res, out.err
	}
}

// SubmitBatch stores jobs in one transaction of their own: a bad one
// stores none.
func (e *Engine) SubmitBatch(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, error) {
	jobs = e.placed(jobs)
	if err := checkAfter(jobs); err != nil {
		return nil, err
	}
	if ns, counted, err := e.counted(ctx); err != nil || counted {
		if err != nil {
			return nil, err
		}
		return e.submitCounted(ctx, ns, jobs, true)
	}
	return e.submitWith(ctx, jobs, e.store.JobsSubmit)
}

// submitWith stores jobs, of e's namespace, by insert in a transition of
// their own: traced, and announced once committed.
func (e *Engine) submitWith(ctx context.Context, jobs []records.NewJob,
	insert func(context.Context, []records.NewJob) ([]records.SubmitResult, []records.ReadyNote, error)) ([]records.SubmitResult, error) {
	spans := e.startSubmissions(jobs)
	var res []records.SubmitResult
	err := e.transition(ctx, func() (effects, error) {
		var notes []records.ReadyNote
		var err error
		res, notes, err = insert(ctx, jobs)
		endSubmissions(spans, res, nil, err)
		if err != nil {
			return effects{}, err
		}
		return effects{Effects: records.Effects{Ready: notes}, Events: submittedEvents(jobs, res, nil)}, nil
	})
	return res, err
}

// placed is jobs submitted in e's namespace (a copy: the caller's jobs
// stay as they were).
func (e *Engine) placed(jobs []records.NewJob) []records.NewJob {
	jobs = slices.Clone(jobs)
	for i := range jobs {
		jobs[i].Namespace = e.ns
	}
	return jobs
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

// PushDepths answers LPUSHes to one queue that committed together, in the
// order they were sent, with one count of the queue for all of them.
// Redis answers each LPUSH with the queue's length right after it; the
// count taken after the last stands for the last, and each earlier push
// answers it less the ready jobs pushed after it, but never less than the
// jobs pushed so far in the run. So the replies grow within the run, each
// counts at least the jobs its own push made ready (plus, as for Push,
// those handed at once to waiting pops), and a script filling an empty
// queue sees 1, 2, 3… as Redis answers it.
func (e *Engine) PushDepths(ctx context.Context, queue string, pushes []records.Pushed) ([]int64, error) {
	now := e.clock.Now()
	ready := make([]int64, len(pushes))
	handed := make([]int64, len(pushes))
	var total int64
	for i, p := range pushes {
		ready[i], handed[i] = pushCounts(p, now)
		total += ready[i]
	}
	n, err := e.pushedDepth(ctx, queue, total)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(pushes))
	var readySoFar, handedSoFar int64
	for i := range pushes {
		readySoFar += ready[i]
		handedSoFar += handed[i]
		out[i] = max(n-(total-readySoFar), readySoFar) + handedSoFar
	}
	return out, nil
}

// pushCounts counts a push's jobs that it made ready and those handed at
// once to waiting pops; jobs that existed already or are due later count
// neither.
func pushCounts(p records.Pushed, now time.Time) (ready, handed int64) {
	for i, r := range p.Results {
		switch {
		case !r.Created || p.Jobs[i].RunAt.After(now):
		case r.Delivered != nil:
			handed++
		default:
			ready++
		}
	}
	return ready, handed
}
