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

// namespaceRows measures namespaces on the hot path, in turn in the same
// run: the client package's burn-down in the default namespace and in a
// namespace of its own; and 100 client package workers, each on a queue of
// its own with a hundredth of the slots, all in one namespace, then each
// in a namespace of its own. The spread's figure to match is the one of
// the same workers in one namespace: many small workers pop and report
// in smaller batches than one large one, whatever their namespaces.
func (e *scenarioEnv) namespaceRows(ctx context.Context, r *report) error {
	var plain, own, together, spread []measure
	for i := range max(e.o.repeat, 1) {
		e.say("burn-down of %d jobs by the client package: default namespace, one namespace, %d workers in one namespace and in %d (run %d of %d)",
			e.o.jobs, spreadNamespaces, spreadNamespaces, i+1, max(e.o.repeat, 1))
		p, err := agqBurnDownClient(ctx, e.cl, e.s, e.o.jobs, 200+i)
		if err != nil {
			return fmt.Errorf("client burn-down: %w", err)
		}
		o, err := agqBurnDownSpread(ctx, e.cl, e.s, e.o.jobs, 200+i, 1, 1)
		if err != nil {
			return fmt.Errorf("client burn-down in a namespace: %w", err)
		}
		t, err := agqBurnDownSpread(ctx, e.cl, e.s, e.o.jobs, 200+i, spreadNamespaces, 1)
		if err != nil {
			return fmt.Errorf("client burn-down of %d workers in a namespace: %w", spreadNamespaces, err)
		}
		s, err := agqBurnDownSpread(ctx, e.cl, e.s, e.o.jobs, 200+i, spreadNamespaces, spreadNamespaces)
		if err != nil {
			return fmt.Errorf("client burn-down over %d namespaces: %w", spreadNamespaces, err)
		}
		e.say("jobs/s: default %.0f, own namespace %.0f (%.2f×); %d workers: in one namespace %.0f, in %d %.0f (%.2f×)",
			p.rate(), o.rate(), o.rate()/p.rate(), spreadNamespaces, t.rate(), spreadNamespaces, s.rate(), s.rate()/t.rate())
		plain, own, together, spread = append(plain, p), append(own, o), append(together, t), append(spread, s)
	}
	p, o, t, s := median(plain), median(own), median(together), median(spread)
	r.add(fmt.Sprintf("burn-down, client package worker, a namespace of its own, %d jobs (agq column: default namespace, same run)", e.o.jobs),
		perSecond(o.rate()), perSecond(p.rate())+" (default)", fmt.Sprintf("%.2f of default", o.rate()/p.rate()))
	r.add(fmt.Sprintf("burn-down, %d namespaces with a client package worker each, %d jobs in all (agq column: the same workers in one namespace, same run)",
		spreadNamespaces, e.o.jobs),
		perSecond(s.rate()), perSecond(t.rate())+" (one namespace)", fmt.Sprintf("%.2f of one namespace", s.rate()/t.rate()))
	return nil
}

// inNamespace is a client of s acting in namespace ns, with the admin key.
func (s *agqServer) inNamespace(ns string, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.addr, Password: s.adminKey, PoolSize: poolSize,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.Do(ctx, "NAMESPACE", ns).Err() }})
}

// agqBurnDownSpread is the client package's burn-down of n jobs spread
// evenly over nworkers workers, each on a queue of its own with its share of
// clientSlots, the workers spread evenly over spaces fresh namespaces.
func agqBurnDownSpread(ctx context.Context, cl *cluster, s *agqServer, n, run, nworkers, spaces int) (measure, error) {
	var workers []*client.Worker
	admins := map[string]*redis.Client{}
	defer func() {
		for _, c := range admins {
			c.Close()
		}
	}()
	for k := range nworkers {
		ns := fmt.Sprintf("bench-%d-%d-%d-%d", run, nworkers, spaces, k%spaces)
		admin, ok := admins[ns]
		if !ok {
			if err := s.admin.Do(ctx, "NAMESPACE.CREATE", ns).Err(); err != nil {
				return measure{}, err
			}
			admin = s.inNamespace(ns, 2)
			admins[ns] = admin
		}
		queue := fmt.Sprintf("burn-spread-%d", k)
		share := n/nworkers + btoi(k < n%nworkers)
		if err := submitDocsWith(ctx, admin, share, 1000, func(int) string { return jobDoc(queue, 0) }); err != nil {
			return measure{}, err
		}
		id := fmt.Sprintf("w-%s-%d", ns, k)
		key, err := s.admin.Do(ctx, "KEY.CREATE", "worker", id, "NAMESPACE", ns).Text()
		if err != nil {
			return measure{}, err
		}
		w, err := client.NewWorker(client.WorkerOptions{Addr: s.addr, WorkerID: id, Key: key, Queues: []string{queue},
			Concurrency: max(clientSlots/nworkers, 1), PopTimeout: time.Second})
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
