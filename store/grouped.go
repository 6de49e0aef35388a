package store

import (
	"errors"

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
