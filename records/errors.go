package records

import (
	"errors"
	"fmt"
)

// The engine's errors. A refusal is one of these, alone or wrapped in a
// JobError naming its job; the wire layer words each once (commands'
// error table), the dashboard likewise. Any other error is a failure of
// the database or of agq, not of the request.
var (
	// ErrNotFound: the job, worker or schedule named does not exist.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable: the database could not be reached; the request may
	// be sent again.
	ErrUnavailable = errors.New("database unavailable")
	// ErrInvalidInput: PostgreSQL refused a value of the request (text it
	// cannot store).
	ErrInvalidInput = errors.New("invalid input")
	// ErrConflict: a submission met a job submitted concurrently
	// with the same id or unique key; sending it again settles it.
	ErrConflict = errors.New("conflict")
	// ErrUniqueKeyHeld: a job cannot be queued again while another
	// unfinished job holds its unique key.
	ErrUniqueKeyHeld = errors.New("its unique_key is held by another unfinished job")
	// ErrJobCancelled: the job was cancelled; its worker must stop it.
	ErrJobCancelled = errors.New("job was cancelled")
	// ErrWorkerTaken: the worker id belongs to another principal.
	ErrWorkerTaken = errors.New("worker id is held by another principal")
	// ErrNotHolder: only the worker holding the job may do this.
	ErrNotHolder = errors.New("the job is not running at this worker")
	// ErrClientGone: a blocked pop's client left; it was handed nothing.
	ErrClientGone = errors.New("client disconnected while blocked")
	// ErrWorkerDraining: the worker is draining; it gets no job, and its
	// pop no error.
	ErrWorkerDraining = errors.New("worker is draining")
	// ErrCapabilitiesChanged: the worker registered again with other
	// capabilities since the caller read them; look it up and pop again.
	ErrCapabilitiesChanged = errors.New("worker capabilities changed")
	// ErrStepsNotHolder: a worker read the steps of a job it does not hold.
	ErrStepsNotHolder = errors.New("only the worker holding the job reads its steps")
	// ErrInvalidCapabilities and ErrInvalidWorkerID refuse a
	// registration; their texts are the protocol's replies.
	ErrInvalidCapabilities = errors.New("Invalid capabilities format")
	ErrInvalidWorkerID     = errors.New("invalid worker_id")
)

// SafeToRetry reports whether a request failed before anything reached
// the database, so that running it again cannot apply it twice.
func SafeToRetry(err error) bool {
	var s interface{ SafeToRetry() bool }
	return errors.Is(err, ErrUnavailable) && errors.As(err, &s) && s.SafeToRetry()
}

// JobError is a refusal about one job.
type JobError struct {
	JobID string
	Err   error
}

func (e *JobError) Error() string { return fmt.Sprintf("job %s: %v", e.JobID, e.Err) }
func (e *JobError) Unwrap() error { return e.Err }

// NotOwnerError: another worker holds the job.
type NotOwnerError struct{ Owner string }

func (e *NotOwnerError) Error() string { return "job is owned by " + e.Owner }

// StaleDeliveryError: a report names a delivery that is not the job's
// latest: an earlier one, or one never issued. Attempt is the job's now.
type StaleDeliveryError struct{ Attempt int }

func (e *StaleDeliveryError) Error() string {
	return fmt.Sprintf("delivery is not the job's current one (attempt %d)", e.Attempt)
}

// StateError: the job's status does not allow the transition.
type StateError struct{ Status string }

func (e *StateError) Error() string { return "job is " + e.Status }

// SnoozeLimitError: a snooze past the limit failed the job instead.
type SnoozeLimitError struct{ Snoozes int }

func (e *SnoozeLimitError) Error() string {
	return fmt.Sprintf("snoozed %d times, the most allowed: the job failed", e.Snoozes)
}

// JobExistsError: the job id is taken by a job with other contents.
type JobExistsError struct{ ID string }

func (e *JobExistsError) Error() string {
	return "job " + e.ID + " already exists with different contents"
}

// ParentNotFoundError: an after names a job that does not exist, or one
// later in the same batch (or the job itself).
type ParentNotFoundError struct{ ID string }

func (e *ParentNotFoundError) Error() string {
	return "job " + e.ID + " named in after does not exist"
}

// StepNotBegunError: the step was not begun by this delivery.
type StepNotBegunError struct{ StepID string }

func (e *StepNotBegunError) Error() string { return "step " + e.StepID + " was not begun" }

// StepAttemptsError: begun past its attempts, the step failed the job.
type StepAttemptsError struct {
	StepID   string
	Attempts int
}

func (e *StepAttemptsError) Error() string {
	return fmt.Sprintf("step %s used its %d attempts: the job failed", e.StepID, e.Attempts)
}

// StepKindError: the id names a sleep where a step was expected, or the
// other way round.
type StepKindError struct{ StepID, Kind string }

func (e *StepKindError) Error() string { return "step " + e.StepID + " is a " + e.Kind }

// StepLimitError: the job has MaxSteps steps already.
type StepLimitError struct{}

func (e *StepLimitError) Error() string {
	return fmt.Sprintf("has %d steps, the most a job may have", MaxSteps)
}

// JobEndedError: a signal was sent to a job that has ended.
type JobEndedError struct{}

func (e *JobEndedError) Error() string { return "has ended" }

// SignalLimitError: the job holds MaxSignals signals already.
type SignalLimitError struct{}

func (e *SignalLimitError) Error() string {
	return fmt.Sprintf("holds %d signals, the most", MaxSignals)
}

// AwaitedNotFoundError: a STEP.WAIT JOBS names a job that does not exist.
type AwaitedNotFoundError struct{ ID string }

func (e *AwaitedNotFoundError) Error() string {
	return "job " + e.ID + " named in JOBS does not exist"
}

// InvalidRegistrationError names what is wrong with a registration.
type InvalidRegistrationError struct{ Reason string }

func (e *InvalidRegistrationError) Error() string { return "invalid registration: " + e.Reason }

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

// ScheduleCannotFireError: a resumed schedule's cron or time zone no
// longer parses.
type ScheduleCannotFireError struct {
	Name string
	Err  error
}

func (e *ScheduleCannotFireError) Error() string {
	return fmt.Sprintf("schedule '%s' cannot fire: %s; fix it with SCHEDULE.UPDATE", e.Name, e.Err)
}

// ScheduleExistsError: a schedule of this name exists with another
// definition.
type ScheduleExistsError struct{ Name string }

func (e *ScheduleExistsError) Error() string {
	return fmt.Sprintf("schedule '%s' exists with another definition: change it with SCHEDULE.UPDATE", e.Name)
}

// InvalidNameError: a name breaks its rule.
type InvalidNameError struct{ What, Rule string }

func (e *InvalidNameError) Error() string { return e.What + " must be " + e.Rule }
