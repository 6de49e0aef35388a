package engine

import (
	"cmp"
	"context"
	"errors"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// Claim takes up to limit jobs for worker w from the first of the queues
// that has any for it, in one claim shared with the node's other pops.
//
// A worker pops from its own namespace's queues (Worker.Namespace; e's when
// the record names none).
func (e *Engine) Claim(ctx context.Context, w records.Worker, queues []string, limit int) (string, []records.Job, error) {
	res, err := e.groups.claims.Do(ctx, claimRequest{ns: e.popNamespace(w), worker: w.ID, caps: w.Capabilities, queues: queues,
		limit: limit})
	if err == nil {
		err = res.err
	}
	var inactive *store.WorkerNotActiveError
	switch {
	case err == nil:
		if err := e.attachParents(ctx, res.jobs); err != nil {
			// Without their parents the jobs cannot be delivered: they
			// go back untouched.
			e.giveBackNow(w.ID, res.jobs)
			return "", nil, err
		}
		jobs := res.jobs
		e.traceDeliveries(w.ID, jobs)
		return res.queue, jobs, nil
	case errors.As(err, &inactive) && inactive.State == records.WorkerDraining:
		return "", nil, records.ErrWorkerDraining
	case errors.As(err, &inactive):
		return "", nil, &records.WorkerNotRegisteredError{ID: w.ID}
	}
	return "", nil, err
}

// PopWaiting takes up to limit jobs for worker w from the first of the
// queues that has any for it, waiting for one as wait says; no jobs and
// no error when the wait ends first. refresh looks the worker up again
// when it registered with other capabilities.
//
// The wait holds no database connection: the waiter is registered with the
// notification hub before the first check of the database, so a job
// committed between a check and the wait still wakes it. A wake-up the
// waiter does not use — the job went to another, it took a job from another
// queue, or it left — is passed on when it closes. A client seen leaving is
// never handed a job: what was claimed or handed for it goes back.
func (e *Engine) PopWaiting(ctx context.Context, w records.Worker, refresh func() (records.Worker, error), queues []string, limit int, wait api.Wait) (string, []records.Job, error) {
	waiter := e.hub.NewWorkerWaiter(e.popNamespace(w), w.ID, queues, w.Capabilities, wait.OnWake())
	var received []records.ReadyNote // wake-ups not yet used
	defer func() {
		if waiter != nil {
			e.closeWaiter(waiter, received)
		}
	}()
	for {
		if job, ok := waiter.Handed(); ok {
			if wait.Gone() {
				e.giveBackNow(waiter.Worker(), []records.Job{*job})
				return "", nil, records.ErrClientGone
			}
			jobs := []records.Job{*job}
			e.traceDeliveries(waiter.Worker(), jobs)
			return job.Queue, jobs, nil
		}
		claimCtx, cancel := context.WithTimeout(ctx, e.cfg.CommandTimeout)
		queue, jobs, err := e.Claim(claimCtx, w, queues, limit)
		cancel()
		switch {
		case errors.Is(err, records.ErrCapabilitiesChanged):
			// Registered again, elsewhere, with other capabilities.
			if w, err = refresh(); err != nil {
				return "", nil, err
			}
			e.closeWaiter(waiter, received)
			received = nil
			waiter = e.hub.NewWorkerWaiter(e.popNamespace(w), w.ID, queues, w.Capabilities, wait.OnWake())
			continue
		case errors.Is(err, records.ErrWorkerDraining):
			// A draining worker gets nothing: wait out the timeout
			// without taking wake-ups meant for others.
			e.closeWaiter(waiter, received)
			waiter = nil
			return "", nil, wait.Out()
		case err != nil:
			return "", nil, err
		}
		if len(jobs) > 0 {
			for range jobs {
				received = dropNoteFor(received, queue)
			}
			if wait.Gone() {
				// Claimed as the client left: give them back untouched.
				e.giveBackNow(w.ID, jobs)
				return "", nil, records.ErrClientGone
			}
			return queue, jobs, nil
		}
		// Nothing claimable: the jobs those notes announced went to others,
		// except that a timed note may have come a moment early.
		for _, note := range received {
			e.hub.RetryTimed(note)
		}
		received = nil
		note, done, err := wait.Next(waiter.C())
		if done || err != nil {
			return "", nil, err
		}
		if note != nil && note.N > 0 { // N 0: a job handed over
			received = append(received, *note)
		}
	}
}

// popNamespace is the namespace worker w pops from: its own.
func (e *Engine) popNamespace(w records.Worker) string {
	return cmp.Or(w.Namespace, e.ns)
}

// closeWaiter closes a pop's waiter, passing on its unused wake-ups, and
// gives back a job handed to it that the pop did not take.
func (e *Engine) closeWaiter(waiter *wakeup.Waiter, unused []records.ReadyNote) {
	waiter.Close(unused...)
	if job, ok := waiter.Handed(); ok {
		e.giveBackNow(waiter.Worker(), []records.Job{*job})
	}
}

// dropNoteFor removes one note for queue: the job just claimed used it.
func dropNoteFor(notes []records.ReadyNote, queue string) []records.ReadyNote {
	for i, n := range notes {
		if n.Queue == queue {
			return append(notes[:i], notes[i+1:]...)
		}
	}
	return notes
}

// WaitJob blocks until job id ends, as JOB.WAIT: it answers the job once
// completed, failed or cancelled, or found false when wait ends first.
func (e *Engine) WaitJob(ctx context.Context, id string, wait api.JobWait) (records.Job, bool, error) {
	jw := e.hub.NewJobWaiter(id, wait.OnWake())
	defer jw.Close()
	for {
		getCtx, cancel := context.WithTimeout(ctx, e.cfg.CommandTimeout)
		j, err := e.store.JobGet(getCtx, id)
		cancel()
		if err != nil {
			return j, false, refusal(aJob, id, err)
		}
		if records.IsTerminal(j.Status) {
			return j, true, nil
		}
		if done, err := wait.Next(jw.C()); done || err != nil {
			return records.Job{}, false, err
		}
	}
}
