package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// fairJob is a job of queue q under key (none when empty) and weight.
func fairJob(q, key string, weight int) map[string]any {
	j := map[string]any{"type": "t", "queue": q, "payload": map[string]any{"key": key}}
	if key != "" {
		j["fair_key"] = key
	}
	if weight > 0 {
		j["fair_weight"] = weight
	}
	return j
}

// submitBacklog submits n jobs of one key in batches of up to 1,000.
func submitBacklog(t *testing.T, c *redis.Client, q, key string, weight, n int) {
	t.Helper()
	for n > 0 {
		size := min(n, 1000)
		batch := make([]map[string]any, size)
		for i := range batch {
			batch[i] = fairJob(q, key, weight)
		}
		b, _ := json.Marshal(batch)
		if err := c.Do(context.Background(), "JOB.SUBMIT", string(b)).Err(); err != nil {
			t.Fatalf("JOB.SUBMIT of %d jobs of %q: %v", size, key, err)
		}
		n -= size
	}
}

// popKeys pops n jobs of q, count at a time, and answers each one's key
// in delivery order.
func (w *testWorker) popKeys(t *testing.T, q string, n, count int) []string {
	t.Helper()
	var keys []string
	for len(keys) < n {
		_, jobs := w.mpop(t, "LMPOP", "1", "queue:"+q, "RIGHT", "COUNT", min(count, n-len(keys)))
		if len(jobs) == 0 {
			t.Fatalf("queue %s empty after %d of %d pops", q, len(keys), n)
		}
		for _, j := range jobs {
			var p struct{ Key string }
			if err := json.Unmarshal(j.Payload, &p); err != nil {
				t.Fatalf("payload %s: %v", j.Payload, err)
			}
			keys = append(keys, p.Key)
		}
	}
	return keys
}

// shares counts each key's part of keys.
func shares(keys []string) map[string]float64 {
	out := map[string]float64{}
	for _, k := range keys {
		out[k] += 1 / float64(len(keys))
	}
	return out
}

// Keys of weights 1, 2 and 4 with backlogs are served 1:2:4: over 1,000
// pops each key's share is within 5% of its due share, and within 5
// percentage points over every 200 consecutive pops; oldest first within
// each key.
func TestFairShareServesKeysInProportionToTheirWeights(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	weights := map[string]int{"small": 1, "medium": 2, "large": 4}
	for key, w := range weights {
		submitBacklog(t, admin, "shared", key, w, 700)
	}
	w := registerWorker(t, a, "fair-w", "t")
	keys := w.popKeys(t, "shared", 1000, 50)
	for key, got := range shares(keys) {
		due := float64(weights[key]) / 7
		if math.Abs(got-due) > 0.05*due {
			t.Errorf("key %s served %.3f of 1,000 pops, due %.3f", key, got, due)
		}
	}
	for start := 0; start+200 <= len(keys); start += 10 {
		for key, got := range shares(keys[start : start+200]) {
			if due := float64(weights[key]) / 7; math.Abs(got-due) > 0.05 {
				t.Fatalf("pops %d-%d: key %s served %.3f, due %.3f", start, start+200, key, got, due)
			}
		}
	}
	t.Logf("shares over 1,000 pops: %v", shares(keys))
}

// A key that was idle gets no saved-up burst: after another key was served
// alone for a while, the returning key's jobs alternate with it.
func TestFairShareGivesAKeyBackFromIdleNoBurst(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "idle-w", "t")
	submitBacklog(t, admin, "idle", "busy", 1, 400)
	submitBacklog(t, admin, "idle", "back", 1, 5)
	first := w.popKeys(t, "idle", 20, 20)
	if n := strings.Count(strings.Join(first, ","), "back"); n != 5 {
		t.Fatalf("the returning key had %d of its 5 jobs in the first 20 pops: %v", n, first)
	}
	w.popKeys(t, "idle", 200, 50) // "back" idle while "busy" is served
	submitBacklog(t, admin, "idle", "back", 1, 100)
	next := w.popKeys(t, "idle", 40, 40)
	if next[0] != "back" && next[1] != "back" && next[2] != "back" {
		t.Fatalf("the returning key's first job was not among the next three pops: %v", next)
	}
	if n := strings.Count(strings.Join(next, ","), "back"); n < 18 || n > 22 {
		t.Fatalf("the returning key had %d of the next 40 pops, want about half: %v", n, next)
	}
}

