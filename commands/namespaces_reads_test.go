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

// Two namespaces over one agq: each key sees its own namespace's jobs,
// workers, schedules, keys and channels, and another namespace's things
// exactly as things that do not exist (§6f).
func TestNamespacesReadTheirOwn(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	prodA := a.InNamespace(t, "team-a", "producer", "prod-a")
	prodB := a.InNamespace(t, "team-b", "producer", "prod-b")
	adminA := a.InNamespace(t, "team-a", "admin", "boss-a")
	adminB := a.InNamespace(t, "team-b", "admin", "boss-b")
	cluster := a.Admin(t) // acts in default

	for c, queue := range map[*redis.Client]string{prodA: "qa", prodB: "qb"} {
		if id, err := c.Do(ctx, "JOB.SUBMIT", `{"job_id":"same","type":"t","queue":"`+queue+`"}`).Text(); err != nil || id != "same" {
			t.Fatalf("JOB.SUBMIT in %s: %q, %v", queue, id, err)
		}
	}
	if err := prodA.Do(ctx, "JOB.SUBMIT", `{"job_id":"only-a","type":"t","queue":"qa"}`).Err(); err != nil {
		t.Fatal(err)
	}

	t.Run("JobGetReadsTheNamespacesJob", func(t *testing.T) {
		for c, queue := range map[*redis.Client]string{prodA: "qa", prodB: "qb", adminA: "qa"} {
			j := getNamespacedJob(t, c, "same")
			if j.Queue != queue || j.Namespace != map[string]string{"qa": "team-a", "qb": "team-b"}[queue] {
				t.Errorf("JOB.GET same: queue %s, namespace %s; want %s's", j.Queue, j.Namespace, queue)
			}
		}
		for _, c := range []*redis.Client{prodB, adminB, cluster} {
			if err := c.Do(ctx, "JOB.GET", "only-a").Err(); err != redis.Nil {
				t.Errorf("JOB.GET only-a from another namespace: %v, want nil", err)
			}
		}
	})
	t.Run("JobListListsTheNamespacesJobs", func(t *testing.T) {
		for c, want := range map[*redis.Client][]string{prodA: {"only-a", "same"}, prodB: {"same"}, cluster: nil} {
			items, err := c.Do(ctx, "JOB.LIST").Slice()
			if err != nil {
				t.Fatal(err)
			}
			if got := listedIDs(t, items); !slices.Equal(got, want) {
				t.Errorf("JOB.LIST: %v, want %v", got, want)
			}
		}
	})
	t.Run("JobWaitOfAnotherNamespacesJobIsAMissingJobs", func(t *testing.T) {
		missing := prodB.Do(ctx, "JOB.WAIT", "no-such-job", "0.1").Err()
		other := prodB.Do(ctx, "JOB.WAIT", "only-a", "0.1").Err()
		if missing == nil || other == nil ||
			strings.ReplaceAll(other.Error(), "only-a", "X") != strings.ReplaceAll(missing.Error(), "no-such-job", "X") {
			t.Fatalf("JOB.WAIT of a's job from b: %v; of a missing job: %v", other, missing)
		}
	})
	t.Run("KeyspaceShowsTheNamespacesKeys", func(t *testing.T) {
		keys, err := adminB.Do(ctx, "KEYS", "job:*").StringSlice()
		if err != nil || !slices.Equal(keys, []string{"job:same"}) {
			t.Fatalf("KEYS job:* in b: %v, %v", keys, err)
		}
		scanned, _, err := adminB.Scan(ctx, 0, "job:*", 1000).Result()
		if err != nil || !slices.Equal(scanned, []string{"job:same"}) {
			t.Fatalf("SCAN in b: %v, %v", scanned, err)
		}
		if err := adminB.Get(ctx, "job:only-a").Err(); err != redis.Nil {
			t.Fatalf("GET job:only-a in b: %v, want nil", err)
		}
		raw, err := adminB.Get(ctx, "job:same").Result()
		var j namespacedJob
		if err != nil || json.Unmarshal([]byte(raw), &j) != nil || j.Queue != "qb" || j.Namespace != "team-b" {
			t.Fatalf("GET job:same in b: %q, %v", raw, err)
		}
		all, err := adminB.Do(ctx, "KEYS", "*").StringSlice()
		if err != nil || slices.Contains(all, "job:only-a") || !slices.Contains(all, "job:same") {
			t.Fatalf("KEYS * in b: %v, %v", all, err)
		}
		if n, err := adminB.DBSize(ctx).Result(); err != nil || n != int64(len(all)) {
			t.Fatalf("DBSIZE in b: %d, %v; want %d, its keys", n, err, len(all))
		}
		if keys, err := cluster.Do(ctx, "KEYS", "*").StringSlice(); err != nil || len(keys) != 0 {
			t.Fatalf("KEYS * in default: %v, %v", keys, err)
		}
	})
	t.Run("InfoCountsTheNamespacesJobs", func(t *testing.T) {
		info, err := adminB.Info(ctx, "server", "jobs").Result()
		if err != nil || !strings.Contains(info, "namespace:team-b\r\n") || !strings.Contains(info, "jobs_queued:1\r\n") {
			t.Fatalf("INFO in b: %q, %v", info, err)
		}
	})
}

