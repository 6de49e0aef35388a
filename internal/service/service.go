// Package service gives agq's background work (the watchdog, the
// scheduler, the leader elector, the notification hub, the managed
// PostgreSQL's watch) one lifecycle: a Service is started with a context
// and stopped by Stop, which returns once its goroutines have.
package service

import (
	"context"
	"sync"
)

// Service is background work with an owner. Start returns once the work is
// under way; an error means nothing of it runs. Stop ends it and waits for
// its goroutines; it is idempotent and may follow a failed Start. A
// service may be started again after Stop.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// StartAll starts services in order. When one fails, those started before
// it are stopped, in reverse order, and its error is returned.
func StartAll(ctx context.Context, services ...Service) error {
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			StopAll(services[:i]...)
			return err
		}
	}
	return nil
}

// StopAll stops services in reverse order: a service may use those
// started before it until it is stopped itself.
func StopAll(services ...Service) {
	for i := len(services) - 1; i >= 0; i-- {
		services[i].Stop()
	}
}

// StopAllParallel stops services at once and returns when all have
// stopped; for services that do not use one another.
func StopAllParallel(services ...Service) {
	var wg sync.WaitGroup
	for _, s := range services {
		wg.Go(s.Stop)
	}
	wg.Wait()
}
