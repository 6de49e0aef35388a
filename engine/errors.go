package engine

import (
	"errors"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/storeerr"
	"github.com/agq/agq/registry"
	"github.com/agq/agq/store"
)

// The engine's errors are the API's (engine/api). Inside, it meets the
// store's and the registry's; apiError translates them where a result
// leaves the engine.

// apiError is err as the engine's callers know it: the store's and the
// registry's errors in its chain stand for the API's.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var reg *registry.InvalidRegistrationError
	switch {
	case errors.Is(err, registry.ErrInvalidCapabilities):
		return storeerr.Wrap(err, api.ErrInvalidCapabilities)
	case errors.Is(err, registry.ErrInvalidWorkerID):
		return storeerr.Wrap(err, api.ErrInvalidWorkerID)
	case errors.As(err, &reg):
		return storeerr.Wrap(err, &api.InvalidRegistrationError{Reason: reg.Reason})
	}
	return storeerr.ToAPI(err)
}

// refused is a refusal about job id.
func refused(id string, err error) error {
	return &api.JobError{JobID: id, Err: apiError(err)}
}

// jobError names the job a refusal is about; other failures pass as they are.
func jobError(id string, err error) error {
	if err == nil || !refusal(err) {
		return apiError(err)
	}
	if errors.Is(err, store.ErrConflict) {
		err = api.ErrUniqueKeyHeld // a retry's conflict: the job's unique key
	}
	return refused(id, err)
}

// refusal reports whether err is the engine refusing a request about a
// job, rather than a failure to serve it.
func refusal(err error) bool {
	var owner *store.NotOwnerError
	var state *store.StateError
	var stale *store.StaleDeliveryError
	var snoozes *store.SnoozeLimitError
	var apiOwner *api.NotOwnerError
	var apiState *api.StateError
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrJobCancelled) ||
		errors.As(err, &owner) || errors.As(err, &state) || errors.As(err, &stale) || errors.As(err, &snoozes) ||
		errors.As(err, &apiOwner) || errors.As(err, &apiState)
}

func scheduleError(name string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &api.ScheduleNotFoundError{Name: name}
	}
	return apiError(err)
}
