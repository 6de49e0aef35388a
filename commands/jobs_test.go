package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// testWorker is a worker speaking the protocol with plain go-redis.
type testWorker struct {
	id string
	c  *redis.Client
}

func registerWorker(t *testing.T, a *agqtest.Agq, id string, tools ...string) *testWorker {
	t.Helper()
	key := a.CreateKey(t, "worker", id)
	c := a.Client(t, redis.Options{Username: id, Password: key})
	reg, _ := json.Marshal(map[string]any{
		"worker_id": id, "hostname": "test-host", "agw_version": "0.1.0",
		"capabilities": map[string]any{"tools": tools},
	})
	got, err := c.Do(context.Background(), "WORKER.REGISTER", string(reg)).Text()
	if err != nil {
		t.Fatalf("WORKER.REGISTER %s: %v", id, err)
	}
	if !strings.HasPrefix(got, "OK worker_id="+id+" heartbeat_interval=") {
		t.Fatalf("WORKER.REGISTER reply = %q", got)
	}
	return &testWorker{id: id, c: c}
}

type delivered struct {
	JobID    string          `json:"job_id"`
	Queue    string          `json:"queue"`
	Type     string          `json:"type"`
	Attempt  int             `json:"attempt"`
	Payload  json.RawMessage `json:"payload"`
	Priority int             `json:"priority"`
	Delivery string          `json:"delivery"`
}

// pop does BRPOP and decodes the job; ok is false on timeout.
func (w *testWorker) pop(t *testing.T, timeout string, queues ...string) (string, delivered, bool) {
	t.Helper()
	args := []any{"BRPOP"}
	for _, q := range queues {
		args = append(args, "queue:"+q)
	}
	args = append(args, timeout)
	res, err := w.c.Do(context.Background(), args...).StringSlice()
	if err == redis.Nil {
		return "", delivered{}, false
	}
	if err != nil {
		t.Fatalf("BRPOP: %v", err)
	}
	var d delivered
	if err := json.Unmarshal([]byte(res[1]), &d); err != nil {
		t.Fatalf("job json %q: %v", res[1], err)
	}
	return res[0], d, true
}

func (w *testWorker) update(ctx context.Context, id string, doc any) error {
	b, _ := json.Marshal(doc)
	return w.c.Do(ctx, "JOB.UPDATE", id, string(b)).Err()
}

func submit(t *testing.T, c *redis.Client, job map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(job)
	id, err := c.Do(context.Background(), "JOB.SUBMIT", string(b)).Text()
	if err != nil {
		t.Fatalf("JOB.SUBMIT %s: %v", b, err)
	}
	return id
}

type jobView struct {
	ID       string            `json:"job_id"`
	Status   string            `json:"status"`
	Attempt  int               `json:"attempt"`
	WorkerID *string           `json:"worker_id"`
	Errors   []json.RawMessage `json:"errors"`
	Result   json.RawMessage   `json:"result"`
	RunAt    time.Time         `json:"run_at"`
}

