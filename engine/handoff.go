package engine

import (
	"cmp"
	"slices"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// Hand-offs: a single submission due now, while a worker able to run it
// waits in a pop on this node with nothing to claim, is inserted running
// for that worker and delivered when its group commits — one transaction
// instead of an insert, a wake-up and a claim (records.Handoff says when the
// database agrees). Wake-ups pass a waiter taken for an offer by until the
// group settles it, and one it missed meanwhile is kept for it.

// offerJobs takes a waiting pop for each job of a group that may be handed
// over, highest priority first then in submission order, and marks the
// job with its worker. takers[i] is job i's, or nil.
func (e *Engine) offerJobs(jobs []records.NewJob) (takers []*wakeup.Waiter) {
	if len(jobs) > store.MaxHandoffGroup {
		return nil // a group this large goes by COPY: it hands nothing over
	}
	order := make([]int, 0, len(jobs))
	for i, j := range jobs {
		// A job a worker's key submits goes in by the statement that
		// records its submitter, which hands nothing over.
		if j.RunAt.IsZero() && j.SubmittedBy == "" {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(jobs[b].Priority, jobs[a].Priority) })
	for _, i := range order {
		w := e.hub.TakeWaiter(cmp.Or(jobs[i].Namespace, e.ns), jobs[i].Queue, jobs[i].Requires)
		if w == nil {
			continue
		}
		if takers == nil {
			takers = make([]*wakeup.Waiter, len(jobs))
		}
		takers[i] = w
		jobs[i].Hand = &records.Handoff{Worker: w.Worker(), AckTimeout: e.cfg.AckTimeout, Lease: e.Lease()}
	}
	return takers
}

// settleOffers ends the hand-offs the database refused — their waiters
// wait as before — and answers the jobs handed over. It runs before the
// group's wake-ups are published, so that those waiters hear them; the
// jobs go to their pops once their events are published (handJobs).
func settleOffers(takers []*wakeup.Waiter, res []records.SubmitResult, errs []error) (started []store.Claimed) {
	for i, w := range takers {
		if w == nil {
			continue
		}
		if d := res[i].Delivered; errs[i] == nil && d != nil {
			started = append(started, store.Claimed{Worker: w.Worker(), Job: *d})
			continue
		}
		takers[i] = nil
		w.Untake()
	}
	return started
}

// handJobs gives each handed job to its pop; a pop that ended meanwhile
// leaves its job to be given back.
func (e *Engine) handJobs(takers []*wakeup.Waiter, res []records.SubmitResult) {
	for i, w := range takers {
		if w == nil {
			continue
		}
		takers[i] = nil
		job := *res[i].Delivered
		if !w.Hand(&job) {
			e.giveBack(w.Worker(), *res[i].Delivered)
		}
	}
}

// endOffers ends the hand-offs a group left open, having failed midway:
// their pops wait as before, and jobs already running for them go back.
func (e *Engine) endOffers(takers []*wakeup.Waiter, res []records.SubmitResult) {
	for i, w := range takers {
		if w == nil {
			continue
		}
		w.Untake()
		if i < len(res) && res[i].Delivered != nil {
			e.giveBack(w.Worker(), *res[i].Delivered)
		}
	}
}
