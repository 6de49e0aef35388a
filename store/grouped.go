package store

import (
	"errors"

	"github.com/google/uuid"

	"github.com/agq/agq/records"
)

// The grouped statements apply the calls whose jobs their guard finds held
// (heldBy); each other call takes the locked path on its own, which says
// why. Every grouped transition ends the same way, here.

// lockedRest completes a group after its grouped statement: a call it
// applied (applied answers its result) is done; each other one runs by
// locked. When the statement found the database unavailable (err), every
// call fails alike: none reached it.
func lockedRest[C, R any](calls []C, err error, applied func(i int) (R, bool),
	locked func(C) (R, records.Effects, error)) ([]R, []error, records.Effects) {
	res, errs := make([]R, len(calls)), make([]error, len(calls))
	var fx records.Effects
	if err != nil && errors.Is(interpretError(err), records.ErrUnavailable) {
		for i := range errs {
			errs[i] = interpretError(err)
		}
		return res, errs, fx
	}
	for i, c := range calls {
		if r, ok := applied(i); ok {
			res[i] = r
			continue
		}
		var one records.Effects
		res[i], one, errs[i] = locked(c)
		fx.Merge(one)
	}
	return res, errs, fx
}

// noResult is the result of calls whose outcome is their error alone.
type noResult struct{}

// appliedIn answers, for lockedRest, the calls applied marks.
func appliedIn(applied []bool) func(int) (noResult, bool) {
	return func(i int) (noResult, bool) { return noResult{}, i < len(applied) && applied[i] }
}

// stepCalls are the arrays a grouped statement of step calls unnests, one
// element a call: its job's namespace, its job, step, worker ("" for an
// admin), delivery (NULL when not given) and index in the group.
type stepCalls struct {
	namespaces               []string
	jobIDs, stepIDs, workers []string
	deliveries               []*string
	ords                     []int32
}

// add lays out call p, of a job of namespace ns, the ord-th of its group;
// false for a call only the locked path can answer (a name PostgreSQL
// cannot store, a worker not named), which says why.
func (c *stepCalls) add(ns string, p records.StepParams, ord int) bool {
	if !storable(p.JobID, p.StepID, p.WorkerID) || !p.Admin && p.WorkerID == "" {
		return false
	}
	worker := p.WorkerID
	if p.Admin {
		worker = ""
	}
	c.namespaces = append(c.namespaces, ns)
	c.jobIDs, c.stepIDs, c.workers = append(c.jobIDs, p.JobID), append(c.stepIDs, p.StepID), append(c.workers, worker)
	c.deliveries, c.ords = append(c.deliveries, deliveryParam(p.Delivery)), append(c.ords, int32(ord))
	return true
}

// deliveryParam is a call's delivery token as the grouped statements'
// guard (heldBy) compares it with a job's, as text: a UUID in the
// canonical spelling PostgreSQL writes, so that tokens equal as UUIDs
// match however they were spelled; NULL when none is given. A token that
// is no UUID is left as it is: it matches no job's, and its call takes the
// locked path, which answers it stale.
func deliveryParam(token string) *string {
	if token == "" {
		return nil
	}
	if u, err := uuid.Parse(token); err == nil {
		token = u.String()
	}
	return &token
}

// nullIfEmpty is s, or NULL when it is empty.
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
