package engine

import (
	"context"
	"errors"
	"time"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/store"
)

// Errors of pops, besides WorkerNotRegisteredError.
var (
	// ErrWorkerDraining: the worker is draining; it gets no job, and its
	// pop no error.
	ErrWorkerDraining = errors.New("worker is draining")
	// ErrCapabilitiesChanged: the worker registered again with other
	// capabilities since the caller read them; look it up and pop again.
	ErrCapabilitiesChanged = store.ErrCapabilitiesChanged
)

// Claim takes up to limit jobs for worker w from the first of the queues
// that has any for it, in one claim shared with the node's other pops.
func (e *Engine) Claim(ctx context.Context, w Worker, queues []string, limit int) (string, []Job, error) {
	res, err := e.groups.claims.Do(ctx, claimRequest{worker: w.ID, caps: w.Capabilities, queues: queues, limit: limit})
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
		e.traceDeliveries(w.ID, res.jobs)
		return res.queue, res.jobs, nil
	case errors.As(err, &inactive) && inactive.State == store.WorkerDraining:
		return "", nil, ErrWorkerDraining
	case errors.As(err, &inactive):
		return "", nil, &WorkerNotRegisteredError{ID: w.ID}
	}
	return "", nil, err
}

// A Wait is how a blocked pop waits, given by the wire layer: its client's
// connection parks, and wake-ups unpark it.
type Wait interface {
	// Next waits for a note on c (returned), the periodic re-check (nil),
	// or the end of the wait: done at the timeout, or err.
	Next(c <-chan store.ReadyNote) (note *store.ReadyNote, done bool, err error)
	// Out waits out the timeout, wake-ups aside.
	Out() error
	// Gone reports whether the client was seen leaving.
	Gone() bool
	// OnWake is what a wake-up must call besides filling its channel.
	OnWake() func()
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
func (e *Engine) PopWaiting(ctx context.Context, w Worker, refresh func() (Worker, error), queues []string, limit int, wait Wait) (string, []Job, error) {
	waiter := e.hub.NewWorkerWaiter(w.ID, queues, w.Capabilities, wait.OnWake())
	var received []store.ReadyNote // wake-ups not yet used
	defer func() {
		if waiter != nil {
			e.closeWaiter(waiter, received)
		}
	}()
	for {
		if job, ok := waiter.Handed(); ok {
			if wait.Gone() {
				e.giveBackNow(waiter.Worker(), []store.Job{*job})
				return "", nil, ErrClientGone
			}
			jobs := []store.Job{*job}
			e.traceDeliveries(waiter.Worker(), jobs)
			return job.Queue, jobs, nil
		}
		claimCtx, cancel := context.WithTimeout(ctx, e.cfg.CommandTimeout)
		queue, jobs, err := e.Claim(claimCtx, w, queues, limit)
		cancel()
		switch {
		case errors.Is(err, ErrCapabilitiesChanged):
			// Registered again, elsewhere, with other capabilities.
			if w, err = refresh(); err != nil {
				return "", nil, err
			}
			e.closeWaiter(waiter, received)
			received = nil
			waiter = e.hub.NewWorkerWaiter(w.ID, queues, w.Capabilities, wait.OnWake())
			continue
		case errors.Is(err, ErrWorkerDraining):
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
				return "", nil, ErrClientGone
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

// closeWaiter closes a pop's waiter, passing on its unused wake-ups, and
// gives back a job handed to it that the pop did not take.
func (e *Engine) closeWaiter(waiter *wakeup.Waiter, unused []store.ReadyNote) {
	waiter.Close(unused...)
	if job, ok := waiter.Handed(); ok {
		e.giveBackNow(waiter.Worker(), []store.Job{*job})
	}
}

// dropNoteFor removes one note for queue: the job just claimed used it.
func dropNoteFor(notes []store.ReadyNote, queue string) []store.ReadyNote {
	for i, n := range notes {
		if n.Queue == queue {
			return append(notes[:i], notes[i+1:]...)
		}
	}
	return notes
}

// WaitJob blocks until job id ends, as JOB.WAIT: it answers the job once
// completed, failed or cancelled, or found false when wait ends first.
func (e *Engine) WaitJob(ctx context.Context, id string, wait JobWait) (Job, bool, error) {
	jw := e.hub.NewJobWaiter(id, wait.OnWake())
	defer jw.Close()
	for {
		getCtx, cancel := context.WithTimeout(ctx, e.cfg.CommandTimeout)
		j, err := e.store.JobGet(getCtx, id)
		cancel()
		if err != nil {
			return j, false, jobError(id, err)
		}
		if store.IsTerminal(j.Status) {
			return j, true, nil
		}
		if done, err := wait.Next(jw.C()); done || err != nil {
			return Job{}, false, err
		}
	}
}

// A JobWait is how a JOB.WAIT waits, given by the wire layer.
type JobWait interface {
	// Next waits for a signal on c or the periodic re-check (false), or
	// the end of the wait (true, or err).
	Next(c <-chan struct{}) (done bool, err error)
	OnWake() func()
}

// popRecheck and waitRecheck are how long a blocked command trusts
// wake-ups alone before it looks at the database again. A pop's queues
// are re-checked by the hub every 15 s for notes that were lost, so its
// own re-check is the last resort for a job beyond what the hub reads; a
// JOB.WAIT has only its own (one lookup by id) for a completion notice
// lost with the node that sent it.
const (
	PopRecheck  = 5 * time.Minute
	WaitRecheck = 15 * time.Second
)
