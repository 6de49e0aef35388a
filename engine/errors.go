package engine

import (
	"errors"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// The engine's errors are package records' refusals, which the store and
// the registry return as they are; the engine names what a refusal is
// about, in one function.

// subject is what a request is about: it decides how a refusal names it
// and what the store's not-found means.
type subject int

const (
	aJob subject = iota
	aWorker
	aSchedule
)

// refusal names the subject of a refusal, id. About a job, a refusal
// becomes a JobError naming it, a conflict there being the job's unique
// key held by another job (a retry's); a worker the store does not know
// must register (again); a schedule it does not know is named as missing.
// Any other error, a failure to serve the request rather than a refusal,
// passes as it is.
func refusal(of subject, id string, err error) error {
	switch {
	case err == nil:
		return nil
	case of == aWorker && (errors.Is(err, records.ErrNotFound) || errors.Is(err, store.ErrWorkerUnknown)):
		return &records.WorkerNotRegisteredError{ID: id}
	case of == aSchedule && errors.Is(err, records.ErrNotFound):
		return &records.ScheduleNotFoundError{Name: id}
	case of == aJob && errors.Is(err, records.ErrConflict):
		return &records.JobError{JobID: id, Err: records.ErrUniqueKeyHeld}
	case of == aJob && refusesAJob(err):
		return &records.JobError{JobID: id, Err: err}
	}
	return err
}

// refusesAJob reports whether err refuses a request about a job, rather
// than failing to serve it.
func refusesAJob(err error) bool {
	return errors.Is(err, records.ErrNotFound) || errors.Is(err, records.ErrJobCancelled) ||
		errors.Is(err, records.ErrNotHolder) || errors.Is(err, records.ErrStepsNotHolder) ||
		is[*records.NotOwnerError](err) || is[*records.StateError](err) || is[*records.StaleDeliveryError](err) ||
		is[*records.SnoozeLimitError](err) || is[*records.StepNotBegunError](err) ||
		is[*records.StepAttemptsError](err) || is[*records.StepKindError](err) || is[*records.StepLimitError](err) ||
		is[*records.JobEndedError](err) || is[*records.SignalLimitError](err)
}

// is reports whether err's tree holds an error of type E.
func is[E error](err error) bool {
	_, ok := errors.AsType[E](err)
	return ok
}
