package engine_test

import (
	"testing"
	"time"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/records"
)

func TestRetryPolicyNextRetry(t *testing.T) {
	t.Parallel()
	middle := func() float64 { return 0.5 } // no jitter either way
	tests := []struct {
		name      string
		policy    engine.RetryPolicy
		failure   records.Failure
		wantRetry bool
		want      time.Duration
	}{
		{"FirstAttemptWaitsTheBackoff", engine.RetryPolicy{Rand: middle},
			records.Failure{Attempt: 1, MaxAttempts: 5, BackoffSeconds: 1, Retryable: true}, true, time.Second},
		{"SecondAttemptWaitsTwice", engine.RetryPolicy{Rand: middle},
			records.Failure{Attempt: 2, MaxAttempts: 5, BackoffSeconds: 1, Retryable: true}, true, 2 * time.Second},
		{"FourthAttemptWaitsEightTimes", engine.RetryPolicy{Rand: middle},
			records.Failure{Attempt: 4, MaxAttempts: 5, BackoffSeconds: 1.5, Retryable: true}, true, 12 * time.Second},
		{"AttemptZeroCountsAsTheFirst", engine.RetryPolicy{Rand: middle},
			records.Failure{Attempt: 0, MaxAttempts: 5, BackoffSeconds: 3, Retryable: true}, true, 3 * time.Second},
		{"LongBackoffIsCappedAtAnHour", engine.RetryPolicy{Rand: middle},
			records.Failure{Attempt: 20, MaxAttempts: 100, BackoffSeconds: 10, Retryable: true}, true, time.Hour},
		{"HugeAttemptIsCappedAtAnHour", engine.RetryPolicy{Rand: middle},
			records.Failure{Attempt: 5000, MaxAttempts: 10000, BackoffSeconds: 1, Retryable: true}, true, time.Hour},
		{"CapIsConfigurable", engine.RetryPolicy{Rand: middle, MaxDelay: time.Minute},
			records.Failure{Attempt: 10, MaxAttempts: 20, BackoffSeconds: 1, Retryable: true}, true, time.Minute},
		{"JitterAtItsLowest", engine.RetryPolicy{Rand: func() float64 { return 0 }},
			records.Failure{Attempt: 3, MaxAttempts: 5, BackoffSeconds: 10, Retryable: true}, true, 32 * time.Second},
		{"JitterAtItsHighest", engine.RetryPolicy{Rand: func() float64 { return 1 }},
			records.Failure{Attempt: 3, MaxAttempts: 5, BackoffSeconds: 10, Retryable: true}, true, 48 * time.Second},
		{"JitterAppliesAfterTheCap", engine.RetryPolicy{Rand: func() float64 { return 1 }},
			records.Failure{Attempt: 30, MaxAttempts: 50, BackoffSeconds: 1, Retryable: true}, true, 72 * time.Minute},
		{"NegativeJitterMeansNone", engine.RetryPolicy{Jitter: -1, Rand: func() float64 { return 1 }},
			records.Failure{Attempt: 2, MaxAttempts: 5, BackoffSeconds: 1, Retryable: true}, true, 2 * time.Second},
		{"BackoffZeroRetriesAtOnce", engine.RetryPolicy{},
			records.Failure{Attempt: 2, MaxAttempts: 5, BackoffSeconds: 0, Retryable: true}, true, 0},
		{"NegativeBackoffRetriesAtOnce", engine.RetryPolicy{},
			records.Failure{Attempt: 2, MaxAttempts: 5, BackoffSeconds: -4, Retryable: true}, true, 0},
		{"LostJobRetriesAtOnce", engine.RetryPolicy{},
			records.Failure{Attempt: 2, MaxAttempts: 5, BackoffSeconds: 30, Retryable: true, Lost: true}, true, 0},
		{"NotRetryableFails", engine.RetryPolicy{},
			records.Failure{Attempt: 1, MaxAttempts: 5, BackoffSeconds: 1, Retryable: false}, false, 0},
		{"LastAttemptFails", engine.RetryPolicy{},
			records.Failure{Attempt: 5, MaxAttempts: 5, BackoffSeconds: 1, Retryable: true}, false, 0},
		{"AttemptsPastTheMaximumFail", engine.RetryPolicy{},
			records.Failure{Attempt: 7, MaxAttempts: 5, BackoffSeconds: 1, Retryable: true}, false, 0},
		{"LostJobOnItsLastAttemptFails", engine.RetryPolicy{},
			records.Failure{Attempt: 3, MaxAttempts: 3, BackoffSeconds: 1, Retryable: true, Lost: true}, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			retry, delay := tt.policy.NextRetry(tt.failure)
			if retry != tt.wantRetry || delay != tt.want {
				t.Fatalf("NextRetry(%+v) = %v, %v; want %v, %v", tt.failure, retry, delay, tt.wantRetry, tt.want)
			}
		})
	}
}

// The default jitter keeps every delay within ±20% of the backoff.
func TestRetryPolicyJitterStaysWithinAFifth(t *testing.T) {
	t.Parallel()
	var p engine.RetryPolicy
	f := records.Failure{Attempt: 3, MaxAttempts: 5, BackoffSeconds: 2, Retryable: true} // 8 s
	lo, hi := 6400*time.Millisecond, 9600*time.Millisecond
	seen := map[time.Duration]bool{}
	for range 1000 {
		retry, delay := p.NextRetry(f)
		if !retry || delay < lo || delay > hi {
			t.Fatalf("NextRetry = %v, %v; want a retry within [%v, %v]", retry, delay, lo, hi)
		}
		seen[delay] = true
	}
	if len(seen) < 100 {
		t.Fatalf("%d distinct delays in 1000: the jitter does not vary", len(seen))
	}
}
