package commands

import (
	"cmp"
	"slices"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/store"
)

// Hand-offs: a single submission due now, while a worker able to run it
// waits in a pop on this node with nothing to claim, is inserted running
// for that worker and delivered when its group commits — one transaction
// instead of an insert, a wake-up and a claim (store.Handoff says when the
// database agrees). A waiter is taken out of the wake-ups for the group's
// commit and put back, woken, when its job was not handed over.

// offerJobs takes a waiting pop for each job of a group that may be handed
// over, highest priority first then in submission order, and marks the
// job with its worker. takers[i] is job i's, or nil.
func (s *Server) offerJobs(jobs []store.NewJob) (takers []*wakeup.Waiter) {
	order := make([]int, 0, len(jobs))
	for i, j := range jobs {
		if j.RunAt.IsZero() {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(jobs[b].Priority, jobs[a].Priority) })
	for _, i := range order {
		w := s.hub.TakeWaiter(jobs[i].Queue, jobs[i].Requires)
		if w == nil {
			continue
		}
		if takers == nil {
			takers = make([]*wakeup.Waiter, len(jobs))
		}
		takers[i] = w
		jobs[i].Hand = &store.Handoff{Worker: w.Worker(), AckTimeout: s.opts.AckTimeout, Lease: s.lease()}
	}
	return takers
}

// handOver gives each taken waiter its job, or puts it back. It runs before
// the group's wake-ups are published, so that a waiter put back hears them.
// It answers the jobs handed over, and those whose pop ended meanwhile:
// the caller gives them back.
func handOver(jobs []store.NewJob, takers []*wakeup.Waiter, res []store.SubmitResult, errs []error) (started, orphaned []store.Claimed) {
	for i, w := range takers {
		if w == nil {
			continue
		}
		d := res[i].Delivered
		if errs[i] != nil || d == nil {
			w.Untake(jobs[i].Queue)
			continue
		}
		c := store.Claimed{Worker: w.Worker(), Job: *d}
		started = append(started, c)
		if !w.Hand(c.Job) {
			orphaned = append(orphaned, c)
		}
	}
	return started, orphaned
}
