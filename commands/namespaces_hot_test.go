package commands_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// tenant is one namespace's clients: a producer, an admin of the namespace
// and a registered worker able to run jobs of type "t".
type tenant struct {
	producer, admin *redis.Client
	worker          *testWorker
}

func newTenant(t *testing.T, a *agqtest.Agq, ns string) tenant {
	t.Helper()
	w := a.InNamespace(t, ns, "worker", "worker-"+ns)
	reg, _ := json.Marshal(map[string]any{"worker_id": "worker-" + ns, "hostname": "h", "agw_version": "0.1.0",
		"capabilities": map[string]any{"tools": []string{"t"}}})
	if err := w.Do(context.Background(), "WORKER.REGISTER", string(reg)).Err(); err != nil {
		t.Fatalf("WORKER.REGISTER in %s: %v", ns, err)
	}
	return tenant{producer: a.InNamespace(t, ns, "producer", "producer-"+ns), admin: a.InNamespace(t, ns, "admin", "admin-"+ns),
		worker: &testWorker{id: "worker-" + ns, c: w}}
}

// nsJob is a job of type t in queue q.
func nsJob(id, queue string, payload any) map[string]any {
	j := map[string]any{"type": "t", "queue": queue, "payload": payload}
	if id != "" {
		j["job_id"] = id
	}
	return j
}

