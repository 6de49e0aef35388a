package worker

import (
	"context"
	"time"
)

// backoff is the reconnection schedule: min, then doubling up to max (1s,
// 2s, 4s … 60s by default), back to min after a success, and never longer
// than limit (the heartbeat interval the server named): three intervals
// without a word from the worker — its registration after an outage
// included — and the server declares it dead, re-queuing its jobs with the
// attempt counted. No jitter: the schedule is what the brief fixes, and
// workers that lost the server at the same moment still drift apart
// through their different pop and heartbeat phases.
type backoff struct {
	min, max time.Duration
	limit    func() time.Duration // nil or ≤ 0: none
	cur      time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max} }

// newBackoff is the worker's schedule, limited by its heartbeat interval.
func (w *Worker) newBackoff() *backoff {
	b := newBackoff(w.cfg.BackoffMin, w.cfg.BackoffMax)
	b.limit = w.heartbeatInterval
	return b
}

// Next returns the wait before the next attempt and advances the schedule.
func (b *backoff) Next() time.Duration {
	d := b.cur
	if d == 0 {
		d = b.min
	}
	b.cur = min(2*d, b.max)
	d = min(d, b.max)
	if b.limit != nil {
		if l := b.limit(); l > 0 {
			d = min(d, l)
		}
	}
	return d
}

// Reset starts the schedule again after a success.
func (b *backoff) Reset() { b.cur = 0 }

// sleep waits d, or less if ctx ends first; it reports whether the whole
// wait happened.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
