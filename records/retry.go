package records

import "time"

// Failure is what a retry decision knows of a failed attempt.
type Failure struct {
	// Attempt is the attempt that failed, counted from 1.
	Attempt     int
	MaxAttempts int
	// BackoffSeconds is the job's retry_backoff_seconds.
	BackoffSeconds float64
	// Retryable is false when the worker said the job must not run again.
	Retryable bool
	// Lost means the job's code did not fail: its worker was lost holding
	// it (the lease ran out, the worker died or restarted without it, or
	// it never acknowledged the delivery).
	Lost bool
}

// Rules are the engine's decisions (engine.Decisions), which the store applies
// inside the transactions that lock the jobs they are about: the store
// reads a job, asks, and writes what it is told.
type Rules interface {
	// NextRetry decides whether a failed attempt runs again, and after
	// how long.
	NextRetry(Failure) (retry bool, delay time.Duration)
	// Report decides what a report does to its job as it stands.
	Report(JobNow, Report) (ReportVerdict, error)
	// StepBegin, StepComplete, StepFail, StepSleep and StepWait decide
	// what a step call does to its job and step as they stand.
	StepBegin(JobNow, StepNow, StepBeginParams) (StepDecision, error)
	StepComplete(JobNow, StepNow, StepParams) (StepDecision, error)
	StepFail(JobNow, StepNow, StepParams) (StepDecision, error)
	StepSleep(JobNow, StepNow, StepParams) (StepDecision, error)
	StepWait(JobNow, StepNow, StepParams) (StepDecision, error)
}