// Two namespaces are two agqs: the same job id and unique key in each, each
// queue of the same name with its own depth, pause and limits, pops and
// reports finding their own namespace's jobs only (another's is a job that
// does not exist).
func TestNamespacesKeepTheHotPathApart(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	ta, tb := newTenant(t, a, "team-a"), newTenant(t, a, "team-b")
	llen := func(c *redis.Client, queue string) int64 {
		t.Helper()
		n, err := c.LLen(ctx, "queue:"+queue).Result()
		if err != nil {
			t.Fatalf("LLEN: %v", err)
		}
		return n
	}

	t.Run("TheSameIdAndUniqueKeyInEach", func(t *testing.T) {
		if id := submit(t, ta.producer, nsJob("shared", "q1", map[string]any{"in": "a"})); id != "shared" {
			t.Fatalf("a's id %q", id)
		}
		// Other contents under an id a holds: in b a job of its own, not a
		// refusal for an existing job.
		if id := submit(t, tb.producer, nsJob("shared", "q1", map[string]any{"in": "b"})); id != "shared" {
			t.Fatalf("b's id %q", id)
		}
		ka, kb := nsJob("", "keyed", 1), nsJob("", "keyed", 2)
		ka["unique_key"], kb["unique_key"] = "k", "k"
		ida, idb := submit(t, ta.producer, ka), submit(t, tb.producer, kb)
		if ida == idb {
			t.Fatalf("one unique key in two namespaces gave one job %s", ida)
		}
		ka2 := nsJob("", "keyed", 4)
		ka2["unique_key"] = "k"
		if again := submit(t, ta.producer, ka2); again != ida {
			t.Fatalf("a's key again answered %s, want a's job %s", again, ida)
		}
		if n := llen(ta.producer, "q1"); n != 1 {
			t.Fatalf("a's LLEN queue:q1 = %d, want 1", n)
		}
		// A batch of ids b already holds.
		var batch []map[string]any
		for _, id := range []string{"b1", "b2"} {
			batch = append(batch, nsJob(id, "batch", map[string]any{"in": "b"}))
		}
		raw, _ := json.Marshal(batch)
		if err := tb.producer.Do(ctx, "JOB.SUBMIT", string(raw)).Err(); err != nil {
			t.Fatal(err)
		}
		for i := range batch {
			batch[i]["payload"] = map[string]any{"in": "a"}
		}
		raw, _ = json.Marshal(batch)
		if ids, err := ta.producer.Do(ctx, "JOB.SUBMIT", string(raw)).StringSlice(); err != nil || strings.Join(ids, ",") != "b1,b2" {
			t.Fatalf("a's batch of b's ids: %q %v", ids, err)
		}
	})

	t.Run("LPUSHAndLLENCountTheirOwnQueue", func(t *testing.T) {
		push := func(c *redis.Client, payload string) int64 {
			t.Helper()
			b, _ := json.Marshal(nsJob("", "pushed", payload))
			n, err := c.LPush(ctx, "queue:pushed", string(b)).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := push(ta.producer, "a1"); n != 1 {
			t.Fatalf("a's first LPUSH = %d", n)
		}
		if n := push(ta.producer, "a2"); n != 2 {
			t.Fatalf("a's second LPUSH = %d", n)
		}
		if n := push(tb.producer, "b1"); n != 1 {
			t.Fatalf("b's first LPUSH to its queue of the same name = %d, want 1", n)
		}
		if na, nb := llen(ta.producer, "pushed"), llen(tb.producer, "pushed"); na != 2 || nb != 1 {
			t.Fatalf("LLEN queue:pushed: a %d, b %d; want 2 and 1", na, nb)
		}
		peek, err := tb.producer.LRange(ctx, "queue:pushed", 0, -1).Result()
		if err != nil || len(peek) != 1 || !strings.Contains(peek[0], `"b1"`) {
			t.Fatalf("b's LRANGE: %q %v", peek, err)
		}
	})

	t.Run("PopsTakeTheirOwnNamespacesJobs", func(t *testing.T) {
		// Paused in a, the queue goes on in b.
		if err := ta.admin.Do(ctx, "QUEUE.PAUSE", "q1").Err(); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := ta.worker.pop(t, "0.3", "q1"); ok {
			t.Fatal("a's worker popped from a's paused queue")
		}
		_, jb, ok := tb.worker.pop(t, "2", "q1")
		if !ok || jb.JobID != "shared" || string(jb.Payload) != `{"in": "b"}` && string(jb.Payload) != `{"in":"b"}` {
			t.Fatalf("b's pop: %+v %v, want b's job shared", jb, ok)
		}
		if err := ta.admin.Do(ctx, "QUEUE.RESUME", "q1").Err(); err != nil {
			t.Fatal(err)
		}
		_, ja, ok := ta.worker.pop(t, "2", "q1")
		if !ok || ja.JobID != "shared" || string(ja.Payload) != `{"in": "a"}` && string(ja.Payload) != `{"in":"a"}` {
			t.Fatalf("a's pop: %+v %v, want a's job shared", ja, ok)
		}

		// Reports find the reporter's namespace's job: a's completion
		// leaves b's running job as it is, and b's worker fails its own.
		if err := ta.worker.update(ctx, "shared", map[string]any{"status": "completed", "delivery": ja.Delivery}); err != nil {
			t.Fatalf("a's completion: %v", err)
		}
		if err := tb.worker.update(ctx, "shared", map[string]any{"status": "running", "delivery": jb.Delivery}); err != nil {
			t.Fatalf("b's acknowledgement after a's completion: %v", err)
		}
		if err := tb.worker.update(ctx, "shared", map[string]any{"status": "failed", "error": "boom", "retryable": false,
			"delivery": jb.Delivery}); err != nil {
			t.Fatalf("b's failure: %v", err)
		}
		// A job only b holds is, to a's worker, a job that does not exist.
		_, only, ok := tb.worker.pop(t, "2", "pushed")
		if !ok {
			t.Fatal("b's worker popped nothing from its queue pushed")
		}
		missing := ta.worker.update(ctx, "no-such-job", map[string]any{"status": "completed"})
		other := ta.worker.update(ctx, only.JobID, map[string]any{"status": "completed"})
		if missing == nil || other == nil || strings.ReplaceAll(other.Error(), only.JobID, "ID") != strings.ReplaceAll(missing.Error(), "no-such-job", "ID") {
			t.Fatalf("a's report on b's job: %v; on a missing job: %v", other, missing)
		}
		if err := tb.worker.update(ctx, only.JobID, map[string]any{"status": "completed", "delivery": only.Delivery}); err != nil {
			t.Fatalf("b's own report after a's: %v", err)
		}
	})

	t.Run("ABlockedPopIsWokenByItsOwnNamespaceOnly", func(t *testing.T) {
		type popped struct {
			job delivered
			ok  bool
		}
		got := make(chan popped, 1)
		go func() {
			res, err := ta.worker.c.Do(context.Background(), "BLMPOP", "5", "1", "queue:wake", "RIGHT", "COUNT", "1").Slice()
			if err != nil {
				got <- popped{}
				return
			}
			jobs := res[1].([]any)
			var d delivered
			_ = json.Unmarshal([]byte(jobs[0].(string)), &d)
			got <- popped{d, true}
		}()
		time.Sleep(200 * time.Millisecond) // the pop blocks
		b, _ := json.Marshal(nsJob("", "wake", "for-b"))
		if err := tb.producer.LPush(ctx, "queue:wake", string(b)).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-got:
			t.Fatalf("b's push woke a's pop: %+v", p)
		case <-time.After(500 * time.Millisecond):
		}
		b, _ = json.Marshal(nsJob("", "wake", "for-a"))
		if err := ta.producer.LPush(ctx, "queue:wake", string(b)).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-got:
			if !p.ok || string(p.job.Payload) != `"for-a"` {
				t.Fatalf("a's pop got %+v", p)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("a's push did not wake a's pop")
		}
		if n := llen(tb.producer, "wake"); n != 1 {
			t.Fatalf("b's LLEN queue:wake = %d, want its own job still waiting", n)
		}
	})

	t.Run("QueueCommandsAnswerForTheirOwnNamespace", func(t *testing.T) {
		submit(t, tb.producer, nsJob("", "only-b", 1))
		qa, err := ta.producer.Do(ctx, "QUEUE.LIST").StringSlice()
		if err != nil || slices.Contains(qa, "only-b") {
			t.Fatalf("a's QUEUE.LIST %q %v holds b's queue", qa, err)
		}
		if qb, err := tb.producer.Do(ctx, "QUEUE.LIST").StringSlice(); err != nil || !slices.Contains(qb, "only-b") {
			t.Fatalf("b's QUEUE.LIST %q %v", qb, err)
		}
		missing := ta.producer.Do(ctx, "QUEUE.STATS", "never-made").Err()
		other := ta.producer.Do(ctx, "QUEUE.STATS", "only-b").Err()
		if missing == nil || other == nil || strings.ReplaceAll(other.Error(), "only-b", "Q") != strings.ReplaceAll(missing.Error(), "never-made", "Q") {
			t.Fatalf("a's QUEUE.STATS of b's queue: %v; of a missing one: %v", other, missing)
		}
		// Limits are the namespace's: a's cap on q2 holds a's pops only.
		if err := ta.admin.Do(ctx, "QUEUE.CONFIG", "q2", "MAXRUNNING", "1").Err(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*redis.Client{ta.producer, tb.producer} {
			submit(t, c, nsJob("", "q2", 1))
			submit(t, c, nsJob("", "q2", 2))
		}
		for c, want := range map[*redis.Client]int64{ta.producer: 1, tb.producer: 0} {
			res, err := c.Do(ctx, "QUEUE.CONFIG", "q2").Result()
			if got := replyMap(res)["max_running"]; err != nil || got != want {
				t.Fatalf("QUEUE.CONFIG q2: max_running %v (%v), want %d", got, err, want)
			}
		}
		if _, _, ok := ta.worker.pop(t, "1", "q2"); !ok {
			t.Fatal("a's first pop of q2")
		}
		if _, _, ok := ta.worker.pop(t, "0.3", "q2"); ok {
			t.Fatal("a's second pop of q2 passed a's MAXRUNNING 1")
		}
		for i := range 2 {
			if _, _, ok := tb.worker.pop(t, "1", "q2"); !ok {
				t.Fatalf("b's pop %d of q2, which has no limit in b", i+1)
			}
		}
	})
}

// replyMap is a map reply as go-redis gives it, in RESP2 or RESP3.
func replyMap(v any) map[string]any {
	out := map[string]any{}
	switch m := v.(type) {
	case map[any]any:
		for k, v := range m {
			out[k.(string)] = v
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			out[m[i].(string)] = m[i+1]
		}
	}
	return out
}

// NAMESPACE.CONFIG MAXRUNNING caps one namespace's running jobs, across
// its queues: a pop past it waits, and is woken when a job of any queue of
// the namespace leaves running; another namespace pops on.
func TestANamespacesMaxRunningHoldsItsOwnPops(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	ta, tb := newTenant(t, a, "capped"), newTenant(t, a, "free")
	if err := a.Admin(t).Do(ctx, "NAMESPACE.CONFIG", "capped", "MAXRUNNING", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []tenant{ta, tb} {
		submit(t, tn.producer, nsJob("", "first", 1))
		submit(t, tn.producer, nsJob("", "second", 2))
	}
	_, running, ok := ta.worker.pop(t, "1", "first")
	if !ok {
		t.Fatal("the capped namespace's first pop got nothing")
	}
	// b has no cap: both its jobs go.
	for _, q := range []string{"first", "second"} {
		if _, _, ok := tb.worker.pop(t, "1", q); !ok {
			t.Fatalf("the free namespace's pop of %s got nothing", q)
		}
	}
	got := make(chan bool, 1)
	go func() {
		_, _, ok := ta.worker.pop(t, "5", "second")
		got <- ok
	}()
	select {
	case <-got:
		t.Fatal("a pop past the namespace's MAXRUNNING 1 got a job")
	case <-time.After(500 * time.Millisecond):
	}
	start := time.Now()
	if err := ta.worker.update(ctx, running.JobID, map[string]any{"status": "completed", "delivery": running.Delivery}); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("the held pop timed out after the running job ended")
		}
		if waited := time.Since(start); waited > 2*time.Second {
			t.Fatalf("the held pop was woken %v after the job of another queue ended", waited)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held pop was not woken")
	}
}