func getJob(t *testing.T, c *redis.Client, id string) jobView {
	t.Helper()
	raw, err := c.Do(context.Background(), "JOB.GET", id).Text()
	if err != nil {
		t.Fatalf("JOB.GET %s: %v", id, err)
	}
	var v jobView
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCapabilityRouting(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	sorter := registerWorker(t, a, "sorter", "sort")
	grepper := registerWorker(t, a, "grepper", "grep")

	// The oldest job is one the sorter cannot run: it must not block it.
	grepJob := submit(t, admin, map[string]any{"plan": map[string]any{"tasks": []any{map[string]any{"tool": "grep"}}}})
	sortJob := submit(t, admin, map[string]any{"plan": map[string]any{"tasks": []any{map[string]any{"tool": "sort"}}}})
	bothJob := submit(t, admin, map[string]any{"requires": []string{"sort", "grep"}})

	_, d, ok := sorter.pop(t, "1", "ready")
	if !ok || d.JobID != sortJob {
		t.Fatalf("sorter got %+v (ok=%v), want %s", d, ok, sortJob)
	}
	if _, d, ok := sorter.pop(t, "0.2", "ready"); ok {
		t.Fatalf("sorter got %s, which it cannot run", d.JobID)
	}
	_, d, ok = grepper.pop(t, "1", "ready")
	if !ok || d.JobID != grepJob {
		t.Fatalf("grepper got %+v (ok=%v), want %s", d, ok, grepJob)
	}
	if _, d, ok := grepper.pop(t, "0.2", "ready"); ok {
		t.Fatalf("grepper got %s, which it cannot run", d.JobID)
	}
	if got := getJob(t, admin, bothJob).Status; got != "queued" {
		t.Fatalf("job needing both tools is %s, want queued", got)
	}
}

func TestBlockedPopIsWokenByRedisCLILPush(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	w := registerWorker(t, a, "w1", "echo")
	type result struct {
		d       delivered
		ok      bool
		elapsed time.Duration
	}
	got := make(chan result, 1)
	pushed := make(chan time.Time, 1)
	go func() {
		_, d, ok := w.pop(t, "5", "ready")
		got <- result{d, ok, time.Since(<-pushed)}
	}()
	// Let the pop block first.
	agqtest.Eventually(t, 5*time.Second, func() error {
		list, _ := a.Admin(t).ClientList(context.Background()).Result()
		if !strings.Contains(list, "cmd=brpop") {
			return fmt.Errorf("no blocked client yet")
		}
		return nil
	})
	pushed <- time.Now()
	out, err := a.RedisCLI(t, "-a", a.AdminKey, "--no-auth-warning", "LPUSH", "queue:ready", `{"job_id":"cli-1","type":"echo","payload":{"n":1}}`)
	// The ready depth after the push: 0 when the blocked worker already
	// took the job, which is the point.
	if err != nil || out != "1" { // the job handed over still counts, as in Redis
		t.Fatalf("redis-cli LPUSH = %q, %v", out, err)
	}
	r := <-got
	if !r.ok || r.d.JobID != "cli-1" {
		t.Fatalf("blocked pop got %+v", r)
	}
	t.Logf("pop woke %v after the push started", r.elapsed)
	if r.elapsed > 2*time.Second {
		t.Fatalf("pop took %v to wake", r.elapsed)
	}
}

func TestIdleBlockedWorkersHoldNoDatabaseConnections(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	key := a.CreateKey(t, "worker", "crowd")
	ctx := context.Background()
	// busy counts backends of this database doing something other than
	// waiting for a command (the LISTEN connection waits too); total counts all.
	pool := a.Node.Store().Pool
	// The watchdog's sweeps are busy for a moment every second: the least
	// of several samples (busy backends, connections acquired from agq's
	// pool) is what the blocked pops hold.
	dbConns := func() (busy, total int, acquired int32) {
		busy, acquired = -1, -1
		for range 10 {
			if a := pool.Stat().AcquiredConns(); acquired < 0 || a < acquired {
				acquired = a
			}
			var b, n int
			err := pool.QueryRow(ctx, `
				SELECT count(*) FILTER (WHERE state <> 'idle' AND pid <> pg_backend_pid()), count(*)
				FROM pg_stat_activity WHERE datname = current_database()`).Scan(&b, &n)
			if err != nil {
				t.Fatal(err)
			}
			if busy < 0 || b < busy {
				busy = b
			}
			total = max(total, n)
			time.Sleep(50 * time.Millisecond)
		}
		return busy, total, acquired
	}
	reg := func(c *redis.Client, id string) {
		b, _ := json.Marshal(map[string]any{"worker_id": id, "hostname": "h", "agw_version": "1", "capabilities": map[string]any{"tools": []string{"x"}}})
		if err := c.Do(ctx, "WORKER.REGISTER", string(b)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	block := func(n int) (stop func()) {
		var wg sync.WaitGroup
		clients := make([]*redis.Client, n)
		for i := range clients {
			id := fmt.Sprintf("crowd-%d", i)
			// No read timeout: the pops block until the test closes them,
			// however long registering the crowd takes on a busy machine.
			clients[i] = a.Client(t, redis.Options{Username: id, Password: key, PoolSize: 1, ReadTimeout: -1, MaxRetries: -1})
			reg(clients[i], id)
			wg.Add(1)
			go func(c *redis.Client) {
				defer wg.Done()
				c.Do(ctx, "BRPOP", "queue:idle", "0")
			}(clients[i])
		}
		admin := a.Admin(t)
		agqtest.Eventually(t, 60*time.Second, func() error {
			list, err := admin.ClientList(ctx).Result()
			if got := strings.Count(list, "cmd=brpop"); err != nil || got < n {
				return fmt.Errorf("%d of %d pops blocked (%v)", got, n, err)
			}
			return nil
		})
		return func() {
			for _, c := range clients {
				c.Close()
			}
			wg.Wait()
		}
	}
	stop1 := block(1)
	busy1, total1, _ := dbConns()
	stop1()
	stop500 := block(500)
	busy500, total500, acquired := dbConns()
	defer stop500()
	t.Logf("database connections: 1 blocked worker: %d busy of %d; 500 blocked: %d busy of %d, %d acquired from the pool",
		busy1, total1, busy500, total500, acquired)
	if busy500 > busy1 || acquired > 0 {
		t.Fatalf("500 blocked workers hold connections: %d busy (1 worker: %d), %d acquired", busy500, busy1, acquired)
	}
	// The pool, the sweeps' connection, the LISTEN connection and the leader's lock connection.
	st := a.Node.Store()
	if limit := int(st.Pool.Config().MaxConns) + 3; total500 > limit {
		t.Fatalf("%d connections open, more than the pool's %d plus sweeps, LISTEN and leader", total500, limit-3)
	}
	// And the pool is free: a job pushed now is delivered to one of them.
	if err := a.Admin(t).Do(ctx, "LPUSH", "queue:idle", `{"type":"x"}`).Err(); err != nil {
		t.Fatal(err)
	}
	agqtest.Eventually(t, 5*time.Second, func() error {
		n, err := a.Admin(t).Do(ctx, "LLEN", "queue:idle").Int()
		if err != nil || n != 0 {
			return fmt.Errorf("LLEN = %d, %v", n, err)
		}
		return nil
	})
}

func TestQueueOrderAndPriority(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "w1", "t")
	low1 := submit(t, admin, map[string]any{"queue": "low", "type": "t"})
	high1 := submit(t, admin, map[string]any{"queue": "high", "type": "t"})
	high2 := submit(t, admin, map[string]any{"queue": "high", "type": "t", "priority": 5})
	want := []struct{ key, id string }{{"queue:high", high2}, {"queue:high", high1}, {"queue:low", low1}}
	for i, wnt := range want {
		key, d, ok := w.pop(t, "1", "high", "low")
		if !ok || key != wnt.key || d.JobID != wnt.id {
			t.Fatalf("pop %d = %s %s (ok=%v), want %s %s", i, key, d.JobID, ok, wnt.key, wnt.id)
		}
	}
	if _, _, ok := w.pop(t, "0.1", "high", "low"); ok {
		t.Fatal("pop from empty queues returned a job")
	}
	// Jobs pushed together come out in the order they were pushed, as
	// from a Redis list fed by LPUSH and drained by BRPOP.
	if err := a.Admin(t).Do(context.Background(), "LPUSH", "queue:fifo", `{"job_id":"zz","type":"t"}`, `{"job_id":"aa","type":"t"}`, `{"job_id":"mm","type":"t"}`).Err(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"zz", "aa", "mm"} {
		if _, d, ok := w.pop(t, "1", "fifo"); !ok || d.JobID != want {
			t.Fatalf("popped %q (ok=%v), want %q", d.JobID, ok, want)
		}
	}
}

func TestJobUpdateRules(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	owner := registerWorker(t, a, "owner", "t")
	other := registerWorker(t, a, "other", "t")

	id := submit(t, admin, map[string]any{"type": "t"})
	if _, d, ok := owner.pop(t, "1", "ready"); !ok || d.JobID != id {
		t.Fatalf("pop: %+v %v", d, ok)
	}
	t.Run("AnotherWorkerIsRefused", func(t *testing.T) {
		err := other.update(ctx, id, map[string]any{"status": "completed"})
		if err == nil || err.Error() != fmt.Sprintf("ERR job %s is owned by owner", id) {
			t.Fatalf("update by another worker: %v", err)
		}
	})
	t.Run("ProgressIsStored", func(t *testing.T) {
		if err := owner.update(ctx, id, map[string]any{"status": "running"}); err != nil {
			t.Fatal(err)
		}
		if err := owner.update(ctx, id, map[string]any{"current_task": 2, "progress_percent": 40}); err != nil {
			t.Fatal(err)
		}
		raw, _ := admin.Do(ctx, "JOB.GET", id).Text()
		if !strings.Contains(raw, `"progress":{"current_task":2,"progress_percent":40}`) {
			t.Fatalf("JOB.GET = %s", raw)
		}
	})
	t.Run("CompletedTwiceIsOneTransition", func(t *testing.T) {
		done := map[string]any{"status": "completed", "task_results": []any{map[string]any{"tool": "t", "exit_code": 0}}}
		for i := 0; i < 2; i++ {
			if err := owner.update(ctx, id, done); err != nil {
				t.Fatalf("completed update %d: %v", i+1, err)
			}
		}
		v := getJob(t, admin, id)
		if v.Status != "completed" || v.Attempt != 1 || !strings.Contains(string(v.Result), `"task_results"`) {
			t.Fatalf("job = %+v", v)
		}
		if err := owner.update(ctx, id, map[string]any{"status": "failed", "error": "late"}); err == nil {
			t.Fatal("a completed job accepted a failure")
		}
	})
	t.Run("CancelledJobAnswersCancelled", func(t *testing.T) {
		id2 := submit(t, admin, map[string]any{"type": "t"})
		if _, d, ok := owner.pop(t, "1", "ready"); !ok || d.JobID != id2 {
			t.Fatalf("pop: %+v %v", d, ok)
		}
		if err := admin.Do(ctx, "JOB.CANCEL", id2).Err(); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("CANCELLED job %s was cancelled", id2)
		for i := 0; i < 2; i++ {
			err := owner.update(ctx, id2, map[string]any{"current_task": 1})
			if err == nil || err.Error() != want {
				t.Fatalf("update %d of a cancelled job: %v", i+1, err)
			}
		}
		if got := getJob(t, admin, id2).Status; got != "cancelled" {
			t.Fatalf("status = %s", got)
		}
	})
	t.Run("AWorkersOwnCancellationTwiceIsOneTransition", func(t *testing.T) {
		id4 := submit(t, admin, map[string]any{"type": "t"})
		if _, d, ok := owner.pop(t, "1", "ready"); !ok || d.JobID != id4 {
			t.Fatalf("pop: %+v %v", d, ok)
		}
		for i := 0; i < 2; i++ {
			if err := owner.update(ctx, id4, map[string]any{"status": "cancelled"}); err != nil {
				t.Fatalf("cancelled update %d: %v", i+1, err)
			}
		}
		if got := getJob(t, admin, id4).Status; got != "cancelled" {
			t.Fatalf("status = %s", got)
		}
		if err := owner.update(ctx, id4, map[string]any{"status": "completed"}); err == nil ||
			err.Error() != fmt.Sprintf("CANCELLED job %s was cancelled", id4) {
			t.Fatalf("completed after the worker's own cancellation: %v", err)
		}
		// A job JOB.CANCEL ended is not a worker's to confirm.
		id5 := submit(t, admin, map[string]any{"type": "nobody-runs-this"})
		if err := admin.Do(ctx, "JOB.CANCEL", id5).Err(); err != nil {
			t.Fatal(err)
		}
		if err := owner.update(ctx, id5, map[string]any{"status": "cancelled"}); err == nil ||
			err.Error() != fmt.Sprintf("CANCELLED job %s was cancelled", id5) {
			t.Fatalf("cancelled report about a job JOB.CANCEL ended: %v", err)
		}
	})
	t.Run("QueuedJobIsCancelledAtOnce", func(t *testing.T) {
		id3 := submit(t, admin, map[string]any{"type": "nobody-runs-this"})
		if err := admin.Do(ctx, "JOB.CANCEL", id3).Err(); err != nil {
			t.Fatal(err)
		}
		if got := getJob(t, admin, id3).Status; got != "cancelled" {
			t.Fatalf("status = %s", got)
		}
	})
}

func TestRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "w", "t")
	id := submit(t, admin, map[string]any{"type": "t", "max_attempts": 3, "retry_backoff_seconds": 0.3})

	var delays []time.Duration
	for attempt := 1; attempt <= 3; attempt++ {
		_, d, ok := w.pop(t, "5", "ready")
		if !ok || d.JobID != id || d.Attempt != attempt {
			t.Fatalf("attempt %d: got %+v ok=%v", attempt, d, ok)
		}
		failedAt := time.Now()
		if err := w.update(ctx, id, map[string]any{"status": "failed", "error": fmt.Sprintf("boom %d", attempt), "retryable": true}); err != nil {
			t.Fatal(err)
		}
		// The same failure sent twice is one transition.
		if err := w.update(ctx, id, map[string]any{"status": "failed", "error": fmt.Sprintf("boom %d", attempt), "retryable": true}); err != nil {
			t.Fatalf("repeated failure: %v", err)
		}
		v := getJob(t, admin, id)
		if len(v.Errors) != attempt {
			t.Fatalf("after attempt %d the error history has %d entries", attempt, len(v.Errors))
		}
		if attempt < 3 {
			if v.Status != "retrying" {
				t.Fatalf("after attempt %d status = %s", attempt, v.Status)
			}
			delays = append(delays, v.RunAt.Sub(failedAt))
		} else if v.Status != "failed" {
			t.Fatalf("after the last attempt status = %s", v.Status)
		}
	}
	// 0.3s then 0.6s, each ±20%.
	if delays[0] < 200*time.Millisecond || delays[1] <= delays[0] {
		t.Fatalf("retry delays %v do not grow", delays)
	}
	if err := admin.Do(ctx, "JOB.RETRY", id).Err(); err != nil {
		t.Fatal(err)
	}
	if _, d, ok := w.pop(t, "5", "ready"); !ok || d.JobID != id || d.Attempt != 1 {
		t.Fatalf("revived job: %+v ok=%v", d, ok)
	}

	// A backoff of 0 retries at once: the job is due again when the
	// failure is answered.
	now := submit(t, admin, map[string]any{"type": "t", "max_attempts": 2, "retry_backoff_seconds": 0})
	if _, d, ok := w.pop(t, "5", "ready"); !ok || d.JobID != now {
		t.Fatalf("pop: %+v ok=%v", d, ok)
	}
	if err := w.update(ctx, now, map[string]any{"status": "failed", "error": "boom", "retryable": true}); err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	if v := getJob(t, admin, now); (v.Status != "retrying" && v.Status != "queued") || v.RunAt.After(answered) {
		t.Fatalf("after a failure with no backoff: status %s, due %v, the failure answered at %v", v.Status, v.RunAt, answered)
	}
	if _, d, ok := w.pop(t, "5", "ready"); !ok || d.JobID != now || d.Attempt != 2 {
		t.Fatalf("retry: %+v ok=%v", d, ok)
	}
}

