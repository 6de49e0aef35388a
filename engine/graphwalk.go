package engine

import (
	"cmp"
	"context"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// Walks down a job graph (restoring what a parent's end cancelled,
// JOB.CANCEL … CASCADE) go in bounded batches, each its own transaction
// (store.GraphWalk): the command that starts one carries it to its end
// after its own commit, round after round, and the leader's sweep carries
// on whatever a crash or the command's deadline left.

// walkRound bounds the marks one batch of a walk takes.
const walkRound = 1000

// maxWalkRounds bounds the batches run on a command's path.
const maxWalkRounds = 100

// walk runs the walk of kind from the marks of ids until none is left.
func (e *Engine) walk(ctx context.Context, kind string, ids []string) {
	w, err := e.store.GraphWalk(ctx, kind, ids, walkRound)
	if err != nil {
		e.log.Warn().Err(err).Str("walk", kind).Msg("walking a job graph; the leader's sweep will carry on")
		return
	}
	e.walkOn(ctx, kind, ids, w)
}

// walkOn publishes a batch of a walk, w, taken from the marks of ids,
// and carries the walk on until no mark is left: restored jobs announced
// "retried", cancelled ones "cancelled", running ones "cancel_requested"
// with their holders told, and the jobs to settle settled — a cascade's
// once it is over, so that no child it is about to cancel is released
// first.
func (e *Engine) walkOn(ctx context.Context, kind string, ids []string, w store.Walked) {
	var held []string
	defer func() {
		if len(held) > 0 {
			e.settle(ctx, held)
		}
	}()
	for round := 1; ; round++ {
		fx := walkedEffects(w)
		if kind == store.WalkCascade {
			held, fx.Parents = append(held, fx.Parents...), nil
		}
		e.publish(ctx, fx)
		if len(w.Next) == 0 && !w.More || round == maxWalkRounds {
			return
		}
		if len(w.Next) > 0 {
			ids = w.Next // else the marks of ids the batch left
		}
		var err error
		if w, err = e.store.GraphWalk(ctx, kind, ids, walkRound); err != nil {
			e.log.Warn().Err(err).Str("walk", kind).Msg("walking a job graph; the leader's sweep will carry on")
			return
		}
	}
}

// flushChildren moves jobs_children's pending entries where a walk's
// probes, one a job, find them at once.
func (e *Engine) flushChildren(ctx context.Context) {
	if err := e.store.FlushChildrenIndex(ctx); err != nil {
		e.log.Debug().Err(err).Msg("flushing the children index before a walk")
	}
}

// walkedEffects are what one batch of a walk means to the rest of agq.
func walkedEffects(w store.Walked) effects {
	fx := effects{Effects: records.Effects{Parents: w.Check}}
	if len(w.Restored) > 0 {
		fx.AsIs = append(fx.AsIs, named("retried", w.Restored...))
	}
	for _, c := range w.Cancelled {
		fx.Done = append(fx.Done, c.ID)
		fx.Events = append(fx.Events, StatusEvent{JobID: c.ID, Queue: c.Queue, Event: records.StatusCancelled,
			Status: records.StatusCancelled, Attempt: c.Attempt})
	}
	if len(w.Asked) > 0 {
		fx.AsIs = append(fx.AsIs, AsIs{IDs: w.Asked, Event: func(records.JobState) string { return "cancel_requested" },
			Tell: func(j records.JobState) []wakeup.Message {
				return []wakeup.Message{{Channel: "job.cancel", Payload: j.ID}}
			}})
	}
	return fx
}

// sweepWalks is the leader's share of the walks: a batch of each kind
// from the oldest marks, in the namespace of the oldest, carried on there
// from the marks it leaves; it answers how many jobs it moved.
func (e *Engine) sweepWalks(ctx context.Context, limit int) (int, error) {
	n := 0
	for _, kind := range []string{store.WalkRestore, store.WalkCascade} {
		w, err := e.store.GraphWalk(ctx, kind, nil, limit)
		if err != nil {
			return n, err
		}
		in := e.in(cmp.Or(w.Namespace, e.ns))
		in.publish(ctx, walkedEffects(w))
		n += len(w.Restored) + len(w.Cancelled) + len(w.Asked)
		if len(w.Next) > 0 {
			in.walk(ctx, kind, w.Next)
		}
	}
	return n, nil
}
