package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// Jobs after other jobs (JOB.SUBMIT's after): a child waits pending until
// its parents ended. A parent's end marks it in its own transaction; the
// engine settles the mark once that committed (settle), and the leader's
// sweep settles whatever a crash or another path left (SettleDependencies).

// settleRound bounds the marks one settling transaction takes.
const settleRound = 1000

// maxSettleRounds bounds the rounds settled on a report's path: a deeper
// cascade or a larger fan-out is left to the leader's sweep.
const maxSettleRounds = 50

// checkAfter refuses an after naming the job itself or a job later in the
// same batch: a graph is submitted parents first, so no cycle can be made.
func checkAfter(jobs []records.NewJob) error {
	pos := make(map[string]int, len(jobs))
	for i, j := range jobs {
		if _, ok := pos[j.ID]; !ok {
			pos[j.ID] = i
		}
	}
	for i, j := range jobs {
		for _, p := range j.After {
			if k, ok := pos[p]; ok && k >= i {
				err := error(&records.ParentNotFoundError{ID: p})
				if len(jobs) > 1 {
					err = fmt.Errorf("job %d: %w", i, err)
				}
				return err
			}
		}
	}
	return nil
}

// settle settles the dependencies of jobs that ended with children, and
// what that settling cancelled in turn, round after round, publishing each
// round's effects.
func (e *Engine) settle(ctx context.Context, ids []string) {
	for range maxSettleRounds {
		st, err := e.store.DependenciesSettle(ctx, ids, settleRound)
		if err != nil {
			e.log.Warn().Err(err).Msg("settling dependencies; the leader's sweep will")
			return
		}
		e.publish(ctx, settledEffects(st))
		next := make([]string, 0, len(st.Cancelled))
		for _, c := range st.Cancelled {
			next = append(next, c.ID)
		}
		if st.More {
			next = append(next, ids...)
		}
		if len(next) == 0 {
			return
		}
		ids = next
	}
}

// SettleDependencies is the leader's sweep: it settles the oldest marks,
// up to limit, of the namespace of the oldest, and the cascades they
// start there, and answers how many it took.
func (e *Engine) SettleDependencies(ctx context.Context, limit int) (int, error) {
	st, err := e.store.DependenciesSettle(ctx, nil, limit)
	if err != nil {
		// The walks do not wait for the settling: a mark that fails
		// must not hold a restore or a cascade up.
		walked, werr := e.sweepWalks(ctx, limit)
		return walked, errors.Join(err, werr)
	}
	in := e.in(cmp.Or(st.Namespace, e.ns))
	in.publish(ctx, settledEffects(st))
	if len(st.Cancelled) > 0 {
		ids := make([]string, len(st.Cancelled))
		for i, c := range st.Cancelled {
			ids[i] = c.ID
		}
		in.settle(ctx, ids)
	}
	n := len(st.Released) + len(st.Cancelled)
	if st.More {
		n = max(n, limit)
	}
	walked, err := e.sweepWalks(ctx, limit)
	return n + walked, err
}

// settledEffects: released jobs wake pops and say ready; cancelled ones
// wake JOB.WAITs and say cancelled.
func settledEffects(st store.Settled) effects {
	fx := effects{Effects: records.Effects{Ready: store.ReleasedNotes(st.Released)}}
	for _, r := range st.Released {
		event := "ready"
		if r.Woken {
			event = "woken"
		}
		fx.Events = append(fx.Events, StatusEvent{JobID: r.ID, Queue: r.Queue, Event: event, Status: r.Status})
	}
	for _, c := range st.Cancelled {
		fx.Done = append(fx.Done, c.ID)
		fx.Events = append(fx.Events, StatusEvent{JobID: c.ID, Queue: c.Queue, Event: records.StatusCancelled,
			Status: records.StatusCancelled, Attempt: c.Attempt})
	}
	return fx
}

// attachParents gives each claimed job that has parents their statuses
// and, within the payload limit, their results: jobs of its namespace.
func (e *Engine) attachParents(ctx context.Context, jobs []records.Job) error {
	for i := range jobs {
		if jobs[i].After == nil {
			continue
		}
		ns := cmp.Or(jobs[i].Namespace, e.ns)
		parents, truncated, err := e.store.JobParentsOf(ctx, ns, jobs[i].After, e.cfg.MaxParentResults)
		if err != nil {
			return err
		}
		jobs[i].Parents, jobs[i].ParentsTruncated = parents, truncated
	}
	return nil
}

// JobChildren is JOB.CHILDREN: a page of the jobs after job id, past
// cursor, in id order, with their statuses; a refusal naming the job when
// it does not exist.
func (e *Engine) JobChildren(ctx context.Context, id, cursor string, limit int) ([]records.JobState, error) {
	kids, err := e.store.JobChildren(ctx, id, cursor, limit)
	return kids, refusal(aJob, id, err)
}

// parentsPage is how many parents one JOB.PARENTS reply holds at most.
const parentsPage = 100

// JobParents is JOB.PARENTS: a page of the parents of a job, after
// cursor, with their results, for the worker holding the job (or an
// admin, worker ""). The page ends early where the results would pass the
// payload limit; next is "" after the last page.
func (e *Engine) JobParents(ctx context.Context, worker, id, cursor string) (page map[string]records.ParentState, next string, err error) {
	j, err := e.store.JobGet(ctx, id)
	if err != nil {
		return nil, "", refusal(aJob, id, err)
	}
	if worker != "" {
		switch {
		case j.Status != records.StatusRunning:
			return nil, "", refusal(aJob, id, &records.StateError{Status: j.Status})
		case j.WorkerID == nil || *j.WorkerID != worker:
			return nil, "", refusal(aJob, id, &records.NotOwnerError{Owner: *j.WorkerID})
		}
	}
	rows, err := e.store.JobParentsPage(ctx, id, cursor, parentsPage)
	if err != nil {
		return nil, "", err
	}
	page = make(map[string]records.ParentState, len(rows))
	var size int64
	for i, r := range rows {
		size += int64(len(r.Result))
		if i > 0 && size > e.cfg.MaxParentResults {
			return page, rows[i-1].ID, nil
		}
		page[r.ID] = r.ParentState
	}
	if len(rows) == parentsPage {
		next = rows[len(rows)-1].ID
	}
	return page, next, nil
}