// Workers register in their key's namespace and are listed there only.
func TestNamespacesWorkersAreTheirOwn(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	workers := map[string]*redis.Client{}
	for ns, id := range map[string]string{"team-a": "wa-1", "team-b": "wb-1"} {
		w := a.InNamespace(t, ns, "worker", id)
		reg := `{"worker_id":"` + id + `","hostname":"h","agw_version":"1","capabilities":{"tools":["t"]}}`
		if err := w.Do(ctx, "WORKER.REGISTER", reg).Err(); err != nil {
			t.Fatalf("WORKER.REGISTER %s: %v", id, err)
		}
		workers[ns] = w
	}
	adminA := a.InNamespace(t, "team-a", "admin", "boss-a")
	if listed, err := adminA.Do(ctx, "WORKER.LIST").StringSlice(); err != nil || !slices.Equal(listed, []string{"wa-1"}) {
		t.Fatalf("WORKER.LIST in a: %v, %v", listed, err)
	}
	raw, err := adminA.Do(ctx, "WORKER.GET", "wa-1").Text()
	var w struct {
		Namespace string `json:"namespace"`
	}
	if err != nil || json.Unmarshal([]byte(raw), &w) != nil || w.Namespace != "team-a" {
		t.Fatalf("WORKER.GET wa-1 in a: %q, %v", raw, err)
	}
	if err := adminA.Do(ctx, "WORKER.GET", "wb-1").Err(); err != redis.Nil {
		t.Fatalf("WORKER.GET of b's worker from a: %v, want nil", err)
	}
	missing := adminA.Do(ctx, "WORKER.DRAIN", "no-such-worker").Err()
	other := adminA.Do(ctx, "WORKER.DRAIN", "wb-1").Err()
	if missing == nil || other == nil ||
		strings.ReplaceAll(other.Error(), "wb-1", "X") != strings.ReplaceAll(missing.Error(), "no-such-worker", "X") {
		t.Fatalf("WORKER.DRAIN of b's worker from a: %v; of a missing one: %v", other, missing)
	}
	if items, err := a.Admin(t).Do(ctx, "WORKER.LIST").Slice(); err != nil || len(items) != 0 {
		t.Fatalf("WORKER.LIST in default: %v, %v", items, err)
	}

	// A popped job says its namespace.
	prodB := a.InNamespace(t, "team-b", "producer", "prod-b")
	if err := prodB.Do(ctx, "JOB.SUBMIT", `{"job_id":"pop-me","type":"t","queue":"qb"}`).Err(); err != nil {
		t.Fatal(err)
	}
	popped, err := workers["team-b"].Do(ctx, "BRPOP", "queue:qb", "5").StringSlice()
	var d namespacedJob
	if err != nil || len(popped) != 2 || json.Unmarshal([]byte(popped[1]), &d) != nil || d.JobID != "pop-me" || d.Namespace != "team-b" {
		t.Fatalf("BRPOP in b: %q, %v", popped, err)
	}
}

