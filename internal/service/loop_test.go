package service

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestLoopSweepsUntilStoppedAndLeavesNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t)
	var l Loop
	var sweeps, errs atomic.Int32
	l.Start(context.Background(), 10*time.Millisecond, func(context.Context) error {
		if sweeps.Add(1)%2 == 0 {
			return errors.New("every other sweep fails")
		}
		return nil
	}, func(error) { errs.Add(1) })
	deadline := time.Now().Add(5 * time.Second)
	for sweeps.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d sweeps in 5s", sweeps.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Starting again replaces the running loop rather than adding one.
	l.Start(context.Background(), time.Hour, func(context.Context) error { return nil }, func(error) {})
	l.Stop()
	l.Stop() // idempotent
	if errs.Load() == 0 {
		t.Fatal("sweep errors were not reported")
	}
}

func TestLoopEndsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	var l Loop
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 1)
	l.Start(ctx, time.Hour, func(context.Context) error {
		select {
		case started <- struct{}{}:
		default:
		}
		return nil
	}, func(error) {})
	<-started
	cancel()
	l.Stop()
}
