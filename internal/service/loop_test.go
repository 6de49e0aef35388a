package service

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agq/agq/internal/clock"
)

// waitUntil polls cond until it holds or a few seconds have passed.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLoopSweepsAtStartAndOnEachTick(t *testing.T) {
	defer goleak.VerifyNone(t)
	fake := clock.NewFake(time.Unix(1_900_000_000, 0))
	var sweeps, errs atomic.Int32
	l := &Loop{
		Interval: time.Second,
		Clock:    fake,
		Sweep: func(context.Context) error {
			if sweeps.Add(1)%2 == 0 {
				return errors.New("every other sweep fails")
			}
			return nil
		},
		OnError: func(error) { errs.Add(1) },
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	waitUntil(t, "the sweep at start", func() bool { return sweeps.Load() == 1 })
	for want := int32(2); want <= 4; want++ {
		// The ticker exists before the first sweep, so this tick is not lost.
		fake.Advance(time.Second)
		waitUntil(t, "a sweep on the tick", func() bool { return sweeps.Load() == want })
	}
	fake.Advance(999 * time.Millisecond)
	l.Stop()
	if n := sweeps.Load(); n != 4 {
		t.Errorf("%d sweeps, want 4: a sweep ran before its interval", n)
	}
	if n := errs.Load(); n != 2 {
		t.Errorf("%d errors reported, want 2", n)
	}
	if n := fake.Waiters(); n != 0 {
		t.Errorf("the stopped loop left %d tickers", n)
	}
}

func TestLoopStartedAgainReplacesTheRunningLoop(t *testing.T) {
	defer goleak.VerifyNone(t)
	var first, second atomic.Int32
	l := &Loop{Interval: time.Hour, Sweep: func(context.Context) error { first.Add(1); return nil }, OnError: func(error) {}}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first loop's sweep", func() bool { return first.Load() == 1 })
	l.Sweep = func(context.Context) error { second.Add(1); return nil }
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the second loop's sweep", func() bool { return second.Load() == 1 })
	l.Stop()
	l.Stop() // idempotent
}

func TestLoopEndsWithItsContextAndDropsItsCancellationError(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	var errs atomic.Int32
	l := &Loop{
		Interval: time.Hour,
		Sweep: func(ctx context.Context) error {
			cancel()
			return ctx.Err()
		},
		OnError: func(error) { errs.Add(1) },
	}
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	l.Stop()
	if errs.Load() != 0 {
		t.Error("the loop's own cancellation was reported as an error")
	}
}
