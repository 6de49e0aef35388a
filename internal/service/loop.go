package service

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/clock"
)

// Loop is a Service that runs Sweep at start and then every Interval:
// the body of the periodic services (watchdog, scheduler), whose tests
// call the sweep directly rather than wait for a tick. Set the fields
// before Start.
type Loop struct {
	Interval time.Duration
	// Clock makes the ticker; nil is the real clock.
	Clock clock.Clock
	Sweep func(ctx context.Context) error
	// OnError receives the errors of Sweep, except those that come from
	// the loop's own end.
	OnError func(error)

	base BaseStartStop
}

// NewLoop is the loop of a periodic service named what: sweep at start and
// every interval of clk, its failures logged as what's.
func NewLoop(what string, interval time.Duration, clk clock.Clock, sweep func(context.Context) error, log zerolog.Logger) *Loop {
	return &Loop{Interval: interval, Clock: clk, Sweep: sweep,
		OnError: func(err error) { log.Warn().Err(err).Msg(what + " sweep failed") }}
}

// Start runs the loop until Stop or the end of ctx. A loop left from an
// earlier Start is stopped first. It never fails.
func (l *Loop) Start(ctx context.Context) error {
	l.base.StartFuncs(ctx, l.run)
	return nil
}

// Stop ends the loop and waits for its sweep to return.
func (l *Loop) Stop() { l.base.Stop() }

func (l *Loop) run(ctx context.Context) {
	t := clock.Or(l.Clock).NewTicker(l.Interval)
	defer t.Stop()
	for {
		if err := l.Sweep(ctx); err != nil && ctx.Err() == nil {
			l.OnError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}