// A quiet key's job is taken within the next few pops although another key
// has 100,000 jobs queued before it; jobs of the same key stay oldest
// first, and a higher priority still goes before any key.
func TestFairShareTakesAQuietKeyPastABigBacklog(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "quiet-w", "t")
	submitBacklog(t, admin, "big", "flood", 1, 100_000)
	submit(t, admin, fairJob("big", "quiet", 0))
	urgent := fairJob("big", "flood", 0)
	urgent["priority"] = 5
	submit(t, admin, urgent)
	keys := w.popKeys(t, "big", 4, 1)
	if keys[0] != "flood" {
		t.Fatalf("first pop %v: the higher priority goes first", keys)
	}
	if keys[1] != "quiet" && keys[2] != "quiet" && keys[3] != "quiet" {
		t.Fatalf("pops %v: the quiet key waited behind the backlog", keys)
	}
	stats, err := admin.Do(context.Background(), "QUEUE.STATS", "big").Result()
	if err != nil || statsField(t, stats, "fair_keys_ready") != 1 {
		t.Fatalf("QUEUE.STATS: %v %v, want one key with ready jobs", stats, err)
	}
}

// MAXRUNNINGPERKEY 2 with ten workers on two nodes: no key ever runs more
// than two jobs, the cap is reached, and the key without a name is not
// capped.
func TestMaxRunningPerKeyHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := context.Background()
	admin := a.Admin(t)
	res, err := admin.Do(ctx, "QUEUE.CONFIG", "perkey", "MAXRUNNINGPERKEY", "2").Result()
	if err != nil || statsField(t, res, "max_running_per_key") != 2 {
		t.Fatalf("QUEUE.CONFIG: %v %v", res, err)
	}
	for _, key := range []string{"acme", "globex", ""} {
		submitBacklog(t, admin, "perkey", key, 1, 12)
	}
	workers := workersOn(t, a, b, 10, "perkey", "t")
	var mu sync.Mutex
	running, most := map[string]int{}, map[string]int{}
	hold := func(d delivered) time.Duration {
		var p struct{ Key string }
		json.Unmarshal(d.Payload, &p)
		mu.Lock()
		running[p.Key]++
		most[p.Key] = max(most[p.Key], running[p.Key])
		mu.Unlock()
		time.Sleep(60 * time.Millisecond)
		mu.Lock()
		running[p.Key]--
		mu.Unlock()
		return 0
	}
	done := workQueues(t, workers, []string{"perkey"}, 36, hold, time.Now().Add(60*time.Second))
	if len(done) != 36 {
		t.Fatalf("%d of 36 jobs completed", len(done))
	}
	if most["acme"] != 2 || most["globex"] != 2 {
		t.Fatalf("most running at once by key: %v, want 2 for each named key", most)
	}
	if most[""] <= 2 {
		t.Fatalf("jobs without a key ran at most %d at once: they are not capped", most[""])
	}
	if err := b.Admin(t).Do(ctx, "QUEUE.CONFIG", "perkey", "MAXRUNNINGPERKEY", "NONE").Err(); err != nil {
		t.Fatal(err)
	}
}

// The order is stored: after a restart of agq, the keys still alternate
// where they stood.
func TestFairShareOrderSurvivesARestart(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	submitBacklog(t, admin, "kept", "a", 1, 30)
	submitBacklog(t, admin, "kept", "b", 1, 30)
	w := registerWorker(t, a, "kept-w", "t")
	before := w.popKeys(t, "kept", 10, 10)
	if err := a.Node.Close(); err != nil {
		t.Fatal(err)
	}
	again := agqtest.StartConfig(t, a.Config)
	w2 := registerWorker(t, again, "kept-w2", "t")
	after := w2.popKeys(t, "kept", 20, 5)
	// b starts level with a's first job; from then on the keys take
	// turns, across the restart.
	keys := append(before, after...)
	for i := 2; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			t.Fatalf("keys served %v before and %v after the restart: they should take turns", before, after)
		}
	}
}

