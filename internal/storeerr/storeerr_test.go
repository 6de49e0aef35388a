package storeerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/storeerr"
	"github.com/agq/agq/store"
)

// brokenConn is a connection error pgconn would call safe to retry or not.
type brokenConn struct{ safe bool }

func (b brokenConn) Error() string     { return "broken pipe" }
func (b brokenConn) SafeToRetry() bool { return b.safe }

func TestTheStoresErrorsStandForTheAPIs(t *testing.T) {
	sentinels := []struct{ store, api error }{
		{store.ErrNotFound, api.ErrNotFound},
		{store.ErrUnavailable, api.ErrUnavailable},
		{store.ErrInvalidInput, api.ErrInvalidInput},
		{store.ErrConflict, api.ErrSubmitConflict},
		{store.ErrJobCancelled, api.ErrJobCancelled},
		{store.ErrWorkerTaken, api.ErrWorkerTaken},
		{store.ErrNotHolder, api.ErrNotHolder},
		{store.ErrCapabilitiesChanged, api.ErrCapabilitiesChanged},
	}
	for _, s := range sentinels {
		wrapped := fmt.Errorf("doing it: %w", s.store)
		err := storeerr.ToAPI(wrapped)
		if !errors.Is(err, s.api) || !errors.Is(err, s.store) {
			t.Errorf("%v: not both the store's and the API's error", s.store)
		}
		if err.Error() != wrapped.Error() {
			t.Errorf("text %q, want %q", err, wrapped)
		}
		if s.store.Error() != s.api.Error() {
			t.Errorf("the API words %q as %q", s.store, s.api)
		}
	}

	typed := []struct {
		store error
		as    func(error) (error, bool)
	}{
		{&store.NotOwnerError{Owner: "w1"}, as[*api.NotOwnerError]},
		{&store.StaleDeliveryError{Attempt: 3}, as[*api.StaleDeliveryError]},
		{&store.StateError{Status: "failed"}, as[*api.StateError]},
		{&store.SnoozeLimitError{Snoozes: 100}, as[*api.SnoozeLimitError]},
		{&store.JobExistsError{ID: "j1"}, as[*api.JobExistsError]},
		{&store.ParentNotFoundError{ID: "p1"}, as[*api.ParentNotFoundError]},
		{&store.StepNotBegunError{StepID: "s1"}, as[*api.StepNotBegunError]},
		{&store.StepAttemptsError{StepID: "s1", Attempts: 3}, as[*api.StepAttemptsError]},
		{&store.StepKindError{StepID: "s1", Kind: "sleep"}, as[*api.StepKindError]},
		{&store.StepLimitError{}, as[*api.StepLimitError]},
	}
	for _, c := range typed {
		got, ok := c.as(storeerr.ToAPI(fmt.Errorf("x: %w", c.store)))
		if !ok {
			t.Errorf("%T: no API error found", c.store)
			continue
		}
		if got.Error() != c.store.Error() {
			t.Errorf("%T says %q, the store's %q", got, got, c.store)
		}
	}
}

func as[T error](err error) (error, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}

func TestTranslatingKeepsWhetherARetryIsSafe(t *testing.T) {
	for _, safe := range []bool{true, false} {
		err := storeerr.ToAPI(fmt.Errorf("%w: %w", store.ErrUnavailable, brokenConn{safe: safe}))
		if got := api.SafeToRetry(err); got != safe {
			t.Errorf("SafeToRetry = %v, want %v", got, safe)
		}
		// Named as a job's refusal, the error keeps its answer.
		if got := api.SafeToRetry(&api.JobError{JobID: "j", Err: err}); got != safe {
			t.Errorf("in a JobError, SafeToRetry = %v, want %v", got, safe)
		}
	}
	if api.SafeToRetry(storeerr.ToAPI(brokenConn{safe: true})) {
		t.Error("an error that is not the database being unavailable is safe to retry")
	}
}

func TestAnErrorIsTranslatedOnce(t *testing.T) {
	once := storeerr.ToAPI(store.ErrNotFound)
	if twice := storeerr.ToAPI(fmt.Errorf("again: %w", once)); !errors.Is(twice, api.ErrNotFound) || errors.Unwrap(twice) != once {
		t.Errorf("translated again: %#v", twice)
	}
	other := errors.New("not the store's")
	if storeerr.ToAPI(other) != other || storeerr.ToAPI(nil) != nil {
		t.Error("an error of no store's was changed")
	}
}