func TestSubmissionIsIdempotentAndBatchesAreAtomic(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	for i := 0; i < 2; i++ {
		if id := submit(t, admin, map[string]any{"job_id": "same-id", "type": "t"}); id != "same-id" {
			t.Fatalf("id = %s", id)
		}
	}
	first := submit(t, admin, map[string]any{"unique_key": "report-42", "type": "t"})
	if again := submit(t, admin, map[string]any{"unique_key": "report-42", "type": "t"}); again != first {
		t.Fatalf("unique_key submitted twice gave %s and %s", first, again)
	}
	if n, _ := admin.Do(ctx, "LLEN", "queue:ready").Int(); n != 2 {
		t.Fatalf("LLEN = %d, want 2", n)
	}

	batch := make([]map[string]any, 1000)
	for i := range batch {
		batch[i] = map[string]any{"queue": "bulk", "type": "t", "payload": i}
	}
	batch[737]["priority"] = "high" // wrong type
	b, _ := json.Marshal(batch)
	err := admin.Do(ctx, "JOB.SUBMIT", string(b)).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "ERR job 737: ") {
		t.Fatalf("bad batch: %v", err)
	}
	if n, _ := admin.Do(ctx, "LLEN", "queue:bulk").Int(); n != 0 {
		t.Fatalf("a rejected batch left %d jobs", n)
	}
	delete(batch[737], "priority")
	b, _ = json.Marshal(batch)
	ids, err := admin.Do(ctx, "JOB.SUBMIT", string(b)).StringSlice()
	if err != nil || len(ids) != 1000 {
		t.Fatalf("batch: %d ids, %v", len(ids), err)
	}
	if n, _ := admin.Do(ctx, "LLEN", "queue:bulk").Int(); n != 1000 {
		t.Fatalf("LLEN = %d, want 1000", n)
	}

	// A batch sent again (its reply lost, say) stores nothing twice, and
	// a batch naming a held unique_key answers the job that holds it.
	resent := `[{"job_id":"again-1","queue":"again"},{"job_id":"again-2","queue":"again"}]`
	for i := 0; i < 2; i++ {
		ids, err := admin.Do(ctx, "JOB.SUBMIT", resent).StringSlice()
		if err != nil || strings.Join(ids, ",") != "again-1,again-2" {
			t.Fatalf("batch sent %d times: %v, %v", i+1, ids, err)
		}
	}
	ids, err = admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"again-3","queue":"again"},{"unique_key":"report-42","type":"t"}]`).StringSlice()
	if err != nil || strings.Join(ids, ",") != "again-3,"+first {
		t.Fatalf("batch with a held unique_key: %v, %v (holder %s)", ids, err, first)
	}
	ids, err = admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"twice","queue":"again"},{"job_id":"twice","queue":"again"}]`).StringSlice()
	if err != nil || strings.Join(ids, ",") != "twice,twice" {
		t.Fatalf("a batch naming one id twice: %v, %v", ids, err)
	}
	if n, _ := admin.Do(ctx, "LLEN", "queue:again").Int(); n != 4 {
		t.Fatalf("LLEN = %d, want 4", n)
	}

	// An id names one job: another producer's job with the same id is
	// refused, alone or in a batch (which then stores nothing).
	err = admin.Do(ctx, "JOB.SUBMIT", `{"job_id":"same-id","type":"other"}`).Err()
	if err == nil || err.Error() != "ERR job same-id already exists with different contents" {
		t.Fatalf("an id taken by other contents: %v", err)
	}
	err = admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"fresh-1","queue":"mixed"},{"job_id":"same-id","queue":"mixed"}]`).Err()
	if err == nil || err.Error() != "ERR job 1: job same-id already exists with different contents" {
		t.Fatalf("a batch with an id taken by other contents: %v", err)
	}
	if n, _ := admin.Do(ctx, "LLEN", "queue:mixed").Int(); n != 0 {
		t.Fatalf("a refused batch left %d jobs", n)
	}
	if err := admin.Do(ctx, "JOB.SUBMIT", `{"type":"t","payload":"`+strings.Repeat("x", 3<<20)+`"}`).Err(); err == nil || err.Error() != "ERR payload too large" {
		t.Fatalf("oversize job: %v", err)
	}
}

func TestDisconnectingWorkersLoseNoJobs(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) { c.AckTimeout = time.Second })
	ctx := context.Background()
	admin := a.Admin(t)
	key := a.CreateKey(t, "worker", "fleet")
	const jobs = 1000

	var mu sync.Mutex
	completions := map[string]int{}
	stopChaos, stop := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	// Workers 0-3 complete what they get; 4-7 register, block and vanish —
	// mid-wait, or right after a job was handed to them.
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			vanisher := g >= 4
			done := stop
			if vanisher {
				done = stopChaos
			}
			for round := 0; ; round++ {
				select {
				case <-done:
					return
				default:
				}
				id := fmt.Sprintf("fleet-%d-%d", g, round)
				c := redis.NewClient(&redis.Options{Addr: a.Addr, Username: id, Password: key, PoolSize: 1, MaxRetries: -1})
				reg, _ := json.Marshal(map[string]any{"worker_id": id, "hostname": "h", "agw_version": "1", "capabilities": map[string]any{"tools": []string{"t"}}})
				if err := c.Do(ctx, "WORKER.REGISTER", string(reg)).Err(); err != nil {
					c.Close()
					continue
				}
				if vanisher {
					pctx, cancel := context.WithTimeout(ctx, time.Duration(1+g+round%5)*7*time.Millisecond)
					c.Do(pctx, "BRPOP", "queue:ready", "2")
					cancel()
					c.Close()
					continue
				}
				for i := 0; i < 20; i++ {
					res, err := c.Do(ctx, "BRPOP", "queue:ready", "0.2").StringSlice()
					if err != nil {
						break
					}
					var d delivered
					json.Unmarshal([]byte(res[1]), &d)
					if err := c.Do(ctx, "JOB.UPDATE", d.JobID, `{"status":"completed"}`).Err(); err == nil {
						mu.Lock()
						completions[d.JobID]++
						mu.Unlock()
					}
				}
				c.Do(ctx, "WORKER.UNREGISTER", id)
				c.Close()
			}
		}(g)
	}
	submitted := make([]string, 0, jobs)
	for i := 0; i < jobs; i++ {
		// Attempts to spare: a job may go to several vanishing workers in a
		// row on a loaded machine, each delivery an attempt.
		submitted = append(submitted, submit(t, admin, map[string]any{"type": "t", "job_id": fmt.Sprintf("j%04d", i), "max_attempts": 20}))
		if i%100 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second) // chaos goes on for a while after the last submission
	close(stopChaos)
	// Deliveries the vanished workers took come back after the ack timeout.
	agqtest.Eventually(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(completions) < jobs {
			for _, id := range submitted {
				if completions[id] == 0 {
					raw, _ := admin.Do(ctx, "JOB.GET", id).Text()
					return fmt.Errorf("%d of %d jobs completed; %s", len(completions), jobs, raw)
				}
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()
	for _, id := range submitted {
		v := getJob(t, admin, id)
		if v.Status != "completed" {
			t.Errorf("job %s is %s", id, v.Status)
		}
		if completions[id] != 1 {
			t.Errorf("job %s completed %d times", id, completions[id])
		}
	}
}

func TestTextPostgresCannotStoreIsRefusedNeverChanged(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "w", "t")
	for _, tc := range []struct{ doc, want string }{
		{`{"job_id":"pnul","payload":{"s":"a\u0000b"}}`, `ERR invalid job: payload.s contains \u0000, which cannot be stored`},
		{`{"type":"t","inputs":{"lines":["ok","\ud800"]}}`, `ERR invalid job: inputs.lines[1] contains \ud800, half of a surrogate pair, which cannot be stored`},
		{"{\"type\":\"t\",\"payload\":\"\xed\"}", `ERR invalid job: not valid UTF-8`},
	} {
		if err := admin.Do(ctx, "JOB.SUBMIT", tc.doc).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("JOB.SUBMIT %s: %v, want %s", tc.doc, err, tc.want)
		}
	}
	if raw, err := admin.Do(ctx, "JOB.GET", "pnul").Result(); err != redis.Nil {
		t.Fatalf("a refused job was stored: %v %v", raw, err)
	}
	id := submit(t, admin, map[string]any{"type": "t"})
	if _, d, ok := w.pop(t, "1", "ready"); !ok || d.JobID != id {
		t.Fatalf("pop: %+v", d)
	}
	err := w.c.Do(ctx, "JOB.UPDATE", id, `{"status":"completed","output":"a\u0000b"}`).Err()
	if err == nil || err.Error() != `ERR invalid update: output contains \u0000, which cannot be stored` {
		t.Fatalf("completing with a NUL in the output: %v", err)
	}
	if err := w.c.Do(ctx, "JOB.UPDATE", id, `{"status":"completed","output":"a\ufffdb"}`).Err(); err != nil {
		t.Fatalf("completing with the output as agw sends it: %v", err)
	}
	if err := admin.Do(ctx, "JOB.SUBMIT", "null").Err(); err == nil || !strings.Contains(err.Error(), "must be a JSON object") {
		t.Fatalf("JOB.SUBMIT null: %v", err)
	}
}

// A key or id that PostgreSQL cannot store names nothing: reads answer as
// Redis does for a missing key, never with the database's error text.
func TestKeysThatCannotExistAreMissing(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	for _, key := range []string{"job:\x00", "job:a\x00b", "job:\xff\xfe", "worker:x\x00:alive", "queue:\x00"} {
		if err := admin.Get(ctx, key).Err(); err != redis.Nil && !(strings.HasPrefix(key, "queue:") && err != nil && strings.Contains(err.Error(), "WRONGTYPE")) {
			t.Errorf("GET %q: %v, want nil", key, err)
		}
		if n, err := admin.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("EXISTS %q = %d, %v", key, n, err)
		}
		if typ, err := admin.Type(ctx, key).Result(); err != nil || typ != "none" {
			t.Errorf("TYPE %q = %q, %v", key, typ, err)
		}
	}
	if keys, err := admin.Keys(ctx, "job:\x00*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("KEYS job:\\x00* = %v, %v", keys, err)
	}
	for _, args := range [][]any{{"JOB.GET", "a\x00b"}, {"WORKER.GET", "x\x00"}, {"SCHEDULE.GET", "\xff"}} {
		if err := admin.Do(ctx, args...).Err(); err != redis.Nil {
			t.Errorf("%q: %v, want nil", args, err)
		}
	}
	for _, args := range [][]any{{"JOB.CANCEL", "\xff\xfe"}, {"JOB.RETRY", "a\x00"}} {
		if err := admin.Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR no such job") {
			t.Errorf("%q: %v, want no such job", args, err)
		}
	}
	if res, err := admin.Do(ctx, "JOB.LIST", "QUEUE", "q\x00").Slice(); err != nil || len(res) != 2 || res[0] != "0" {
		t.Errorf("JOB.LIST QUEUE q\\x00 = %v, %v", res, err)
	}
}

func TestALateReportNeverTouchesTheNextAttempt(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "w", "t")
	id := submit(t, admin, map[string]any{"type": "t", "retry_backoff_seconds": 0})
	if _, d, ok := w.pop(t, "1", "ready"); !ok || d.Attempt != 1 {
		t.Fatalf("pop: %+v", d)
	}
	failed := map[string]any{"status": "failed", "error": "boom", "attempt": 1}
	if err := w.update(ctx, id, failed); err != nil {
		t.Fatal(err)
	}
	if _, d, ok := w.pop(t, "5", "ready"); !ok || d.Attempt != 2 {
		t.Fatalf("second delivery: %+v", d)
	}
	// The first failure, re-sent by a client after a timeout, arrives now.
	if err := w.update(ctx, id, failed); err != nil {
		t.Fatalf("re-sent failure: %v", err)
	}
	v := getJob(t, admin, id)
	if v.Status != "running" || v.Attempt != 2 || len(v.Errors) != 1 {
		t.Fatalf("the re-sent failure touched attempt 2: %+v", v)
	}
	err := w.update(ctx, id, map[string]any{"status": "completed", "attempt": 1})
	if err == nil || err.Error() != fmt.Sprintf("ERR job %s is at attempt 2, not 1", id) {
		t.Fatalf("a completion of attempt 1: %v", err)
	}
	if err := w.update(ctx, id, map[string]any{"status": "completed", "attempt": 2}); err != nil {
		t.Fatal(err)
	}
	other := registerWorker(t, a, "other", "t")
	if err := other.update(ctx, id, map[string]any{"status": "completed"}); err == nil || !strings.Contains(err.Error(), "is owned by w") {
		t.Fatalf("another worker repeating the final report: %v", err)
	}
}

// A negative attempt names no delivery: the report is invalid, refused as
// it is read, before any job is looked at, and its job is left running.
func TestANegativeAttemptIsAnInvalidUpdate(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "w", "t")
	id := submit(t, admin, map[string]any{"type": "t"})
	if _, d, ok := w.pop(t, "1", "ready"); !ok || d.Attempt != 1 {
		t.Fatalf("pop: %+v", d)
	}
	for _, status := range []string{"running", "completed", "failed"} {
		err := w.update(ctx, id, map[string]any{"status": status, "attempt": -1})
		if err == nil || err.Error() != "ERR invalid update: attempt must be a positive integer" {
			t.Errorf("a %s report of attempt -1: %v", status, err)
		}
	}
	err := w.update(ctx, "no-such-job", map[string]any{"status": "completed", "attempt": -2})
	if err == nil || err.Error() != "ERR invalid update: attempt must be a positive integer" {
		t.Errorf("a report of attempt -2 about a job that does not exist: %v", err)
	}
	if v := getJob(t, admin, id); v.Status != "running" || v.Attempt != 1 {
		t.Fatalf("the refused reports touched the job: %+v", v)
	}
	if err := w.update(ctx, id, map[string]any{"status": "completed", "attempt": 1}); err != nil {
		t.Fatal(err)
	}
}

// A delivery token names its delivery in any form uuid parsing accepts:
// upper case, braces, urn:uuid:. An acknowledgement, a final report in a
// group and the same report re-sent (the locked path) all recognise it.
func TestADeliveryTokenInAnyFormNamesItsDelivery(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "w", "t")
	id := submit(t, admin, map[string]any{"type": "t"})
	_, d, ok := w.pop(t, "1", "ready")
	if !ok || d.Delivery == "" {
		t.Fatalf("pop: %+v", d)
	}
	forms := []string{strings.ToUpper(d.Delivery), "{" + d.Delivery + "}", "urn:uuid:" + d.Delivery}
	if err := w.update(ctx, id, map[string]any{"status": "running", "delivery": forms[0]}); err != nil {
		t.Fatalf("acknowledgement: %v", err)
	}
	if v := getJob(t, admin, id); v.Status != "running" {
		t.Fatalf("after the acknowledgement: %+v", v)
	}
	for _, f := range forms {
		if err := w.update(ctx, id, map[string]any{"status": "completed", "delivery": f}); err != nil {
			t.Fatalf("completion with delivery %s: %v", f, err)
		}
	}
	if v := getJob(t, admin, id); v.Status != "completed" {
		t.Fatalf("after the completions: %+v", v)
	}
	err := w.update(ctx, id, map[string]any{"status": "completed", "delivery": "00000000-0000-0000-0000-000000000000"})
	if err == nil {
		t.Fatal("a completion naming another delivery was accepted")
	}
}

// A delivery token the job was never delivered with is refused without
// claiming a delivery that did not happen, in the words clients know for
// stale deliveries; the job is untouched.
func TestAMadeUpDeliveryTokenIsRefusedTruthfully(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w := registerWorker(t, a, "tokens-w", "t")
	id := submit(t, admin, map[string]any{"job_id": "tok", "queue": "tokens", "type": "t"})
	_, d, ok := w.pop(t, "2", "tokens")
	if !ok || d.JobID != id || d.Attempt != 1 {
		t.Fatalf("popped %+v, %v", d, ok)
	}
	made := "00000000-0000-4000-8000-00000000abcd"
	want := func(attempt int) string {
		return fmt.Sprintf("ERR job tok is not running for this delivery token (its current attempt is %d): it was delivered again since, or never with this token", attempt)
	}
	for _, args := range [][]any{
		{"JOB.UPDATE", id, `{"status":"completed","delivery":"` + made + `"}`},
		{"JOB.UPDATE", id, `{"status":"running","delivery":"` + made + `"}`},
		{"STEP.BEGIN", id, "s", "DELIVERY", made},
		{"STEP.COMPLETE", id, "s", "1", "DELIVERY", made},
		{"STEP.FAIL", id, "s", `{"message":"x"}`, "DELIVERY", made},
		{"STEP.SLEEP", id, "s", "5", "DELIVERY", made},
	} {
		if err := w.c.Do(ctx, args...).Err(); err == nil || err.Error() != want(1) {
			t.Errorf("%v: %v, want %s", args, err, want(1))
		}
	}
	if v := getJob(t, admin, id); v.Status != "running" || v.Attempt != 1 || len(v.Errors) != 0 {
		t.Fatalf("the job after made-up tokens: %+v", v)
	}
	// Delivered again (its worker came back without it), the first
	// token gets the same answer.
	if err := w.update(ctx, id, map[string]any{"status": "running", "delivery": d.Delivery}); err != nil {
		t.Fatal(err)
	}
	reg := `{"worker_id":"tokens-w","hostname":"h","agw_version":"1","capabilities":{"tools":["t"]},"running_jobs":[]}`
	if err := w.c.Do(ctx, "WORKER.REGISTER", reg).Err(); err != nil {
		t.Fatal(err)
	}
	_, d2, ok := w.pop(t, "5", "tokens")
	if !ok || d2.Delivery == d.Delivery {
		t.Fatalf("delivered again: %+v, %v", d2, ok)
	}
	if err := w.update(ctx, id, map[string]any{"status": "completed", "delivery": d.Delivery}); err == nil || err.Error() != want(2) {
		t.Errorf("the first delivery's report: %v, want %s", err, want(2))
	}
	if err := w.update(ctx, id, map[string]any{"status": "completed", "delivery": d2.Delivery}); err != nil {
		t.Fatalf("the current delivery's report: %v", err)
	}
}