// A retried job waits again behind its key's queued jobs, not ahead of
// every key; JOB.GET shows the key and weight.
func TestFairShareRetryIsPlacedBehindItsKey(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	retried := fairJob("again", "x", 3)
	retried["retry_backoff_seconds"] = 0
	id := submit(t, admin, retried)
	raw, err := admin.Do(ctx, "JOB.GET", id).Text()
	if err != nil || !strings.Contains(raw, `"fair_key":"x"`) || !strings.Contains(raw, `"fair_weight":3`) {
		t.Fatalf("JOB.GET: %s %v", raw, err)
	}
	w := registerWorker(t, a, "again-w", "t")
	_, d, ok := w.pop(t, "2", "again")
	if !ok || d.JobID != id {
		t.Fatalf("popped %+v", d)
	}
	submitBacklog(t, admin, "again", "x", 3, 3)
	submitBacklog(t, admin, "again", "y", 3, 3)
	if err := w.update(ctx, id, map[string]any{"status": "failed", "error": "boom", "retryable": true, "delivery": d.Delivery}); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 7 {
		_, d, ok := w.pop(t, "2", "again")
		if !ok {
			t.Fatalf("queue empty after %v", order)
		}
		if d.JobID == id {
			order = append(order, "retried")
			continue
		}
		var p struct{ Key string }
		json.Unmarshal(d.Payload, &p)
		order = append(order, p.Key)
	}
	// y starts level with x's first waiting job, so one x goes before
	// it; the retried x goes after x's last.
	want := "x,x,y,x,y,y,retried"
	if got := strings.Join(order, ","); got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

// Bad fair_key and fair_weight values are refused with what is wrong, and
// store nothing.
func TestFairShareRefusesBadFields(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	for _, c := range []struct{ doc, want string }{
		{`{"queue":"bad","fair_key":""}`, "fair_key must be 1 to 128 bytes"},
		{fmt.Sprintf(`{"queue":"bad","fair_key":%q}`, strings.Repeat("k", 129)), "fair_key must be 1 to 128 bytes"},
		{`{"queue":"bad","fair_key":7}`, "fair_key"},
		{`{"queue":"bad","fair_weight":0}`, "fair_weight must be between 1 and 1000"},
		{`{"queue":"bad","fair_weight":1001}`, "fair_weight must be between 1 and 1000"},
		{`{"queue":"bad","fair_weight":1.5}`, "fair_weight"},
	} {
		err := admin.Do(ctx, "JOB.SUBMIT", c.doc).Err()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("JOB.SUBMIT %s: %v, want an error saying %q", c.doc, err, c.want)
		}
	}
	for _, args := range [][]any{
		{"QUEUE.CONFIG", "bad", "MAXRUNNINGPERKEY", "0"},
		{"QUEUE.CONFIG", "bad", "MAXRUNNINGPERKEY"},
		{"TYPE.CONFIG", "t", "MAXRUNNINGPERKEY", "2"},
	} {
		if err := admin.Do(ctx, args...).Err(); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	if n, err := admin.Do(ctx, "LLEN", "queue:bad").Int(); err != nil || n != 0 {
		t.Fatalf("LLEN queue:bad: %d %v", n, err)
	}
}

// A schedule's job template may name a fair key and weight: each fire's
// job carries them and takes its turn among the queue's keys.
func TestAScheduledJobTakesItsTurnAmongTheKeys(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	def := `{"name":"tenant-report","cron":"0 3 * * *","queue":"reports","job":{"type":"t","fair_key":"nightly","fair_weight":2,"payload":{"key":"nightly"}}}`
	if err := admin.Do(ctx, "SCHEDULE.CREATE", def).Err(); err != nil {
		t.Fatal(err)
	}
	submitBacklog(t, admin, "reports", "bulk", 1, 50)
	id, err := admin.Do(ctx, "SCHEDULE.TRIGGER", "tenant-report").Text()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := admin.Do(ctx, "JOB.GET", id).Text()
	if err != nil || !strings.Contains(raw, `"fair_key":"nightly","fair_weight":2`) {
		t.Fatalf("the fired job: %s %v", raw, err)
	}
	w := registerWorker(t, a, "reports-w", "t")
	if keys := w.popKeys(t, "reports", 3, 1); keys[1] != "nightly" && keys[2] != "nightly" {
		t.Fatalf("pops %v: the fired job waited behind the backlog", keys)
	}
}

// A job re-sent with its key and weight is the same job; with another key
// or weight it is refused as other contents, and stays as it was.
func TestFairShareResubmissionComparesTheKeyAndWeight(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	doc := `{"job_id":"fk-1","queue":"resent","fair_key":"acme","fair_weight":2}`
	for range 2 {
		if id, err := admin.Do(ctx, "JOB.SUBMIT", doc).Text(); err != nil || id != "fk-1" {
			t.Fatalf("JOB.SUBMIT %s: %q %v", doc, id, err)
		}
	}
	for _, other := range []string{
		`{"job_id":"fk-1","queue":"resent","fair_key":"globex","fair_weight":2}`,
		`{"job_id":"fk-1","queue":"resent","fair_key":"acme","fair_weight":3}`,
		`{"job_id":"fk-1","queue":"resent"}`,
	} {
		err := admin.Do(ctx, "JOB.SUBMIT", other).Err()
		if err == nil || !strings.Contains(err.Error(), "already exists with different contents") {
			t.Errorf("JOB.SUBMIT %s: %v, want it refused", other, err)
		}
	}
	raw, err := admin.Do(ctx, "JOB.GET", "fk-1").Text()
	if err != nil || !strings.Contains(raw, `"fair_key":"acme","fair_weight":2`) {
		t.Fatalf("JOB.GET after the refusals: %s %v", raw, err)
	}
}

// A queue no job named a key in serves its jobs by due time alone, single
// submissions and batches alike. Its first keyed job turns it fair: the
// jobs waiting from before go first, in their order, and from then on
// keyless jobs are one more key among the others.
func TestAPlainQueueTurnsFairWithItsFirstKey(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	for i := range 5 {
		j := fairJob("plain", "", 0)
		j["payload"] = map[string]any{"key": fmt.Sprintf("before-%d", i)}
		b, _ := json.Marshal(j)
		if err := admin.Do(ctx, "JOB.SUBMIT", string(b)).Err(); err != nil {
			t.Fatalf("JOB.SUBMIT: %v", err)
		}
	}
	submitBacklog(t, admin, "plain", "", 0, 20)
	submitBacklog(t, admin, "plain", "tenant", 0, 20)
	// Single submissions without a key, in a queue now fair, are written
	// unplaced and placed by the next claim behind the jobs without a key.
	for range 20 {
		b, _ := json.Marshal(fairJob("plain", "", 0))
		if err := admin.Do(ctx, "JOB.SUBMIT", string(b)).Err(); err != nil {
			t.Fatalf("JOB.SUBMIT: %v", err)
		}
	}
	w := registerWorker(t, a, "plain-w", "t")
	got := w.popKeys(t, "plain", 45, 10)
	for i, k := range got[:5] {
		if want := fmt.Sprintf("before-%d", i); k != want {
			t.Fatalf("pop %d: %q, want %q (the plain queue's jobs in submission order): %v", i, k, want, got)
		}
	}
	for i, k := range got[5:25] {
		if k != "" {
			t.Fatalf("pop %d: key %q before the 25 jobs that waited before the first key: %v", i+5, k, got)
		}
	}
	if n := strings.Count(strings.Join(got[25:], ","), "tenant"); n < 8 || n > 12 {
		t.Fatalf("the key had %d of the 20 pops after the earlier jobs, want about half: %v", n, got[25:])
	}
}