// A subscriber hears its own namespace's events only, by channel and by
// pattern, though both namespaces hold a job of the same id in a queue of
// the same name.
func TestNamespacesChannelsAreTheirOwn(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	prodA := a.InNamespace(t, "team-a", "producer", "prod-a")
	prodB := a.InNamespace(t, "team-b", "producer", "prod-b")
	follow := func(c *redis.Client) (*redis.PubSub, *redis.PubSub) {
		ch := c.Subscribe(ctx, "job.evt.status")
		pat := c.PSubscribe(ctx, "queue.*")
		for _, s := range []*redis.PubSub{ch, pat} {
			t.Cleanup(func() { s.Close() })
			if _, err := s.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return ch, pat
	}
	chA, patA := follow(prodA)
	chB, patB := follow(prodB)

	if err := prodB.Do(ctx, "JOB.SUBMIT", `{"job_id":"evt","type":"t","queue":"q"}`).Err(); err != nil {
		t.Fatal(err)
	}
	// The next message on ch and on pat is ns's job's submission.
	heardSubmitted := func(ns string, ch, pat *redis.PubSub) {
		t.Helper()
		var ev struct{ Event, Namespace string }
		if m := nextMessage(t, ch); json.Unmarshal([]byte(m.Payload), &ev) != nil || ev.Event != "submitted" || ev.Namespace != ns {
			t.Fatalf("%s's status message: %+v", ns, m)
		}
		if m := nextMessage(t, pat); m.Channel != "queue.q.events" || !strings.Contains(m.Payload, `"event":"submitted"`) {
			t.Fatalf("%s's pattern message: %+v", ns, m)
		}
	}
	heardSubmitted("team-b", chB, patB)
	if err := prodA.Do(ctx, "JOB.SUBMIT", `{"job_id":"evt","type":"t","queue":"q"}`).Err(); err != nil {
		t.Fatal(err)
	}
	// A's first messages are its own job's: b's never came to a.
	heardSubmitted("team-a", chA, patA)
	// Nor did a's come to b.
	for name, s := range map[string]*redis.PubSub{"channel": chB, "pattern": patB} {
		if raw, heard := messageWithin(s, 500*time.Millisecond); heard {
			t.Fatalf("b's %s heard a's event: %s", name, raw)
		}
	}
}

// Schedules are per namespace: two may share a name, each fires into its
// own namespace, and one's commands never touch the other's.
func TestNamespacesSchedulesAreTheirOwn(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	adminA := a.InNamespace(t, "team-a", "admin", "boss-a")
	adminB := a.InNamespace(t, "team-b", "admin", "boss-b")
	for c, queue := range map[*redis.Client]string{adminA: "qa", adminB: "qb"} {
		def := `{"name":"nightly","cron":"@daily","queue":"` + queue + `","job":{"type":"report"}}`
		if got := mustDo(t, c, "SCHEDULE.CREATE", def); got != "OK" {
			t.Fatalf("SCHEDULE.CREATE in %s: %v", queue, got)
		}
	}
	for c, queue := range map[*redis.Client]string{adminA: "qa", adminB: "qb"} {
		if v := getSchedule(t, c, "nightly"); v.Queue != queue {
			t.Fatalf("SCHEDULE.GET nightly: queue %s, want %s", v.Queue, queue)
		}
	}
	id, err := adminA.Do(ctx, "SCHEDULE.TRIGGER", "nightly").Text()
	if err != nil {
		t.Fatal(err)
	}
	if j := getNamespacedJob(t, adminA, id); j.Queue != "qa" || j.Namespace != "team-a" {
		t.Fatalf("a's triggered job: %+v", j)
	}
	if err := adminB.Do(ctx, "JOB.GET", id).Err(); err != redis.Nil {
		t.Fatalf("b reads a's triggered job: %v", err)
	}
	mustDo(t, adminA, "SCHEDULE.PAUSE", "nightly")
	mustDo(t, adminA, "SCHEDULE.DELETE", "nightly")
	if err := adminA.Do(ctx, "SCHEDULE.GET", "nightly").Err(); err != redis.Nil {
		t.Fatalf("a's schedule after DELETE: %v", err)
	}
	if v := getSchedule(t, adminB, "nightly"); !v.Enabled || v.Queue != "qb" {
		t.Fatalf("b's schedule after a's PAUSE and DELETE: %+v", v)
	}
	if l, err := a.Admin(t).Do(ctx, "SCHEDULE.LIST").Slice(); err != nil || len(l) != 0 {
		t.Fatalf("SCHEDULE.LIST in default: %v, %v", l, err)
	}
}

// The real redis-cli, with a namespace's viewer key, reads that
// namespace's keyspace.
func TestRedisCLIReadsItsKeysNamespace(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	for _, def := range []string{`{"job_id":"x-1","type":"t","queue":"qa"}`, `{"job_id":"x-2","type":"t","queue":"qa"}`} {
		if err := a.Admin(t).Do(ctx, "JOB.SUBMIT", def).Err(); err != nil { // in default
			t.Fatal(err)
		}
	}
	prodA := a.InNamespace(t, "team-a", "producer", "prod-a")
	if err := prodA.Do(ctx, "JOB.SUBMIT", `{"job_id":"x-1","type":"t","queue":"qa"}`).Err(); err != nil {
		t.Fatal(err)
	}
	key, err := a.Admin(t).Do(ctx, "KEY.CREATE", "viewer", "view-a", "NAMESPACE", "team-a").Text()
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, a, nil, "", "--no-auth-warning", "--user", "view-a", "--pass", key, "KEYS", "job:*")
	if r.err != nil || r.stdout != "job:x-1" {
		t.Fatalf("redis-cli KEYS job:* as team-a's viewer = %q (stderr %q), %v", r.stdout, r.stderr, r.err)
	}
}

