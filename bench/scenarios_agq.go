package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// agqBurnDown works off n pre-submitted jobs with the workers.
// With statements, PostgreSQL's statement counts start afresh with it.
func agqBurnDown(ctx context.Context, cl *cluster, s *agqServer, ws []*worker, n int, running, statements bool) (measure, error) {
	queue := fmt.Sprintf("burn-%v", running)
	return burnDown(ctx, cl, s, ws, queue, n, statements, func(w *worker) (int, error) {
		_, ok, err := w.work(ctx, queue, running)
		if ok {
			return 1, err
		}
		return 0, err
	})
}

// agqBurnDownPipelined works off n pre-submitted jobs as a worker that runs
// one job at a time and reports each in the round trip that takes the next.
func agqBurnDownPipelined(ctx context.Context, cl *cluster, s *agqServer, ws []*worker, n int, statements bool) (measure, error) {
	queue := "burn-pipelined"
	held := make(map[*worker]*delivered, len(ws))
	for _, w := range ws {
		held[w] = &delivered{}
	}
	return burnDown(ctx, cl, s, ws, queue, n, statements, func(w *worker) (int, error) {
		return w.workPipelined(ctx, queue, held[w])
	})
}

// agqBurnDownBatched works off n pre-submitted jobs as workers with many
// free slots would: each connection takes up to count jobs with BLMPOP and
// reports them completed in one pipeline.
func agqBurnDownBatched(ctx context.Context, cl *cluster, s *agqServer, ws []*worker, n, count int, statements bool) (measure, error) {
	queue := "burn-batched"
	return burnDown(ctx, cl, s, ws, queue, n, statements, func(w *worker) (int, error) {
		return w.workBatch(ctx, queue, count)
	})
}

// burnDown submits n jobs to queue, then measures the workers working them
// off, each calling step (which answers how many jobs it completed) until
// all are done. With statements, PostgreSQL's statement counts start
// afresh with the work.
func burnDown(ctx context.Context, cl *cluster, s *agqServer, ws []*worker, queue string, n int, statements bool, step func(*worker) (int, error)) (measure, error) {
	if err := s.submitBatches(ctx, queue, n, 1000); err != nil {
		return measure{}, err
	}
	if statements {
		if err := cl.statementsReset(ctx, "agq"); err != nil {
			return measure{}, err
		}
	}
	// The measure ends with the report of the last job, as River's ends
	// when the table holds the last completion: workers still blocked in a
	// pop then wait out its timeout unmeasured.
	var wg sync.WaitGroup
	defer wg.Wait()
	return cl.measure(ctx, "agq", s.pid(), n, func() error {
		var done atomic.Int64
		var first error
		var once sync.Once
		end := make(chan struct{})
		finish := func(err error) {
			once.Do(func() {
				first = err
				close(end)
			})
		}
		for _, w := range ws {
			wg.Go(func() {
				for done.Load() < int64(n) {
					k, err := step(w)
					if err != nil {
						finish(err)
						return
					}
					if done.Add(int64(k)) >= int64(n) {
						finish(nil)
					}
				}
			})
		}
		<-end
		return first
	})
}

