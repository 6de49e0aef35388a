package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// runningOfType counts the running jobs of a type, whatever their queue.
func runningOfType(ctx context.Context, admin *redis.Client, typ string) (int, error) {
	res, err := admin.Do(ctx, "JOB.LIST", "STATUS", "running", "TYPE", typ, "LIMIT", "1000").Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("JOB.LIST answered %v", res)
	}
	jobs, _ := res[1].([]any)
	return len(jobs), nil
}

// sampleMost samples count every few milliseconds until stop is called,
// which returns the largest count seen and the number of samples.
func sampleMost(count func() (int, error)) (stop func() (most, samples int)) {
	var m, n atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			c, err := count()
			if err != nil {
				continue
			}
			n.Add(1)
			if int64(c) > m.Load() {
				m.Store(int64(c))
			}
		}
	}()
	return func() (int, int) {
		close(done)
		<-sampled
		return int(m.Load()), int(n.Load())
	}
}

// TYPE.CONFIG MAXRUNNING 2 on a type whose jobs are in two queues, worked
// by ten free workers on two nodes that pop both: never more than two of
// the type run at once, across queues and nodes, while jobs of another
// type in the same queues run beside them; everything completes.
func TestTypeMaxRunningHoldsAcrossQueuesAndNodes(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := context.Background()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "TYPE.CONFIG", "render", "MAXRUNNING", "2").Err(); err != nil {
		t.Fatal(err)
	}
	workers := workersOn(t, a, b, 10, "render", "render", "other")
	for i := range 20 {
		submit(t, admin, map[string]any{"type": "render", "queue": []string{"left", "right"}[i%2]})
	}
	for i := range 10 {
		submit(t, admin, map[string]any{"type": "other", "queue": []string{"left", "right"}[i%2]})
	}

	stop := sampleMost(func() (int, error) { return runningOfType(ctx, admin, "render") })
	done := workQueues(t, workers, []string{"left", "right"}, 30,
		func(delivered) time.Duration { return 30 * time.Millisecond }, time.Now().Add(60*time.Second))
	capHeld(t, stop, len(done), 30, 2)
	m, err := b.Admin(t).Do(ctx, "TYPE.CONFIG", "render").Result()
	if err != nil || statsField(t, m, "max_running") != 2 {
		t.Fatalf("TYPE.CONFIG read on the other node: %v %v", m, err)
	}
}

