package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// workQueue runs workers popping from queue until n jobs completed or the
// deadline; each holds its job for hold. It returns the ids completed.
func workQueue(t *testing.T, workers []*testWorker, queue string, n int, hold time.Duration, deadline time.Time) []string {
	t.Helper()
	return workQueues(t, workers, []string{queue}, n, func(delivered) time.Duration { return hold }, deadline)
}

// workQueues is workQueue over several queues, holding each job as long as
// hold says.
func workQueues(t *testing.T, workers []*testWorker, queues []string, n int, hold func(delivered) time.Duration, deadline time.Time) []string {
	t.Helper()
	ctx := context.Background()
	args := []any{"BRPOP"}
	for _, q := range queues {
		args = append(args, "queue:"+q)
	}
	args = append(args, "1")
	var mu sync.Mutex
	var done []string
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				mu.Lock()
				enough := len(done) >= n
				mu.Unlock()
				if enough {
					return
				}
				res, err := w.c.Do(ctx, args...).StringSlice()
				if err == redis.Nil {
					continue
				}
				if err != nil {
					t.Errorf("BRPOP: %v", err)
					return
				}
				var d delivered
				json.Unmarshal([]byte(res[1]), &d)
				time.Sleep(hold(d))
				if err := w.update(ctx, d.JobID, map[string]any{"status": "completed"}); err != nil {
					t.Errorf("completing %s: %v", d.JobID, err)
					return
				}
				mu.Lock()
				done = append(done, d.JobID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return done
}

// twoNodes starts two agq nodes on one database; a is the first.
func twoNodes(t *testing.T) (a, b *agqtest.Agq) {
	t.Helper()
	a = agqtest.Start(t)
	cfg := agqtest.DefaultConfig(t)
	cfg.DatabaseURL, cfg.AdminKey = a.DatabaseURL, a.AdminKey
	return a, agqtest.StartConfig(t, cfg)
}

// workersOn registers n workers with tools, alternately on a and b.
func workersOn(t *testing.T, a, b *agqtest.Agq, n int, prefix string, tools ...string) []*testWorker {
	t.Helper()
	var workers []*testWorker
	for i := range n {
		node := a
		if i%2 == 1 {
			node = b
		}
		workers = append(workers, registerWorker(t, node, fmt.Sprintf("%s-%d", prefix, i), tools...))
	}
	return workers
}

// capHeld checks a run under MAXRUNNING limit: every job completed, and
// the running count sampled throughout reached the limit, never more.
func capHeld(t *testing.T, stopSampling func() (most, samples int), done, jobs, limit int) {
	t.Helper()
	most, samples := stopSampling()
	if done != jobs {
		t.Fatalf("%d of %d jobs completed", done, jobs)
	}
	if most > limit {
		t.Fatalf("%d jobs ran at once, with MAXRUNNING %d", most, limit)
	}
	if most < limit || samples < 10 {
		t.Fatalf("the sampler saw at most %d running in %d samples: it did not watch the work", most, samples)
	}
}

// MAXRUNNING 2 on a queue worked by ten free workers on two nodes: the
// queue never has more than two running jobs (sampled from the database
// throughout), and every job completes, each freed place going to a
// blocked pop at once rather than at the next periodic re-check.
func TestMaxRunningHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := context.Background()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "QUEUE.CONFIG", "capped", "MAXRUNNING", "2").Err(); err != nil {
		t.Fatal(err)
	}
	workers := workersOn(t, a, b, 10, "capped", "t")
	for range 20 {
		submit(t, admin, map[string]any{"type": "t", "queue": "capped"})
	}
	stop := sampleMost(func() (int, error) {
		m, err := admin.Do(ctx, "QUEUE.STATS", "capped").Result()
		if err != nil {
			return 0, err
		}
		return int(statsField(t, m, "running")), nil
	})
	done := workQueue(t, workers, "capped", 20, 30*time.Millisecond, time.Now().Add(60*time.Second))
	capHeld(t, stop, len(done), 20, 2)
	info, err := b.Admin(t).Do(ctx, "QUEUE.INFO", "capped").Result()
	if err != nil || statsField(t, info, "max_running") != 2 || statsField(t, info, "completed") != 20 {
		t.Fatalf("QUEUE.INFO on the other node: %v %v", info, err)
	}
}

