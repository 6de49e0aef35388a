// Package clock is the time of agq's background services. Production code
// uses Real; tests use a Fake they move with Advance, so that a grace
// window or a retention pass can be tested without waiting for it.
package clock

import "time"

// Clock tells the time and makes the tickers and timers that wait for it.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// NewTicker ticks every d, dropping ticks a slow reader misses, as
	// time.NewTicker does.
	NewTicker(d time.Duration) Ticker
	// After sends the time once d has passed, as time.After does.
	After(d time.Duration) <-chan time.Time
}

// Ticker is a time.Ticker behind an interface.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTicker returns a time.Ticker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// Or returns c, or Real when c is nil: a Config's default.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}
