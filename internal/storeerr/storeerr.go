// Package storeerr translates the store's errors to the engine API's
// (engine/api), for the packages that hand the store's results to the
// wire layer: the engine and the keyring. The store imports no package of
// agq, so its errors are its own; the wire layer knows only the API's.
package storeerr

import (
	"errors"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/store"
)

// ToAPI returns err with the API's error it stands for in its chain, or err
// itself when it holds none of the store's (or was translated already).
// Its text stays err's.
func ToAPI(err error) error {
	if err == nil {
		return nil
	}
	if d := domain(err); d != nil {
		return Wrap(err, d)
	}
	return err
}

// Wrap has err carry d: errors.Is and errors.As find both, Error is err's,
// and SafeToRetry what the store says of err.
func Wrap(err, d error) error {
	var done *translated
	if errors.As(err, &done) {
		return err
	}
	return &translated{err: err, domain: d, safe: store.SafeToRetry(err)}
}

type translated struct {
	err    error
	domain error
	safe   bool
}

func (t *translated) Error() string     { return t.err.Error() }
func (t *translated) Unwrap() []error   { return []error{t.domain, t.err} }
func (t *translated) SafeToRetry() bool { return t.safe }

// domain is the API's error for the store's in err's chain; nil for none.
func domain(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s.store) {
			return s.api
		}
	}
	var (
		owner    *store.NotOwnerError
		stale    *store.StaleDeliveryError
		state    *store.StateError
		snoozes  *store.SnoozeLimitError
		exists   *store.JobExistsError
		parent   *store.ParentNotFoundError
		notBegun *store.StepNotBegunError
		attempts *store.StepAttemptsError
		kind     *store.StepKindError
		steps    *store.StepLimitError
	)
	switch {
	case errors.As(err, &owner):
		return &api.NotOwnerError{Owner: owner.Owner}
	case errors.As(err, &stale):
		return &api.StaleDeliveryError{Attempt: stale.Attempt}
	case errors.As(err, &state):
		return &api.StateError{Status: state.Status}
	case errors.As(err, &snoozes):
		return &api.SnoozeLimitError{Snoozes: snoozes.Snoozes}
	case errors.As(err, &exists):
		return &api.JobExistsError{ID: exists.ID}
	case errors.As(err, &parent):
		return &api.ParentNotFoundError{ID: parent.ID}
	case errors.As(err, &notBegun):
		return &api.StepNotBegunError{StepID: notBegun.StepID}
	case errors.As(err, &attempts):
		return &api.StepAttemptsError{StepID: attempts.StepID, Attempts: attempts.Attempts}
	case errors.As(err, &kind):
		return &api.StepKindError{StepID: kind.StepID, Kind: kind.Kind}
	case errors.As(err, &steps):
		return &api.StepLimitError{}
	}
	return nil
}

var sentinels = []struct{ store, api error }{
	{store.ErrNotFound, api.ErrNotFound},
	{store.ErrUnavailable, api.ErrUnavailable},
	{store.ErrInvalidInput, api.ErrInvalidInput},
	{store.ErrConflict, api.ErrSubmitConflict},
	{store.ErrJobCancelled, api.ErrJobCancelled},
	{store.ErrWorkerTaken, api.ErrWorkerTaken},
	{store.ErrNotHolder, api.ErrNotHolder},
	{store.ErrCapabilitiesChanged, api.ErrCapabilitiesChanged},
}
