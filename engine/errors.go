package engine

import (
	"errors"
	"fmt"

	"github.com/agq/agq/store"
)

// The engine's errors. A refusal is one of these, alone or wrapped in a
// JobError naming its job; the wire layer words each once (commands'
// error table), the dashboard likewise. Any other error is a failure of
// the database or of agq, not of the request.
var (
	// ErrNotFound: the job, worker or schedule named does not exist.
	ErrNotFound = store.ErrNotFound
	// ErrUnavailable: the database could not be reached; the request may
	// be sent again.
	ErrUnavailable = store.ErrUnavailable
	// ErrInvalidInput: PostgreSQL refused a value of the request (text it
	// cannot store).
	ErrInvalidInput = store.ErrInvalidInput
	// ErrSubmitConflict: a submission met a job submitted concurrently
	// with the same id or unique key; sending it again settles it.
	ErrSubmitConflict = store.ErrConflict
	// ErrUniqueKeyHeld: a job cannot be queued again while another
	// unfinished job holds its unique key.
	ErrUniqueKeyHeld = errors.New("its unique_key is held by another unfinished job")
	// ErrJobCancelled: the job was cancelled; its worker must stop it.
	ErrJobCancelled = store.ErrJobCancelled
	// ErrWorkerTaken: the worker id belongs to another principal.
	ErrWorkerTaken = store.ErrWorkerTaken
	// ErrNotHolder: only the worker holding the job may do this.
	ErrNotHolder = store.ErrNotHolder
	// ErrClientGone: a blocked pop's client left; it was handed nothing.
	ErrClientGone = errors.New("client disconnected while blocked")
)

// NotOwnerError: another worker holds the job.
type NotOwnerError = store.NotOwnerError

// StaleDeliveryError: a report names a delivery that is not the job's
// latest.
type StaleDeliveryError = store.StaleDeliveryError

// StateError: the job's status does not allow the transition.
type StateError = store.StateError

// SnoozeLimitError: a snooze past the limit failed the job instead.
type SnoozeLimitError = store.SnoozeLimitError

// JobExistsError: the job id is taken by a job with other contents.
type JobExistsError = store.JobExistsError

// JobError is a refusal about one job.
type JobError struct {
	JobID string
	Err   error
}

func (e *JobError) Error() string { return fmt.Sprintf("job %s: %v", e.JobID, e.Err) }
func (e *JobError) Unwrap() error { return e.Err }

// jobError names the job a refusal is about; other failures pass as they are.
func jobError(id string, err error) error {
	if err == nil || !refusal(err) {
		return err
	}
	if errors.Is(err, store.ErrConflict) {
		err = ErrUniqueKeyHeld // a retry's conflict: the job's unique key
	}
	return &JobError{JobID: id, Err: err}
}

// refusal reports whether err is the engine refusing a request about a
// job, rather than a failure to serve it.
func refusal(err error) bool {
	var owner *NotOwnerError
	var state *StateError
	var stale *StaleDeliveryError
	var snoozes *SnoozeLimitError
	return errors.Is(err, ErrNotFound) || errors.Is(err, store.ErrConflict) || errors.Is(err, ErrJobCancelled) ||
		errors.As(err, &owner) || errors.As(err, &state) || errors.As(err, &stale) || errors.As(err, &snoozes)
}

// WorkerNotRegisteredError: the worker is unknown, dead or unregistered,
// and must register (again).
type WorkerNotRegisteredError struct{ ID string }

func (e *WorkerNotRegisteredError) Error() string { return "worker not registered: " + e.ID }

// WorkerOfAnotherPrincipalError: a worker principal named a worker
// another principal registered.
type WorkerOfAnotherPrincipalError struct{ ID string }

func (e *WorkerOfAnotherPrincipalError) Error() string {
	return "worker " + e.ID + " belongs to another principal"
}

// ScheduleNotFoundError: no schedule has this name.
type ScheduleNotFoundError struct{ Name string }

func (e *ScheduleNotFoundError) Error() string { return "no such schedule " + e.Name }

func scheduleError(name string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &ScheduleNotFoundError{Name: name}
	}
	return err
}

// InvalidNameError: a name breaks its rule.
type InvalidNameError struct{ What, Rule string }

func (e *InvalidNameError) Error() string { return e.What + " must be " + e.Rule }

// SafeToRetry reports whether a request failed before anything reached
// the database, so that running it again cannot apply it twice.
func SafeToRetry(err error) bool { return store.SafeToRetry(err) }