// RATE 10 PER 1: fifty jobs and ten free workers; no second (by the
// database's start times) holds more than ten starts, so the fifty take
// more than four seconds from the first start to the last.
func TestRateLimitSpacesStarts(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "QUEUE.CONFIG", "paced", "RATE", "10", "PER", "1").Err(); err != nil {
		t.Fatal(err)
	}
	var workers []*testWorker
	for i := range 10 {
		workers = append(workers, registerWorker(t, a, fmt.Sprintf("paced-%d", i), "t"))
	}
	for range 50 {
		submit(t, admin, map[string]any{"type": "t", "queue": "paced"})
	}
	done := workQueue(t, workers, "paced", 50, 0, time.Now().Add(60*time.Second))
	if len(done) != 50 {
		t.Fatalf("%d of 50 jobs completed", len(done))
	}
	starts := startTimes(t, admin, done)
	assertPaced(t, starts, 10)
	if span := starts[len(starts)-1].Sub(starts[0]); span < 4*time.Second {
		t.Fatalf("fifty starts took %v", span)
	}
	t.Logf("fifty starts over %v", starts[len(starts)-1].Sub(starts[0]))
}

// startTimes reads the jobs' start times, in order.
func startTimes(t *testing.T, admin *redis.Client, ids []string) []time.Time {
	t.Helper()
	var starts []time.Time
	for _, id := range ids {
		raw, err := admin.Do(context.Background(), "JOB.GET", id).Text()
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			StartedAt time.Time `json:"started_at"`
		}
		if err := json.Unmarshal([]byte(raw), &v); err != nil || v.StartedAt.IsZero() {
			t.Fatalf("job %s without a start: %s %v", id, raw, err)
		}
		starts = append(starts, v.StartedAt)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	return starts
}

// assertPaced fails when any second holds more than perSecond of starts.
func assertPaced(t *testing.T, starts []time.Time, perSecond int) {
	t.Helper()
	for i := range starts {
		in := 0
		for j := i; j < len(starts) && starts[j].Sub(starts[i]) < time.Second; j++ {
			in++
		}
		if in > perSecond {
			t.Fatalf("%d jobs started within a second from %v", in, starts[i])
		}
	}
}

// QUEUE.CONFIG's refusals, and who may set and read limits.
func TestQueueConfigRules(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	for _, c := range []struct {
		args []any
		want string
	}{
		{[]any{"QUEUE.CONFIG", "q", "MAXRUNNING"}, "ERR syntax error"},
		{[]any{"QUEUE.CONFIG", "q", "MAXRUNNING", "0"}, "ERR MAXRUNNING must be NONE or a whole number from 1 to 1000000"},
		{[]any{"QUEUE.CONFIG", "q", "RATE", "x", "PER", "1"}, "ERR RATE must be a whole number from 1 to 100000"},
		{[]any{"QUEUE.CONFIG", "q", "RATE", "5", "EVERY", "1"}, "ERR syntax error"},
		{[]any{"QUEUE.CONFIG", "q", "RATE", "5", "PER", "0"}, "ERR RATE period must be a whole number from 1 to 86400"},
	} {
		if err := admin.Do(ctx, c.args...).Err(); err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %s", c.args, err, c.want)
		}
	}
	w := registerWorker(t, a, "limits-w", "t")
	if err := w.c.Do(ctx, "QUEUE.CONFIG", "q").Err(); err == nil {
		t.Error("a worker key read a queue's limits")
	}
	producer := a.Client(t, redis.Options{Username: "p", Password: a.CreateKey(t, "producer", "p")})
	if err := producer.Do(ctx, "QUEUE.CONFIG", "q", "MAXRUNNING", "3").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("a producer set limits: %v", err)
	}
	if err := admin.Do(ctx, "QUEUE.CONFIG", "q", "MAXRUNNING", "3", "RATE", "7", "PER", "60").Err(); err != nil {
		t.Fatal(err)
	}
	m, err := producer.Do(ctx, "QUEUE.CONFIG", "q").Result()
	if err != nil || statsField(t, m, "max_running") != 3 || statsField(t, m, "rate_limit") != 7 ||
		statsField(t, m, "rate_period_seconds") != 60 {
		t.Fatalf("limits read by a producer: %v %v", m, err)
	}
	m, err = admin.Do(ctx, "QUEUE.CONFIG", "q", "MAXRUNNING", "NONE").Result()
	if err != nil || statsField(t, m, "max_running") != 0 || statsField(t, m, "rate_limit") != 7 {
		t.Fatalf("after MAXRUNNING NONE: %v %v", m, err)
	}
}

// statsField reads one integer of a map reply, RESP3 map or RESP2 pairs.
func statsField(t *testing.T, reply any, key string) int64 {
	t.Helper()
	switch m := reply.(type) {
	case map[any]any:
		n, _ := m[key].(int64)
		return n
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if m[i] == key {
				n, _ := m[i+1].(int64)
				return n
			}
		}
	}
	t.Fatalf("no %q in %v", key, reply)
	return 0
}