// namespacedJob is what these tests read of a job's JSON.
type namespacedJob struct {
	JobID     string `json:"job_id"`
	Queue     string `json:"queue"`
	Namespace string `json:"namespace"`
}

func getNamespacedJob(t *testing.T, c *redis.Client, id string) namespacedJob {
	t.Helper()
	raw, err := c.Do(context.Background(), "JOB.GET", id).Text()
	if err != nil {
		t.Fatalf("JOB.GET %s: %v", id, err)
	}
	var j namespacedJob
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		t.Fatalf("JOB.GET %s: %q: %v", id, raw, err)
	}
	return j
}

// listedIDs are the ids of the jobs of a JOB.LIST reply: [cursor, [job …]].
func listedIDs(t *testing.T, reply []any) []string {
	t.Helper()
	items, ok := reply[1].([]any)
	if len(reply) != 2 || !ok {
		t.Fatalf("JOB.LIST reply %v", reply)
	}
	var ids []string
	for _, it := range items {
		var j namespacedJob
		if err := json.Unmarshal([]byte(it.(string)), &j); err != nil {
			t.Fatalf("JOB.LIST item %v: %v", it, err)
		}
		ids = append(ids, j.JobID)
	}
	return ids
}

// nextMessage is the next message of s, within ten seconds.
func nextMessage(t *testing.T, s *redis.PubSub) *redis.Message {
	t.Helper()
	select {
	case m := <-s.Channel():
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10s")
	}
	return nil
}

// messageWithin is the payload of s's next message, if one comes within d.
func messageWithin(s *redis.PubSub, d time.Duration) (string, bool) {
	select {
	case m := <-s.Channel():
		return m.Payload, true
	case <-time.After(d):
		return "", false
	}
}

// A job the server moves out of running (here, its worker unregisters)
// is announced to its own namespace's subscribers, on every node, through
// the notice that carries its namespace; a job of the same id elsewhere
// is not touched, and a JOB.WAIT on it does not end.
func TestNamespacesHearTheirOwnMoves(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	prodA := a.InNamespace(t, "team-a", "producer", "prod-a")
	prodB := a.InNamespace(t, "team-b", "producer", "prod-b")
	worker := a.InNamespace(t, "team-b", "worker", "wb-1")
	reg := `{"worker_id":"wb-1","hostname":"h","agw_version":"1","capabilities":{"tools":["t"]}}`
	if err := worker.Do(ctx, "WORKER.REGISTER", reg).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*redis.Client{prodA, prodB} {
		if err := c.Do(ctx, "JOB.SUBMIT", `{"job_id":"mv","type":"t","queue":"q"}`).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if popped, err := worker.Do(ctx, "BRPOP", "queue:q", "5").StringSlice(); err != nil || len(popped) != 2 {
		t.Fatalf("BRPOP in b: %v, %v", popped, err)
	}
	subA := prodA.Subscribe(ctx, "job.mv.status")
	defer subA.Close()
	subB := prodB.Subscribe(ctx, "job.mv.status")
	defer subB.Close()
	for _, s := range []*redis.PubSub{subA, subB} {
		if _, err := s.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- prodA.Do(ctx, "JOB.WAIT", "mv", "1").Err() }()

	if err := worker.Do(ctx, "WORKER.UNREGISTER", "wb-1").Err(); err != nil {
		t.Fatal(err)
	}
	var ev struct{ Event, Namespace string }
	if m := nextMessage(t, subB); json.Unmarshal([]byte(m.Payload), &ev) != nil || ev.Event != "requeued" || ev.Namespace != "team-b" {
		t.Fatalf("b's message: %+v", m)
	}
	if raw, heard := messageWithin(subA, 500*time.Millisecond); heard {
		t.Fatalf("a heard b's job move: %s", raw)
	}
	if err := <-waited; err != redis.Nil {
		t.Fatalf("JOB.WAIT on a's mv: %v, want nil (a's job never ended)", err)
	}
	if j := getNamespacedJob(t, prodA, "mv"); j.Namespace != "team-a" {
		t.Fatalf("a's job: %+v", j)
	}
}
