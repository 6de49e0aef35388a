package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/redis/go-redis/v9"
)

type popResult struct {
	d   delivered
	ok  bool
	dur time.Duration
}

func popAsync(t *testing.T, w *testWorker, timeout string, queues ...string) <-chan popResult {
	ch := make(chan popResult, 1)
	go func() {
		start := time.Now()
		_, d, ok := w.pop(t, timeout, queues...)
		ch <- popResult{d, ok, time.Since(start)}
	}()
	return ch
}

func slowWorker(t *testing.T, a *agqtest.Agq, id string, tools ...string) *testWorker {
	w := registerWorker(t, a, id, tools...)
	key := a.CreateKey(t, "worker", id+"-2")
	_ = key
	opts := w.c.Options()
	c := a.Client(t, redis.Options{Username: opts.Username, Password: opts.Password, ReadTimeout: 40 * time.Second, MaxRetries: -1})
	return &testWorker{id: id, c: c}
}

func TestScratchDrainingWaiterSwallowsWakeups(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w1 := slowWorker(t, a, "drained", "t")
	w2 := slowWorker(t, a, "capable", "t")
	if err := admin.Do(ctx, "WORKER.DRAIN", "drained").Err(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	go func() { r, err := w1.c.Do(ctx, "BRPOP", "queue:q", "25").Result(); t.Logf("drained BRPOP -> %v %v after %v", r, err, time.Since(t0)) }()
	time.Sleep(300 * time.Millisecond)
	r2 := popAsync(t, w2, "25", "q")
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	submit(t, admin, map[string]any{"type": "t", "queue": "q"})
	r := <-r2
	t.Logf("capable waiter got job=%v after %v (submitted %v after it blocked)", r.ok, time.Since(start), r.dur-time.Since(start))
}

func TestScratchMultiQueueWaiterSwallowsWakeup(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w1 := slowWorker(t, a, "multi", "t")
	w2 := slowWorker(t, a, "bonly", "t")
	r1 := popAsync(t, w1, "25", "a", "b")
	time.Sleep(300 * time.Millisecond)
	r2 := popAsync(t, w2, "25", "b")
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := admin.Do(ctx, "JOB.SUBMIT", `[{"type":"t","queue":"b","job_id":"in-b"},{"type":"t","queue":"a","job_id":"in-a"}]`).Err(); err != nil {
		t.Fatal(err)
	}
	x := <-r1
	t.Logf("multi waiter got %s after %v", x.d.JobID, time.Since(start))
	y := <-r2
	t.Logf("b-only waiter got %q ok=%v after %v", y.d.JobID, y.ok, time.Since(start))
}

func TestScratchDelayedJobIsLate(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := slowWorker(t, a, "dw", "t")
	late := 0
	for i := 0; i < 8; i++ {
		q := fmt.Sprintf("d%d", i)
		r := popAsync(t, w, "6", q)
		time.Sleep(100 * time.Millisecond)
		submit(t, admin, map[string]any{"type": "t", "queue": q, "delay_seconds": 1})
		x := <-r
		t.Logf("trial %d: got=%v after %v", i, x.ok, x.dur)
		if !x.ok {
			late++
		}
	}
	t.Logf("%d of 8 delayed jobs (due after 1s) not delivered within 6s", late)
}

func TestScratchResentFailureFailsNextAttempt(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w := registerWorker(t, a, "rw", "t")
	id := submit(t, admin, map[string]any{"type": "t", "queue": "r", "max_attempts": 3, "retry_backoff_seconds": 0.05})
	_, d, ok := w.pop(t, "2", "r")
	if !ok {
		t.Fatal("no job")
	}
	fail := map[string]any{"status": "failed", "error": "boom", "retryable": true}
	if err := w.update(ctx, id, fail); err != nil {
		t.Fatal(err)
	}
	_, d2, ok := w.pop(t, "2", "r") // another pop loop of the same worker takes attempt 2
	if !ok {
		t.Fatal("no retry")
	}
	// The client re-sends its first report (read timeout): must be a no-op.
	err := w.update(ctx, id, fail)
	v := getJob(t, admin, id)
	t.Logf("attempt1=%d attempt2=%d resend err=%v -> status=%s attempt=%d errors=%d", d.Attempt, d2.Attempt, err, v.Status, v.Attempt, len(v.Errors))
}

func TestScratchLongRequiresBreaksSubmit(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	req := make([]string, 80)
	for i := range req {
		req[i] = fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 100))
	}
	b, _ := json.Marshal(map[string]any{"type": "t", "requires": req})
	err := admin.Do(context.Background(), "JOB.SUBMIT", string(b)).Err()
	t.Logf("submit of a %d-byte job with 80 requires: %v", len(b), err)
}
