package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// How fast a wait wakes, across two agq nodes on one database: jobs that
// await on node A, their worker blocked there in BLMPOP; what wakes them
// (a signal, or the end of the job they await) happens on node B. Each
// sample runs from the +OK of that command on B to the job's re-delivery
// on A.

// wakeSamples is the number of waits of each kind, and wakeSpacing the
// pause between their wakes: spaced so that each wake is timed on its
// own, not behind a queue of others.
const (
	wakeSamples = 200
	wakeSpacing = 10 * time.Millisecond
)

// wakeRows adds the rows of the wake latencies.
func (e *scenarioEnv) wakeRows(ctx context.Context, r *report) error {
	e.say("wake: a second agq node on the same database")
	b, err := startAgq(ctx, e.bin, e.cl.url("agq"), 1000)
	if err != nil {
		return fmt.Errorf("second agq node: %w", err)
	}
	defer b.stop()
	e.say("wake: %d waits for a signal sent to the other node", wakeSamples)
	sig, err := wakeBySignal(ctx, e.s, b)
	if err != nil {
		return fmt.Errorf("wake by signal: %w", err)
	}
	r.latencies("wake: JOB.SIGNAL +OK on node B to the awaiting job's re-delivery (BLMPOP on node A)", sig, nil)
	e.say("wake: %d parents awaiting a child completed on the other node", wakeSamples)
	jobs, err := wakeByJobs(ctx, e.s, b)
	if err != nil {
		return fmt.Errorf("wake by awaited job: %w", err)
	}
	r.latencies("wake: awaited job's completion +OK on node B to the parent's re-delivery (BLMPOP on node A)", jobs, nil)
	return nil
}

// wakeRuns numbers the runs, so that each submits jobs of its own.
var wakeRuns int

// wakeWorker registers a worker on s, with a few connections: one blocks
// in BLMPOP while the others report.
func wakeWorker(ctx context.Context, s *agqServer, id string) (*redis.Client, error) {
	key, err := s.admin.Do(ctx, "KEY.CREATE", "worker", id).Text()
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr, Username: id, Password: key, PoolSize: 4, ReadTimeout: -1})
	doc, _ := json.Marshal(map[string]any{"worker_id": id, "hostname": "bench", "agw_version": "bench",
		"capabilities": map[string]any{"tools": []string{}, "types": []string{"bench"}}})
	if err := c.Do(ctx, "WORKER.REGISTER", string(doc)).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// popAll pops n jobs of queue with w, BLMPOP COUNT 100, and hands each to
// got as it arrives.
func popAll(ctx context.Context, w *redis.Client, queue string, n int, got func(d delivered, at time.Time)) error {
	for seen := 0; seen < n; {
		res, err := w.Do(ctx, "BLMPOP", 10, 1, "queue:"+queue, "RIGHT", "COUNT", 100).Slice()
		at := time.Now()
		if err == redis.Nil {
			return fmt.Errorf("%d of %d jobs of %s delivered within 10 s", seen, n, queue)
		}
		if err != nil {
			return err
		}
		jobs, _ := res[1].([]any)
		for _, raw := range jobs {
			var d delivered
			if err := json.Unmarshal([]byte(raw.(string)), &d); err != nil {
				return err
			}
			got(d, at)
			seen++
		}
	}
	return nil
}

// awaitAll pops n jobs of queue with w and makes each wait with
// STEP.WAIT step and the arguments what(job) names, in one pipeline.
func awaitAll(ctx context.Context, w *redis.Client, queue string, n int, what func(id string) []any) error {
	var ds []delivered
	if err := popAll(ctx, w, queue, n, func(d delivered, _ time.Time) { ds = append(ds, d) }); err != nil {
		return err
	}
	pipe := w.Pipeline()
	for _, d := range ds {
		pipe.Do(ctx, append(append([]any{"STEP.WAIT", d.ID, "wake"}, what(d.ID)...), "DELIVERY", d.Delivery)...)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if v, _ := c.(*redis.Cmd).Text(); len(v) < 8 || v[:8] != "AWAITING" {
			return fmt.Errorf("STEP.WAIT answered %q", v)
		}
	}
	return nil
}

