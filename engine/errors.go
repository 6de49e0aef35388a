package engine

import (
	"errors"

	"github.com/agq/agq/records"
)

// The engine's errors are package records' refusals, which the store and
// the registry return as they are; the engine names the job a refusal is
// about.

// refused is a refusal about job id.
func refused(id string, err error) error {
	return &records.JobError{JobID: id, Err: err}
}

// jobError names the job a refusal is about; other failures pass as they are.
func jobError(id string, err error) error {
	if err == nil || !refusal(err) {
		return err
	}
	if errors.Is(err, records.ErrConflict) {
		err = records.ErrUniqueKeyHeld // a retry's conflict: the job's unique key
	}
	return refused(id, err)
}

// refusal reports whether err is the engine refusing a request about a
// job, rather than a failure to serve it.
func refusal(err error) bool {
	var owner *records.NotOwnerError
	var state *records.StateError
	var stale *records.StaleDeliveryError
	var snoozes *records.SnoozeLimitError
	return errors.Is(err, records.ErrNotFound) || errors.Is(err, records.ErrConflict) || errors.Is(err, records.ErrJobCancelled) ||
		errors.As(err, &owner) || errors.As(err, &state) || errors.As(err, &stale) || errors.As(err, &snoozes)
}

func scheduleError(name string, err error) error {
	if errors.Is(err, records.ErrNotFound) {
		return &records.ScheduleNotFoundError{Name: name}
	}
	return err
}
