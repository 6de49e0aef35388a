package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agq/agq/client"
)

// fairKeys is how many fair keys the keyed burn-down spreads its jobs over.
const fairKeys = 1000

// fairRows measures fair share inside a queue: the client package's
// burn-down with its jobs over 1,000 fair keys beside the plain one (in
// turn, in the same run), the shares served to keys of weights 1:2:4, and
// how soon a quiet key's job is taken behind another key's backlog while
// every worker slot is busy.
func (e *scenarioEnv) fairRows(ctx context.Context, r *report) error {
	var plain, keyed []measure
	for i := range max(e.o.repeat, 1) {
		e.say("burn-down of %d jobs by one client package worker, plain then over %d fair keys (run %d of %d)", e.o.jobs, fairKeys, i+1, max(e.o.repeat, 1))
		// In turn, which goes first too: a burn-down runs on what the one
		// before it left in the table.
		var p, k measure
		var err error
		for _, keyed := range []bool{i%2 == 1, i%2 == 0} {
			if keyed {
				k, err = agqBurnDownClientKeyed(ctx, e.cl, e.s, e.o.jobs, 100+i, fairKeys)
			} else {
				p, err = agqBurnDownClient(ctx, e.cl, e.s, e.o.jobs, 100+i)
			}
			if err != nil {
				return fmt.Errorf("client burn-down (keyed %v): %w", keyed, err)
			}
		}
		e.say("jobs/s: plain %.0f, over %d fair keys %.0f (%.2f×)", p.rate(), fairKeys, k.rate(), k.rate()/p.rate())
		plain, keyed = append(plain, p), append(keyed, k)
	}
	p, k := median(plain), median(keyed)
	r.add(fmt.Sprintf("burn-down, client package worker, %d fair keys, %d jobs (agq column: plain, same run)", fairKeys, e.o.jobs),
		perSecond(k.rate()), perSecond(p.rate())+" (plain)", fmt.Sprintf("%.2f of plain", k.rate()/p.rate()))
	shares, err := e.fairShares(ctx)
	if err != nil {
		return fmt.Errorf("fair shares: %w", err)
	}
	r.add("fair share: shares served for weights 1:2:4 (due 14.3% / 28.6% / 57.1%), first 1,000 pops", shares, "—", "")
	lat, err := e.quietPickup(ctx)
	if err != nil {
		return fmt.Errorf("quiet key pickup: %w", err)
	}
	sortDurations(lat)
	r.add(fmt.Sprintf("fair share: quiet key pickup p99, %d queued under another key, every slot busy (%d samples)", e.o.fairFlood, len(lat)),
		millis(percentile(lat, 99)), "—", "p50 "+millis(percentile(lat, 50)))
	return nil
}

// fairWorker runs a client package worker on queue whose handler is
// handle, until the returned stop is called.
func (e *scenarioEnv) fairWorker(ctx context.Context, id, queue string, slots int, handle client.HandlerFunc) (stop func(), err error) {
	key, err := e.s.admin.Do(ctx, "KEY.CREATE", "worker", id).Text()
	if err != nil {
		return nil, err
	}
	w, err := client.NewWorker(client.WorkerOptions{Addr: e.s.addr, WorkerID: id, Key: key, Queues: []string{queue},
		Concurrency: slots, PopTimeout: time.Second})
	if err != nil {
		return nil, err
	}
	w.Handle("bench", handle)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(runCtx)
	}()
	return func() { cancel(); <-done }, nil
}

// fairShares submits backlogs under keys of weights 1, 2 and 4, works the
// queue with one worker and answers each key's share of the first 1,000
// jobs it took.
func (e *scenarioEnv) fairShares(ctx context.Context) (string, error) {
	queue := "fair-shares"
	weights := []struct {
		key    string
		weight int
	}{{"w1", 1}, {"w2", 2}, {"w4", 4}}
	for _, w := range weights {
		doc := fmt.Sprintf(`{"queue":%q,"type":"bench","fair_key":%q,"fair_weight":%d,"payload":{"key":%q}}`, queue, w.key, w.weight, w.key)
		if err := e.s.submitDocs(ctx, 1000, 1000, func(int) string { return doc }); err != nil {
			return "", err
		}
	}
	var mu sync.Mutex
	var taken []string
	enough := make(chan struct{})
	stop, err := e.fairWorker(ctx, "fair-shares", queue, 10, func(_ context.Context, j *client.Job) (any, error) {
		var p struct{ Key string }
		_ = json.Unmarshal(j.Payload(), &p)
		mu.Lock()
		defer mu.Unlock()
		if taken = append(taken, p.Key); len(taken) == 1000 {
			close(enough)
		}
		return nil, nil
	})
	if err != nil {
		return "", err
	}
	select {
	case <-enough:
	case <-time.After(2 * time.Minute):
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(taken) < 1000 {
		return "", fmt.Errorf("%d jobs taken in two minutes", len(taken))
	}
	counts := map[string]int{}
	for _, k := range taken[:1000] {
		counts[k]++
	}
	var parts []string
	for _, w := range weights {
		parts = append(parts, fmt.Sprintf("%.1f%%", float64(counts[w.key])/10))
	}
	return strings.Join(parts, " / "), nil
}

// quietPickup queues o.fairFlood jobs under one key, keeps every slot of a
// worker busy with them, and times jobs of a quiet key, one at a time,
// from submission to their handler's start.
func (e *scenarioEnv) quietPickup(ctx context.Context) ([]time.Duration, error) {
	queue := "fair-quiet"
	flood := fmt.Sprintf(`{"queue":%q,"type":"bench","fair_key":"flood","payload":{"sent_at":0}}`, queue)
	if err := e.s.submitDocs(ctx, e.o.fairFlood, 1000, func(int) string { return flood }); err != nil {
		return nil, err
	}
	var left atomic.Int64
	left.Store(int64(e.o.fairFlood))
	// Each slot holds a flood job long enough that the backlog outlasts
	// the samples.
	hold := max(5*time.Millisecond, 64*2*time.Second/time.Duration(e.o.fairFlood))
	picked := make(chan time.Duration, 1)
	stop, err := e.fairWorker(ctx, "fair-quiet", queue, 64, func(_ context.Context, j *client.Job) (any, error) {
		var p struct {
			SentAt int64 `json:"sent_at"`
		}
		_ = json.Unmarshal(j.Payload(), &p)
		if p.SentAt != 0 {
			picked <- time.Since(time.Unix(0, p.SentAt))
			return nil, nil
		}
		left.Add(-1)
		time.Sleep(hold) // busy slots: a pop waits for one to free
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	time.Sleep(200 * time.Millisecond) // every slot taken
	lat, err := e.s.timePickups(ctx, 200, 10*time.Millisecond, func() bool { return left.Load() > int64(e.o.fairFlood)/5 },
		func(sentAt int64) string {
			return fmt.Sprintf(`{"queue":%q,"type":"bench","fair_key":"quiet","payload":{"sent_at":%d}}`, queue, sentAt)
		}, picked)
	if err != nil {
		return nil, err
	}
	if len(lat) < 10 {
		return nil, fmt.Errorf("only %d samples before the backlog ran low", len(lat))
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	return lat, nil
}