// timeWakes runs wake(i) for each awaiting job i, spaced, while w waits for
// their re-deliveries on queue; it answers, for each, the time from
// wake's return to the job's re-delivery (0 when the re-delivery came
// first), and completes the re-delivered jobs.
func timeWakes(ctx context.Context, w *redis.Client, queue string, ids []string, wake func(id string) error) ([]time.Duration, error) {
	var mu sync.Mutex
	woken, back := map[string]time.Time{}, map[string]time.Time{}
	popped := make(chan error, 1)
	go func() {
		var ds []delivered
		err := popAll(ctx, w, queue, len(ids), func(d delivered, at time.Time) {
			mu.Lock()
			back[d.ID] = at
			mu.Unlock()
			ds = append(ds, d)
		})
		pipe := w.Pipeline()
		for _, d := range ds {
			pipe.Do(ctx, "JOB.UPDATE", d.ID, fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, d.Attempt, d.Delivery))
		}
		if _, perr := pipe.Exec(ctx); err == nil {
			err = perr
		}
		popped <- err
	}()
	for _, id := range ids {
		if err := wake(id); err != nil {
			return nil, err
		}
		mu.Lock()
		woken[id] = time.Now()
		mu.Unlock()
		time.Sleep(wakeSpacing)
	}
	if err := <-popped; err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, len(ids))
	for _, id := range ids {
		out = append(out, max(back[id].Sub(woken[id]), 0))
	}
	return out, nil
}

// wakeBySignal times jobs awaiting a signal on a, woken by JOB.SIGNAL on b.
func wakeBySignal(ctx context.Context, a, b *agqServer) ([]time.Duration, error) {
	wakeRuns++
	queue := fmt.Sprintf("wake-signal-%d", wakeRuns)
	w, err := wakeWorker(ctx, a, queue)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	ids := make([]string, wakeSamples)
	pipe := a.admin.Pipeline()
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", queue, i)
		pipe.Do(ctx, "JOB.SUBMIT", fmt.Sprintf(`{"job_id":%q,"queue":%q,"type":"bench"}`, ids[i], queue))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	if err := awaitAll(ctx, w, queue, len(ids), func(string) []any { return []any{"SIGNAL", "go"} }); err != nil {
		return nil, err
	}
	return timeWakes(ctx, w, queue, ids, func(id string) error {
		return b.admin.Do(ctx, "JOB.SIGNAL", id, "go", "{}").Err()
	})
}

// wakeByJobs times parents awaiting a child on a, each woken by its child's
// completion, reported by a worker of b.
func wakeByJobs(ctx context.Context, a, b *agqServer) ([]time.Duration, error) {
	wakeRuns++
	queue := fmt.Sprintf("wake-jobs-%d", wakeRuns)
	kids := queue + "-kids"
	w, err := wakeWorker(ctx, a, queue)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	kw, err := wakeWorker(ctx, b, kids)
	if err != nil {
		return nil, err
	}
	defer kw.Close()
	ids := make([]string, wakeSamples)
	pipe := a.admin.Pipeline()
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", queue, i)
		pipe.Do(ctx, "JOB.SUBMIT", fmt.Sprintf(`{"job_id":%q,"queue":%q,"type":"bench"}`, ids[i], queue))
		pipe.Do(ctx, "JOB.SUBMIT", fmt.Sprintf(`{"job_id":"%s-kid","queue":%q,"type":"bench"}`, ids[i], kids))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	if err := awaitAll(ctx, w, queue, len(ids), func(id string) []any { return []any{"JOBS", id + "-kid"} }); err != nil {
		return nil, err
	}
	// The children are taken now, and each completed in turn.
	held := map[string]delivered{}
	if err := popAll(ctx, kw, kids, len(ids), func(d delivered, _ time.Time) { held[d.ID] = d }); err != nil {
		return nil, err
	}
	return timeWakes(ctx, w, queue, ids, func(id string) error {
		d := held[id+"-kid"]
		return kw.Do(ctx, "JOB.UPDATE", d.ID, fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, d.Attempt, d.Delivery)).Err()
	})
}
