// Package engine holds the rules of a job's life; the store applies them.
package engine

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/agq/agq/records"
)

// Defaults of RetryPolicy: a failed job waits at most an hour (before
// jitter), give or take a fifth so that jobs failed together do not return
// in lockstep.
const (
	DefaultMaxRetryDelay = time.Hour
	DefaultRetryJitter   = 0.2
)

// RetryPolicy is agq's rule for a failed attempt: it runs again while
// attempts remain and the worker did not call the failure final, after
// retry_backoff_seconds × 2^(attempt−1), capped at MaxDelay, ±Jitter. A
// backoff of 0 retries at once, and so does a job whose worker was lost
// holding it: its own code did not fail. The zero value is the rule of the
// brief.
type RetryPolicy struct {
	// MaxDelay caps the delay before jitter; 0 means DefaultMaxRetryDelay.
	MaxDelay time.Duration
	// Jitter is the fraction the delay varies by either way; 0 means
	// DefaultRetryJitter, a negative value none.
	Jitter float64
	// Rand returns a number in [0, 1); nil means math/rand/v2.Float64.
	Rand func() float64
}

// NextRetry decides whether the failed attempt f runs again, and after how
// long.
func (p RetryPolicy) NextRetry(f records.Failure) (retry bool, delay time.Duration) {
	if !f.Retryable || f.Attempt >= f.MaxAttempts {
		return false, 0
	}
	if f.Lost || !(f.BackoffSeconds > 0) {
		return true, 0
	}
	maxDelay := p.MaxDelay
	if maxDelay <= 0 {
		maxDelay = DefaultMaxRetryDelay
	}
	jitter := p.Jitter
	switch {
	case jitter == 0:
		jitter = DefaultRetryJitter
	case jitter < 0:
		jitter = 0
	case jitter > 1:
		jitter = 1 // a delay is never negative
	}
	random := p.Rand
	if random == nil {
		random = rand.Float64
	}
	secs := f.BackoffSeconds * math.Pow(2, float64(max(f.Attempt-1, 0)))
	secs = min(secs, maxDelay.Seconds())
	secs *= 1 - jitter + 2*jitter*random()
	return true, time.Duration(secs * float64(time.Second))
}
