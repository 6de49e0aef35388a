package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/client"
)

// spreadNamespaces is how many namespaces the spread burn-down uses, each
// with a client package worker of its own.
const spreadNamespaces = 100

// namespaceRows measures namespaces on the hot path: the client package's
// burn-down in the default namespace, in a namespace of its own, and
// spread over 100 namespaces with a worker each (as many slots in all),
// in turn in the same run.
func (e *scenarioEnv) namespaceRows(ctx context.Context, r *report) error {
	var plain, own, spread []measure
	for i := range max(e.o.repeat, 1) {
		e.say("burn-down of %d jobs by the client package: default namespace, one namespace, %d namespaces (run %d of %d)",
			e.o.jobs, spreadNamespaces, i+1, max(e.o.repeat, 1))
		p, err := agqBurnDownClient(ctx, e.cl, e.s, e.o.jobs, 200+i)
		if err != nil {
			return fmt.Errorf("client burn-down: %w", err)
		}
		o, err := agqBurnDownSpread(ctx, e.cl, e.s, e.o.jobs, 200+i, 1)
		if err != nil {
			return fmt.Errorf("client burn-down in a namespace: %w", err)
		}
		s, err := agqBurnDownSpread(ctx, e.cl, e.s, e.o.jobs, 200+i, spreadNamespaces)
		if err != nil {
			return fmt.Errorf("client burn-down over %d namespaces: %w", spreadNamespaces, err)
		}
		e.say("jobs/s: default %.0f, own namespace %.0f (%.2f×), %d namespaces %.0f (%.2f×)",
			p.rate(), o.rate(), o.rate()/p.rate(), spreadNamespaces, s.rate(), s.rate()/p.rate())
		plain, own, spread = append(plain, p), append(own, o), append(spread, s)
	}
	p, o, s := median(plain), median(own), median(spread)
	r.add(fmt.Sprintf("burn-down, client package worker, a namespace of its own, %d jobs (agq column: default namespace, same run)", e.o.jobs),
		perSecond(o.rate()), perSecond(p.rate())+" (default)", fmt.Sprintf("%.2f of default", o.rate()/p.rate()))
	r.add(fmt.Sprintf("burn-down, %d namespaces with a client package worker each, %d jobs in all (same run)", spreadNamespaces, e.o.jobs),
		perSecond(s.rate()), perSecond(p.rate())+" (default)", fmt.Sprintf("%.2f of default", s.rate()/p.rate()))
	return nil
}

// inNamespace is a client of s acting in namespace ns, with the admin key.
func (s *agqServer) inNamespace(ns string, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.addr, Password: s.adminKey, PoolSize: poolSize,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.Do(ctx, "NAMESPACE", ns).Err() }})
}

// agqBurnDownSpread is the client package's burn-down of n jobs spread
// evenly over spaces fresh namespaces, each with its own worker holding
// its share of clientSlots.
func agqBurnDownSpread(ctx context.Context, cl *cluster, s *agqServer, n, run, spaces int) (measure, error) {
	const queue = "burn-spread"
	var workers []*client.Worker
	var admins []*redis.Client
	defer func() {
		for _, c := range admins {
			c.Close()
		}
	}()
	for k := range spaces {
		ns := fmt.Sprintf("bench-%d-%d-%d", run, spaces, k)
		if err := s.admin.Do(ctx, "NAMESPACE.CREATE", ns).Err(); err != nil {
			return measure{}, err
		}
		admin := s.inNamespace(ns, 2)
		admins = append(admins, admin)
		share := n/spaces + btoi(k < n%spaces)
		if err := submitDocsWith(ctx, admin, share, 1000, func(int) string { return jobDoc(queue, 0) }); err != nil {
			return measure{}, err
		}
		id := "w-" + ns
		key, err := s.admin.Do(ctx, "KEY.CREATE", "worker", id, "NAMESPACE", ns).Text()
		if err != nil {
			return measure{}, err
		}
		w, err := client.NewWorker(client.WorkerOptions{Addr: s.addr, WorkerID: id, Key: key, Queues: []string{queue},
			Concurrency: max(clientSlots/spaces, 1), PopTimeout: time.Second})
		if err != nil {
			return measure{}, err
		}
		workers = append(workers, w)
	}
	var handled atomic.Int64
	for _, w := range workers {
		w.Handle("bench", func(context.Context, *client.Job) (any, error) {
			handled.Add(1)
			return nil, nil
		})
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	failed := make(chan error, len(workers))
	defer func() {
		stop()
		wg.Wait()
	}()
	return cl.measure(ctx, "agq", s.pid(), n, func() error {
		for _, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := w.Run(runCtx); err != nil && runCtx.Err() == nil {
					failed <- err
				}
			}()
		}
		for handled.Load() < int64(n) {
			select {
			case err := <-failed:
				return fmt.Errorf("a worker stopped: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// submitDocsWith is submitDocs through client c (one acting in a
// namespace).
func submitDocsWith(ctx context.Context, c *redis.Client, n, size int, doc func(i int) string) error {
	for done := 0; done < n; {
		k := min(size, n-done)
		b := make([]byte, 0, k*64)
		b = append(b, '[')
		for i := range k {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, doc(done+i)...)
		}
		b = append(b, ']')
		if err := c.Do(ctx, "JOB.SUBMIT", string(b)).Err(); err != nil {
			return err
		}
		done += k
	}
	return nil
}