// A full type does not hold up the jobs queued behind its own: with one
// slow "render" allowed at a time and twenty of them ahead in the queue,
// the five quick "other" jobs behind them all finish while renders are
// still waiting.
func TestAFullTypeLetsOtherJobsPass(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "TYPE.CONFIG", "render", "MAXRUNNING", "1").Err(); err != nil {
		t.Fatal(err)
	}
	var workers []*testWorker
	for i := range 4 {
		workers = append(workers, registerWorker(t, a, fmt.Sprintf("pass-%d", i), "render", "other"))
	}
	for range 20 {
		submit(t, admin, map[string]any{"type": "render", "queue": "mixed"})
	}
	var others []string
	for range 5 {
		others = append(others, submit(t, admin, map[string]any{"type": "other", "queue": "mixed"}))
	}
	done := make(chan []string, 1)
	go func() {
		done <- workQueues(t, workers, []string{"mixed"}, 25, func(d delivered) time.Duration {
			if d.Type == "render" {
				return 100 * time.Millisecond
			}
			return 0
		}, time.Now().Add(60*time.Second))
	}()
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range others {
		for {
			raw, err := admin.Do(ctx, "JOB.GET", id).Text()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(raw, `"status":"completed"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s behind the renders is still %s", id, raw)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waiting, err := admin.Do(ctx, "JOB.LIST", "QUEUE", "mixed", "STATUS", "queued", "TYPE", "render", "LIMIT", "1000").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if jobs, _ := waiting[1].([]any); len(jobs) < 10 {
		t.Fatalf("only %d renders were still queued when the others had finished: the test proves nothing", len(jobs))
	}
	if got := <-done; len(got) != 25 {
		t.Fatalf("%d of 25 jobs completed", len(got))
	}
}

// RATE 10 PER 1 on a type spread over two queues: no second holds more
// than ten of its starts, so thirty take more than two seconds.
func TestTypeRateLimitSpacesStarts(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "TYPE.CONFIG", "ping", "RATE", "10", "PER", "1").Err(); err != nil {
		t.Fatal(err)
	}
	var workers []*testWorker
	for i := range 10 {
		workers = append(workers, registerWorker(t, a, fmt.Sprintf("ping-%d", i), "ping"))
	}
	for i := range 30 {
		submit(t, admin, map[string]any{"type": "ping", "queue": []string{"east", "west"}[i%2]})
	}
	done := workQueues(t, workers, []string{"east", "west"}, 30,
		func(delivered) time.Duration { return 0 }, time.Now().Add(60*time.Second))
	if len(done) != 30 {
		t.Fatalf("%d of 30 jobs completed", len(done))
	}
	starts := startTimes(t, admin, done)
	assertPaced(t, starts, 10)
	if span := starts[len(starts)-1].Sub(starts[0]); span < 2*time.Second {
		t.Fatalf("thirty starts took %v", span)
	}
}

// TYPE.CONFIG's refusals, who may set and read a type's limits, and NONE
// removing them.
func TestTypeConfigRules(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	for _, c := range []struct {
		args []any
		want string
	}{
		{[]any{"TYPE.CONFIG", "t", "MAXRUNNING"}, "ERR syntax error"},
		{[]any{"TYPE.CONFIG", "t", "MAXRUNNING", "-1"}, "ERR MAXRUNNING must be NONE or a whole number from 1 to 1000000"},
		{[]any{"TYPE.CONFIG", "t", "RATE", "5", "PER", "90000"}, "ERR RATE period must be a whole number from 1 to 86400"},
		{[]any{"TYPE.CONFIG", "", "MAXRUNNING", "1"}, "ERR a job type is 1 to 128 bytes of text without control characters"},
		{[]any{"TYPE.CONFIG", "a\nb"}, "ERR a job type is 1 to 128 bytes of text without control characters"},
		{[]any{"TYPE.CONFIG", strings.Repeat("t", 129)}, "ERR a job type is 1 to 128 bytes of text without control characters"},
	} {
		if err := admin.Do(ctx, c.args...).Err(); err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %s", c.args, err, c.want)
		}
	}
	producer := a.Client(t, redis.Options{Username: "p", Password: a.CreateKey(t, "producer", "p")})
	if err := producer.Do(ctx, "TYPE.CONFIG", "t", "MAXRUNNING", "3").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("a producer set a type's limits: %v", err)
	}
	m, err := admin.Do(ctx, "TYPE.CONFIG", "t", "MAXRUNNING", "3", "RATE", "7", "PER", "60").Result()
	if err != nil || statsField(t, m, "max_running") != 3 || statsField(t, m, "rate_limit") != 7 {
		t.Fatalf("setting limits: %v %v", m, err)
	}
	m, err = producer.Do(ctx, "TYPE.CONFIG", "t").Result()
	if err != nil || statsField(t, m, "max_running") != 3 || statsField(t, m, "rate_period_seconds") != 60 {
		t.Fatalf("limits read by a producer: %v %v", m, err)
	}
	m, err = admin.Do(ctx, "TYPE.CONFIG", "t", "MAXRUNNING", "NONE", "RATE", "NONE").Result()
	if err != nil || statsField(t, m, "max_running") != 0 || statsField(t, m, "rate_limit") != 0 {
		t.Fatalf("after NONE: %v %v", m, err)
	}
	// Without limits the type is as any other: its jobs run at once.
	w := registerWorker(t, a, "types-w", "t")
	id := submit(t, admin, map[string]any{"type": "t", "queue": "free"})
	if _, d, ok := w.pop(t, "5", "free"); !ok || d.JobID != id {
		t.Fatalf("a job of a type without limits was not delivered: %v %v", d, ok)
	}
}

// popHeld starts a pop of queue by w that a limit must hold back: the test
// fails if it is served within half a second. The delivery comes on the
// channel.
func popHeld(t *testing.T, w *testWorker, queue string) <-chan delivered {
	t.Helper()
	got := make(chan delivered, 1)
	go func() {
		var d delivered
		if res, err := w.c.Do(context.Background(), "BRPOP", "queue:"+queue, "30").StringSlice(); err == nil {
			json.Unmarshal([]byte(res[1]), &d)
		}
		got <- d
	}()
	select {
	case d := <-got:
		t.Fatalf("a job was delivered while a limit should hold it back: %v", d)
	case <-time.After(500 * time.Millisecond):
	}
	return got
}

// servedSoon checks that the held pop got job want within 3 s of since,
// not at a later re-check.
func servedSoon(t *testing.T, got <-chan delivered, want string, since time.Time) {
	t.Helper()
	if d := <-got; d.JobID != want {
		t.Fatalf("the held pop got %v", d)
	}
	if wait := time.Since(since); wait > 3*time.Second {
		t.Fatalf("the held pop was served %v after the room freed", wait)
	}
}

// A pop held back by a type's cap on one node is woken when a job of the
// type ends on another node, at once rather than at a later re-check:
// the finishing node tells every node what left running.
func TestRoomFreedOnOneNodeWakesAPopOnAnother(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := context.Background()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "TYPE.CONFIG", "solo", "MAXRUNNING", "1").Err(); err != nil {
		t.Fatal(err)
	}
	wa := registerWorker(t, a, "solo-a", "solo")
	wb := registerWorker(t, b, "solo-b", "solo")
	first := submit(t, admin, map[string]any{"type": "solo", "queue": "one-at-a-time"})
	second := submit(t, admin, map[string]any{"type": "solo", "queue": "one-at-a-time"})
	if _, d, ok := wa.pop(t, "5", "one-at-a-time"); !ok || d.JobID != first {
		t.Fatalf("the first pop got %v %v", d, ok)
	}
	got := popHeld(t, wb, "one-at-a-time")
	finished := time.Now()
	if err := wa.update(ctx, first, map[string]any{"status": "completed"}); err != nil {
		t.Fatal(err)
	}
	servedSoon(t, got, second, finished)
}

// A snoozed job leaves running: the pop its type's cap held back gets the
// next job at once, not at a later re-check.
func TestASnoozeMakesRoomForAHeldPop(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "TYPE.CONFIG", "sleepy", "MAXRUNNING", "1").Err(); err != nil {
		t.Fatal(err)
	}
	first := registerWorker(t, a, "sleepy-1", "sleepy")
	second := registerWorker(t, a, "sleepy-2", "sleepy")
	one := submit(t, admin, map[string]any{"type": "sleepy", "queue": "naps"})
	two := submit(t, admin, map[string]any{"type": "sleepy", "queue": "naps"})
	if _, d, ok := first.pop(t, "5", "naps"); !ok || d.JobID != one {
		t.Fatalf("the first pop got %v %v", d, ok)
	}
	got := popHeld(t, second, "naps")
	snoozed := time.Now()
	if err := first.update(ctx, one, map[string]any{"status": "snoozed", "seconds": 60}); err != nil {
		t.Fatal(err)
	}
	servedSoon(t, got, two, snoozed)
}

// A job the watchdog takes back (here a delivery nobody acknowledged)
// leaves running: a pop its type's cap held back on another queue gets its
// job at once, not at a later re-check.
func TestARecoveredJobMakesRoomForAHeldPop(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) { c.AckTimeout = time.Second })
	ctx := context.Background()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "TYPE.CONFIG", "lonely", "MAXRUNNING", "1").Err(); err != nil {
		t.Fatal(err)
	}
	silent := registerWorker(t, a, "lonely-silent", "lonely")
	waiting := registerWorker(t, a, "lonely-waiting", "lonely")
	lost := submit(t, admin, map[string]any{"type": "lonely", "queue": "first"})
	next := submit(t, admin, map[string]any{"type": "lonely", "queue": "second"})
	if _, d, ok := silent.pop(t, "5", "first"); !ok || d.JobID != lost {
		t.Fatalf("the first pop got %v %v", d, ok)
	}
	got := popHeld(t, waiting, "second")
	since := time.Now()
	// The watchdog sweeps every second: the delivery goes back within
	// about two, and the held pop is served then, not at the re-check of
	// its queue (every 15 s).
	if d := <-got; d.JobID != next {
		t.Fatalf("the held pop got %v", d)
	}
	if wait := time.Since(since); wait > 5*time.Second {
		t.Fatalf("the held pop was served %v after its wait began", wait)
	}
	raw, err := admin.Do(ctx, "JOB.GET", lost).Text()
	if err != nil || !strings.Contains(raw, `"status":"queued"`) {
		t.Fatalf("the unacknowledged job after the watchdog: %s, %v", raw, err)
	}
}
