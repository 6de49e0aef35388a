package clock

import (
	"sync"
	"time"
)

// Fake is a clock that moves only when told to. Its tickers and timers fire
// during Advance, in the order of their due times. It is safe for
// concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
}

// fakeWaiter is a ticker (period > 0) or a one-shot timer.
type fakeWaiter struct {
	c       chan time.Time
	due     time.Time
	period  time.Duration
	stopped bool
}

// NewFake returns a fake clock reading now.
func NewFake(now time.Time) *Fake { return &Fake{now: now} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTicker returns a ticker that ticks each time Advance passes a
// multiple of d from now.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return f.add(d, d)
}

// After returns a channel that receives the time once Advance reaches d
// from now; at once when d ≤ 0.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	return f.add(d, 0).w.c
}

func (f *Fake) add(d, period time.Duration) *fakeTicker {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{c: make(chan time.Time, 1), due: f.now.Add(d), period: period}
	if period == 0 && d <= 0 {
		w.c <- f.now
		return &fakeTicker{f, w}
	}
	f.waiters = append(f.waiters, w)
	return &fakeTicker{f, w}
}

// Advance moves the clock forward by d and fires what came due meanwhile.
// A ticker whose reader is behind drops ticks, as a real one does.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := f.now.Add(d)
	for {
		next := f.earliestDue(end)
		if next == nil {
			break
		}
		f.now = next.due
		select {
		case next.c <- f.now:
		default:
		}
		if next.period > 0 {
			next.due = next.due.Add(next.period)
		} else {
			next.stopped = true
		}
		f.prune()
	}
	f.now = end
}

// earliestDue is the live waiter due first, not after end, or nil.
func (f *Fake) earliestDue(end time.Time) *fakeWaiter {
	var first *fakeWaiter
	for _, w := range f.waiters {
		if !w.stopped && !w.due.After(end) && (first == nil || w.due.Before(first.due)) {
			first = w
		}
	}
	return first
}

func (f *Fake) prune() {
	live := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.stopped {
			live = append(live, w)
		}
	}
	clear(f.waiters[len(live):])
	f.waiters = live
}

// Waiters is the number of tickers and timers not yet fired or stopped:
// a test waits for a service to be waiting before it advances the clock.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

type fakeTicker struct {
	f *Fake
	w *fakeWaiter
}

func (t *fakeTicker) C() <-chan time.Time { return t.w.c }

func (t *fakeTicker) Stop() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.w.stopped = true
	t.f.prune()
}
