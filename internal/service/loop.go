// Package service runs the sweeps of agq's background services (watchdog,
// scheduler): one owned goroutine per service, a sweep at start and then
// every interval, stopped and waited for by Stop.
package service

import (
	"context"
	"sync"
	"time"
)

// Loop runs a sweep periodically. The zero value is ready to use.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start runs sweep now and then every interval until Stop or the end of
// ctx; errors other than the loop's own cancellation go to onErr. A loop
// left from an earlier Start is stopped first.
func (l *Loop) Start(ctx context.Context, interval time.Duration, sweep func(context.Context) error, onErr func(error)) {
	l.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, l.cancel = context.WithCancel(ctx)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if err := sweep(ctx); err != nil && ctx.Err() == nil {
				onErr(err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the loop and waits for its sweep to return.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel := l.cancel
	l.cancel = nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	l.wg.Wait()
}
