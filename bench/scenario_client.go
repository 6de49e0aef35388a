package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/agq/agq/client"
)

// clientSlots is the client package worker's concurrency in the
// burn-down: as many jobs as one BLMPOP may take.
const clientSlots = 1000

// agqBurnDownClient works off n pre-submitted jobs with one Worker of the
// client package, as a Go user would run it: a no-op handler, one process,
// one BLMPOP for all its free slots, pipelined reports.
func agqBurnDownClient(ctx context.Context, cl *cluster, s *agqServer, n int, run int) (measure, error) {
	queue := "burn-client"
	if err := s.submitBatches(ctx, queue, n, 1000); err != nil {
		return measure{}, err
	}
	id := fmt.Sprintf("client-%d", run)
	key, err := s.admin.Do(ctx, "KEY.CREATE", "worker", id).Text()
	if err != nil {
		return measure{}, err
	}
	var handled atomic.Int64
	w, err := client.NewWorker(client.WorkerOptions{Addr: s.addr, WorkerID: id, Key: key, Queues: []string{queue},
		Concurrency: clientSlots, PopTimeout: time.Second})
	if err != nil {
		return measure{}, err
	}
	w.Handle("bench", func(context.Context, *client.Job) (any, error) {
		handled.Add(1)
		return nil, nil
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	defer func() {
		stop()
		<-done
	}()
	// The measure ends with the report of the last job; the drain and
	// unregistration after it are not measured.
	return cl.measure(ctx, "agq", s.pid(), n, func() error {
		go func() { done <- w.Run(runCtx) }()
		for handled.Load() < int64(n) {
			select {
			case err := <-done:
				done <- err
				return fmt.Errorf("the worker stopped: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		return s.waitWorked(ctx, queue, 5*time.Millisecond, func() error { return nil })
	})
}
