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

// RetryRule decides whether a failed attempt runs again, and after how
// long. The store asks it for every attempt that fails, and applies what it
// answers; the rule itself lives with the caller (engine.RetryPolicy).
type RetryRule interface {
	NextRetry(Failure) (retry bool, delay time.Duration)
}
