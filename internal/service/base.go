package service

import (
	"context"
	"sync"
)

// BaseStartStop keeps a service's start and stop bookkeeping: the cancel
// of its context and the wait for its goroutines. The zero value is ready
// to use.
type BaseStartStop struct {
	// mu serializes starts and stops, so that adding goroutines to wg
	// never races a Stop waiting on it.
	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartFuncs runs each of fns in a goroutine of its own, with a context
// that ends with ctx or Stop. A run left from an earlier StartFuncs is
// stopped first, so a service can be started again after losing, say,
// leadership. fns must not stop their own service: Stop waits for them.
func (b *BaseStartStop) StartFuncs(ctx context.Context, fns ...func(ctx context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopLocked()
	ctx, b.cancel = context.WithCancel(ctx)
	for _, fn := range fns {
		b.wg.Go(func() { fn(ctx) })
	}
}

// Stop cancels the run's context and waits for its goroutines. It is
// idempotent.
func (b *BaseStartStop) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopLocked()
}

func (b *BaseStartStop) stopLocked() {
	if b.cancel != nil {
		b.cancel()
		b.cancel = nil
	}
	b.wg.Wait()
}
