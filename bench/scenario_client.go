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
	return agqBurnDownClientKeyed(ctx, cl, s, n, run, 0)
}

// agqBurnDownClientKeyed is agqBurnDownClient with its jobs spread over
// keys fair keys (none when 0).
func agqBurnDownClientKeyed(ctx context.Context, cl *cluster, s *agqServer, n, run, keys int) (measure, error) {
	queue := "burn-client"
	doc := func(int) string { return jobDoc(queue, 0) }
	if keys > 0 {
		queue = "burn-client-fair"
		doc = func(i int) string {
			return fmt.Sprintf(`{"queue":%q,"type":"bench","fair_key":"customer-%d","payload":{"sent_at":0}}`, queue, i%keys)
		}
	}
	if err := s.submitDocs(ctx, n, 1000, doc); err != nil {
		return measure{}, err
	}
	return agqWorkClient(ctx, cl, s, queue, n, fmt.Sprintf("client-%d-%d", run, keys))
}

// agqWorkClient measures one Worker of the client package, registered as
// id, working off the n jobs waiting in queue.
func agqWorkClient(ctx context.Context, cl *cluster, s *agqServer, queue string, n int, id string) (measure, error) {
	return agqWorkClientWith(ctx, cl, s, queue, n, id, clientSlots, func(context.Context, *client.Job) (any, error) { return nil, nil })
}

// agqWorkClientWith is agqWorkClient with slots jobs at once, each run by
// handle.
func agqWorkClientWith(ctx context.Context, cl *cluster, s *agqServer, queue string, n int, id string, slots int,
	handle client.HandlerFunc) (measure, error) {
	key, err := s.admin.Do(ctx, "KEY.CREATE", "worker", id).Text()
	if err != nil {
		return measure{}, err
	}
	var handled atomic.Int64
	w, err := client.NewWorker(client.WorkerOptions{Addr: s.addr, WorkerID: id, Key: key, Queues: []string{queue},
		Concurrency: slots, PopTimeout: time.Second})
	if err != nil {
		return measure{}, err
	}
	w.Handle("bench", func(ctx context.Context, j *client.Job) (any, error) {
		out, err := handle(ctx, j)
		if err == nil {
			handled.Add(1)
		}
		return out, err
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