// agqContinuous submits single jobs from producers while the workers work,
// for d.
func agqContinuous(ctx context.Context, s *agqServer, ws []*worker, producers int, d time.Duration) (continuous, error) {
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var submitted, completed atomic.Int64
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for runCtx.Err() == nil {
				if s.admin.Do(runCtx, "JOB.SUBMIT", jobDoc("steady", 0)).Err() == nil {
					submitted.Add(1)
				}
			}
		})
	}
	for _, w := range ws {
		wg.Go(func() {
			for runCtx.Err() == nil {
				if _, ok, err := w.work(runCtx, "steady", false); err == nil && ok {
					completed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	c := continuous{submitted: submitted.Load(), completed: completed.Load(), d: d}
	// What is left waits for the next scenario's workers: drain it.
	return c, drainQueue(ctx, ws, "steady", s)
}

func drainQueue(ctx context.Context, ws []*worker, queue string, s *agqServer) error {
	for {
		n, err := s.admin.Do(ctx, "LLEN", "queue:"+queue).Int()
		if err != nil || n == 0 {
			return err
		}
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() { w.work(ctx, queue, false) })
		}
		wg.Wait()
	}
}

// agqSubmit submits n single jobs from producers connections, or n jobs in
// batches of batch from one.
func agqSubmit(ctx context.Context, s *agqServer, n, producers, batch int) (float64, error) {
	queue := fmt.Sprintf("submit-%d-%d", producers, batch)
	start := time.Now()
	if batch > 1 {
		if err := s.submitBatches(ctx, queue, n, batch); err != nil {
			return 0, err
		}
		return float64(n) / time.Since(start).Seconds(), nil
	}
	err := spread(n, producers,
		func() *redis.Client {
			return redis.NewClient(&redis.Options{Addr: s.addr, Password: s.adminKey, PoolSize: 1})
		},
		func(c *redis.Client) error { return c.Do(ctx, "JOB.SUBMIT", jobDoc(queue, 0)).Err() },
		func(c *redis.Client) { c.Close() })
	return float64(n) / time.Since(start).Seconds(), err
}

// agqPickup submits one job at a time to a queue an idle worker is blocked
// on and measures until the worker holds it.
func agqPickup(ctx context.Context, s *agqServer, w *worker, samples int) ([]time.Duration, error) {
	lat := make(chan time.Duration, samples)
	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for workCtx.Err() == nil {
			w.workWaiting(workCtx, "pickup", false, time.Second, func(d delivered) {
				lat <- time.Since(time.Unix(0, d.Payload.SentAt))
			})
		}
	}()
	time.Sleep(200 * time.Millisecond) // blocked
	return s.timePickups(ctx, samples, 5*time.Millisecond, func() bool { return true },
		func(sentAt int64) string { return jobDoc("pickup", sentAt) }, lat)
}

// timePickups submits doc(now), one job at a time, up to samples times
// while more says so, and collects how long each took to be picked up
// (sent on picked).
func (s *agqServer) timePickups(ctx context.Context, samples int, gap time.Duration, more func() bool,
	doc func(sentAt int64) string, picked <-chan time.Duration) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < samples && more(); i++ {
		if err := s.admin.Do(ctx, "JOB.SUBMIT", doc(time.Now().UnixNano())).Err(); err != nil {
			return nil, err
		}
		select {
		case d := <-picked:
			out = append(out, d)
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("a job was not picked up within 10s")
		}
		time.Sleep(gap)
	}
	return out, nil
}

// idleResult is agq with many idle blocked connections.
type idleResult struct {
	conns     int
	rss       int64
	dbConns   int
	latencies []time.Duration
}

// agqIdle blocks n connections of one worker in BRPOP, lets the node
// settle, then measures its memory, its database connections, and the
// pickup latency of jobs that each wake one of them.
func agqIdle(ctx context.Context, cl *cluster, s *agqServer, n, samples int, settle time.Duration) (idleResult, error) {
	key, err := s.admin.Do(ctx, "KEY.CREATE", "worker", "idle-fleet").Text()
	if err != nil {
		return idleResult{}, err
	}
	reg := redis.NewClient(&redis.Options{Addr: s.addr, Username: "idle-fleet", Password: key, PoolSize: 1})
	defer reg.Close()
	if err := reg.Do(ctx, "WORKER.REGISTER", `{"worker_id":"idle-fleet","hostname":"bench","agw_version":"bench","capabilities":{"tools":[],"types":["bench"]}}`).Err(); err != nil {
		return idleResult{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	lat := make(chan time.Duration, samples)
	var wg sync.WaitGroup
	clients := make([]*redis.Client, n)
	for i := range clients {
		c := redis.NewClient(&redis.Options{Addr: s.addr, Username: "idle-fleet", Password: key, PoolSize: 1,
			ReadTimeout: -1, MaxRetries: -1, DialTimeout: 30 * time.Second})
		clients[i] = c
		w := &worker{id: "idle-fleet", c: c}
		wg.Go(func() {
			for runCtx.Err() == nil {
				_, _, err := w.workWaiting(runCtx, "idle", false, 0, func(d delivered) {
					lat <- time.Since(time.Unix(0, d.Payload.SentAt))
				})
				if err != nil && runCtx.Err() == nil {
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
		if i%500 == 499 {
			time.Sleep(50 * time.Millisecond) // a fleet connects over time
		}
	}
	defer func() {
		stop()
		for _, c := range clients {
			c.Close()
		}
		wg.Wait()
	}()
	for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
		info, _ := s.admin.Info(ctx, "clients").Result()
		if blockedClients(info) >= n || time.Since(start) > 2*time.Minute {
			break
		}
	}
	time.Sleep(settle)
	res := idleResult{conns: n, rss: rss(s.pid()), dbConns: cl.connections(ctx, "agq", "agq")}
	for range samples {
		if err := s.admin.Do(ctx, "JOB.SUBMIT", jobDoc("idle", time.Now().UnixNano())).Err(); err != nil {
			return res, err
		}
		select {
		case d := <-lat:
			res.latencies = append(res.latencies, d)
		case <-time.After(10 * time.Second):
			return res, fmt.Errorf("a job was not picked up by the idle connections within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return res, nil
}

func blockedClients(info string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "blocked_clients:"); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted)-1)*p/100+0.5))]
}

func sortDurations(d []time.Duration) []time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d
}
