package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// cli runs redis-cli as the admin and returns its output lines.
func cli(t *testing.T, a *agqtest.Agq, args ...string) []string {
	t.Helper()
	out, err := a.RedisCLI(t, append([]string{"-a", a.AdminKey, "--no-auth-warning"}, args...)...)
	if err != nil {
		t.Fatalf("redis-cli %q: %v\n%s", args, err, out)
	}
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// heartbeats keeps workers alive until stopped or the test ends.
type heartbeats struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func keepAlive(t *testing.T, every time.Duration, workers ...*testWorker) *heartbeats {
	ctx, cancel := context.WithCancel(context.Background())
	h := &heartbeats{cancel: cancel}
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			for _, w := range workers {
				_ = w.c.Do(ctx, "WORKER.HEARTBEAT", w.id).Err()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *heartbeats) stop() {
	h.cancel()
	h.done.Wait()
}

func TestKeyspaceShowsWorkers(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) { c.HeartbeatInterval = time.Second })
	ctx := ctxT(t)
	admin := a.Admin(t)
	sorter := registerWorker(t, a, "sorter", "sort", "uniq")
	sorter2 := registerWorker(t, a, "sorter-2", "sort")
	grepper := registerWorker(t, a, "grepper", "grep")
	keepAlive(t, 200*time.Millisecond, sorter, sorter2)
	stats := `{"active_jobs":2,"completed_jobs_total":150,"cpu_usage_percent":45.2}`
	if err := sorter.c.Do(ctx, "WORKER.HEARTBEAT", "sorter", stats).Err(); err != nil {
		t.Fatal(err)
	}
	if err := grepper.c.Do(ctx, "WORKER.HEARTBEAT", "grepper").Err(); err != nil {
		t.Fatal(err)
	}

	t.Run("KeysListsAliveWorkers", func(t *testing.T) {
		got := cli(t, a, "KEYS", "worker:*:alive")
		want := []string{"worker:grepper:alive", "worker:sorter-2:alive", "worker:sorter:alive"}
		if !slices.Equal(got, want) {
			t.Fatalf("KEYS worker:*:alive = %q, want %q", got, want)
		}
	})
	t.Run("GetStatsIsTheLastHeartbeatsStats", func(t *testing.T) {
		got := cli(t, a, "GET", "worker:sorter:stats")
		if len(got) != 1 || !jsonEqual(t, got[0], stats) {
			t.Fatalf("GET worker:sorter:stats = %q, want %s", got, stats)
		}
		if n := admin.Exists(ctx, "worker:grepper:stats").Val(); n != 0 {
			t.Fatalf("a worker that sent no stats has a stats key")
		}
	})
	t.Run("GetMetadataIsTheRegistration", func(t *testing.T) {
		got, err := admin.Get(ctx, "worker:sorter:metadata").Result()
		if err != nil {
			t.Fatal(err)
		}
		want := `{"worker_id":"sorter","hostname":"test-host","agw_version":"0.1.0","capabilities":{"tools":["sort","uniq"]}}`
		if !jsonEqual(t, got, want) {
			t.Fatalf("GET worker:sorter:metadata = %s, want %s", got, want)
		}
		if ttl := admin.TTL(ctx, "worker:sorter:metadata").Val(); ttl != -1 {
			t.Fatalf("TTL of metadata = %v, want -1 (no expiry)", ttl)
		}
	})
	t.Run("AliveIsTheLastHeartbeatTime", func(t *testing.T) {
		got, err := admin.Get(ctx, "worker:grepper:alive").Int64()
		if err != nil {
			t.Fatal(err)
		}
		if now := time.Now().Unix(); got < now-5 || got > now+1 {
			t.Fatalf("GET worker:grepper:alive = %d, now is %d", got, now)
		}
	})
	t.Run("CapabilitySetsListActiveWorkers", func(t *testing.T) {
		got := cli(t, a, "SMEMBERS", "capability:sort:workers")
		if want := []string{"sorter", "sorter-2"}; !slices.Equal(got, want) {
			t.Fatalf("SMEMBERS capability:sort:workers = %q, want %q", got, want)
		}
		if n := admin.SCard(ctx, "capability:uniq:workers").Val(); n != 1 {
			t.Fatalf("SCARD capability:uniq:workers = %d, want 1", n)
		}
		if got := admin.SMembers(ctx, "capability:nothing:workers").Val(); len(got) != 0 {
			t.Fatalf("SMEMBERS of a capability nobody offers = %q", got)
		}
		if err := admin.Do(ctx, "WORKER.DRAIN", "sorter-2").Err(); err != nil {
			t.Fatal(err)
		}
		if got := admin.SMembers(ctx, "capability:sort:workers").Val(); !slices.Equal(got, []string{"sorter"}) {
			t.Fatalf("after draining sorter-2, SMEMBERS capability:sort:workers = %q", got)
		}
	})
	t.Run("TypesAndWrongTypes", func(t *testing.T) {
		for key, want := range map[string]string{
			"worker:sorter:alive": "string", "worker:sorter:metadata": "string",
			"capability:sort:workers": "set", "worker:nobody:alive": "none", "foo": "none",
		} {
			if got := cli(t, a, "TYPE", key); !slices.Equal(got, []string{want}) {
				t.Errorf("TYPE %s = %q, want %s", key, got, want)
			}
		}
		err := admin.Get(ctx, "capability:sort:workers").Err()
		if err == nil || err.Error() != "WRONGTYPE Operation against a key holding the wrong kind of value" {
			t.Errorf("GET of a set: %v", err)
		}
		if err := admin.SMembers(ctx, "worker:sorter:alive").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Errorf("SMEMBERS of a string: %v", err)
		}
		if got := admin.Get(ctx, "worker:nobody:alive").Err(); got != redis.Nil {
			t.Errorf("GET of a missing key: %v, want nil", got)
		}
	})
	t.Run("AliveCountsDownAndExpiresWithoutHeartbeats", func(t *testing.T) {
		if err := grepper.c.Do(ctx, "WORKER.HEARTBEAT", "grepper", `{"active_jobs":0}`).Err(); err != nil {
			t.Fatal(err)
		}
		first := ttlOf(t, a, "worker:grepper:alive")
		if first < 1 || first > 3 {
			t.Fatalf("TTL worker:grepper:alive = %d just after a heartbeat, want 1 to 3", first)
		}
		if ttl := admin.TTL(ctx, "worker:grepper:stats").Val(); ttl < time.Second || ttl > 4*time.Second {
			t.Fatalf("TTL worker:grepper:stats = %v, want 1s to 4s", ttl)
		}
		agqtest.Eventually(t, 5*time.Second, func() error {
			if ttl := ttlOf(t, a, "worker:grepper:alive"); ttl >= first || ttl < 0 {
				return fmt.Errorf("TTL is %d, first was %d", ttl, first)
			}
			return nil
		})
		agqtest.Eventually(t, 10*time.Second, func() error {
			if ttl := ttlOf(t, a, "worker:grepper:alive"); ttl != -2 {
				return fmt.Errorf("TTL is still %d", ttl)
			}
			return nil
		})
		if n := admin.Exists(ctx, "worker:grepper:alive").Val(); n != 0 {
			t.Fatalf("EXISTS worker:grepper:alive = %d after 3 s without heartbeat", n)
		}
		if got := cli(t, a, "KEYS", "worker:*:alive"); slices.Contains(got, "worker:grepper:alive") || !slices.Contains(got, "worker:sorter:alive") {
			t.Fatalf("KEYS worker:*:alive = %q", got)
		}
		// The registration stays readable until the worker unregisters.
		if n := admin.Exists(ctx, "worker:grepper:metadata").Val(); n != 1 {
			t.Fatalf("EXISTS worker:grepper:metadata = %d", n)
		}
		if err := grepper.c.Do(ctx, "WORKER.UNREGISTER", "grepper").Err(); err != nil {
			t.Fatal(err)
		}
		if n := admin.Exists(ctx, "worker:grepper:metadata", "worker:grepper:stats").Val(); n != 0 {
			t.Fatalf("an unregistered worker still has %d keys", n)
		}
	})
	t.Run("WorkersMayNotListKeys", func(t *testing.T) {
		err := sorter.c.Do(ctx, "KEYS", "*").Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("KEYS as a worker: %v, want NOPERM", err)
		}
	})
}

func ttlOf(t *testing.T, a *agqtest.Agq, key string) int {
	t.Helper()
	out := cli(t, a, "TTL", key)
	n, err := strconv.Atoi(strings.Join(out, ""))
	if err != nil {
		t.Fatalf("TTL %s printed %q", key, out)
	}
	return n
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("%q: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

func TestKeyspaceShowsJobsAndQueues(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "w-1", "sort")
	sortJob := map[string]any{"plan": map[string]any{"tasks": []any{map[string]any{"tool": "sort"}}}, "timeout_seconds": 60}
	running := submit(t, admin, sortJob)
	queued := submit(t, admin, sortJob)
	mail := submit(t, admin, map[string]any{"queue": "emails", "type": "send"})
	if _, d, ok := w.pop(t, "1", "ready"); !ok || d.JobID != running {
		t.Fatalf("popped %+v (ok=%v), want %s", d, ok, running)
	}

	t.Run("JobWorkerNamesTheHolder", func(t *testing.T) {
		if got := cli(t, a, "GET", "job:"+running+":worker"); !slices.Equal(got, []string{"w-1"}) {
			t.Fatalf("GET job:%s:worker = %q, want w-1", running, got)
		}
		if ttl := ttlOf(t, a, "job:"+running+":worker"); ttl < 50 || ttl > 60 {
			t.Fatalf("TTL job:<id>:worker = %d, want the job's timeout (60) counting down", ttl)
		}
		if err := admin.Get(ctx, "job:"+queued+":worker").Err(); err != redis.Nil {
			t.Fatalf("GET job:<queued>:worker: %v, want nil", err)
		}
	})
	t.Run("JobIsTheJobJSON", func(t *testing.T) {
		got, err := admin.Get(ctx, "job:"+running).Result()
		if err != nil {
			t.Fatal(err)
		}
		want, err := admin.Do(ctx, "JOB.GET", running).Text()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("GET job:<id> = %s\nJOB.GET = %s", got, want)
		}
		if n := admin.StrLen(ctx, "job:"+running).Val(); n != int64(len(want)) {
			t.Fatalf("STRLEN = %d, want %d", n, len(want))
		}
		if ttl := ttlOf(t, a, "job:"+running); ttl != -1 {
			t.Fatalf("TTL job:<id> = %d, want -1", ttl)
		}
	})
	t.Run("ListsAreTheQueues", func(t *testing.T) {
		got := cli(t, a, "LRANGE", "queue:ready", "0", "-1")
		if len(got) != 1 || !strings.Contains(got[0], `"job_id":"`+queued+`"`) {
			t.Fatalf("LRANGE queue:ready 0 -1 = %q, want job %s", got, queued)
		}
		if got := cli(t, a, "LLEN", "queue:emails"); !slices.Equal(got, []string{"1"}) {
			t.Fatalf("LLEN queue:emails = %q", got)
		}
		if got := cli(t, a, "TYPE", "queue:emails"); !slices.Equal(got, []string{"list"}) {
			t.Fatalf("TYPE queue:emails = %q", got)
		}
		if err := admin.Get(ctx, "queue:emails").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Fatalf("GET of a queue: %v, want WRONGTYPE", err)
		}
	})
	t.Run("ExistsCountsWhatTheTablesHold", func(t *testing.T) {
		got := cli(t, a, "EXISTS", "job:"+running, "job:"+running+":worker", "job:"+queued+":worker",
			"job:nope", "queue:ready", "queue:nothing", "queue:emails", "job:"+mail, "job:"+mail)
		if !slices.Equal(got, []string{"6"}) {
			t.Fatalf("EXISTS = %q, want 6", got)
		}
		if got := cli(t, a, "TTL", "job:nope"); !slices.Equal(got, []string{"-2"}) {
			t.Fatalf("TTL of a missing key = %q", got)
		}
	})
	t.Run("KeysListsEverything", func(t *testing.T) {
		want := []string{
			"capability:sort:workers",
			"job:" + mail, "job:" + queued, "job:" + running, "job:" + running + ":worker",
			"queue:emails", "queue:ready",
			"worker:w-1:alive", "worker:w-1:metadata",
		}
		slices.Sort(want)
		if got := cli(t, a, "KEYS", "*"); !slices.Equal(got, want) {
			t.Fatalf("KEYS * = %q\nwant %q", got, want)
		}
		if got := admin.DBSize(ctx).Val(); got != int64(len(want)) {
			t.Fatalf("DBSIZE = %d, want %d", got, len(want))
		}
		if got := cli(t, a, "KEYS", "job:*:worker"); !slices.Equal(got, []string{"job:" + running + ":worker"}) {
			t.Fatalf("KEYS job:*:worker = %q", got)
		}
		if got := cli(t, a, "KEYS", "[qc]*"); !slices.Equal(got, []string{"capability:sort:workers", "queue:emails", "queue:ready"}) {
			t.Fatalf("KEYS [qc]* = %q", got)
		}
		if got := cli(t, a, "KEYS", "job:"+queued); !slices.Equal(got, []string{"job:" + queued}) {
			t.Fatalf("KEYS job:<id> = %q", got)
		}
	})
	t.Run("WritesAreRefused", func(t *testing.T) {
		want := "ERR agq keys are read-only; use JOB.* commands"
		if got := cli(t, a, "SET", "foo", "bar"); !slices.Equal(got, []string{want}) {
			t.Fatalf("redis-cli SET foo bar = %q, want %q", got, want)
		}
		for _, args := range [][]any{{"SET", "foo", "bar"}, {"DEL", "job:" + queued}, {"EXPIRE", "worker:w-1:alive", "1"},
			{"RPUSH", "queue:ready", "{}"}, {"SADD", "capability:sort:workers", "x"}, {"FLUSHALL"}, {"SET"},
			{"LPUSH", "foo", "{}"}, {"LPUSH", "job:" + queued, "{}"}, {"SETBIT", "foo", "1", "1"}, {"PFADD", "h", "a"},
			{"XADD", "s", "*", "a", "b"}, {"ZPOPMIN", "z"}, {"SINTERSTORE", "d", "a"}} {
			if err := admin.Do(ctx, args...).Err(); err == nil || err.Error() != want {
				t.Errorf("%v: %v, want %s", args, err, want)
			}
		}
		if err := w.c.Do(ctx, "DEL", "x").Err(); err == nil || err.Error() != want {
			t.Errorf("DEL as a worker: %v, want %s", err, want)
		}
		if n := admin.Exists(ctx, "job:"+queued).Val(); n != 1 {
			t.Fatalf("the job is gone after DEL")
		}
	})
	t.Run("BadArguments", func(t *testing.T) {
		for _, tc := range []struct {
			args []any
			want string
		}{
			{[]any{"SCAN", "x"}, "ERR invalid cursor"},
			{[]any{"SCAN", "-1"}, "ERR invalid cursor"},
			{[]any{"SCAN", "0", "COUNT", "0"}, "ERR syntax error"},
			{[]any{"SCAN", "0", "COUNT", "x"}, "ERR value is not an integer or out of range"},
			{[]any{"SCAN", "0", "MATCH"}, "ERR syntax error"},
			{[]any{"SCAN", "0", "LIMIT", "3"}, "ERR syntax error"},
			{[]any{"SCAN", "0", "MATCH", strings.Repeat("*a", 3000)}, "ERR pattern is longer than 4096 bytes"},
			{[]any{"KEYS", strings.Repeat("?", 5000)}, "ERR pattern is longer than 4096 bytes"},
			{[]any{"KEYS"}, "ERR wrong number of arguments for 'keys' command"},
			{[]any{"KEYS", "a", "b"}, "ERR wrong number of arguments for 'keys' command"},
			{[]any{"GET", "a", "b"}, "ERR wrong number of arguments for 'get' command"},
			{[]any{"EXISTS"}, "ERR wrong number of arguments for 'exists' command"},
		} {
			if err := admin.Do(ctx, tc.args...).Err(); err == nil || err.Error() != tc.want {
				t.Errorf("%v: %v, want %s", tc.args, err, tc.want)
			}
		}
	})
}

func TestKeyspaceScanPaginates(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "w-1", "sort")
	want := map[string]bool{}
	for i := range 25 {
		id := submit(t, admin, map[string]any{"job_id": fmt.Sprintf("job-%02d", i), "requires": []string{"sort"}})
		want["job:"+id] = true
	}
	for range 3 {
		_, d, ok := w.pop(t, "1", "ready")
		if !ok {
			t.Fatal("no job to pop")
		}
		want["job:"+d.JobID+":worker"] = true
	}

	// scanAll follows the cursor to the end, asking the clients in turn.
	scanAll := func(t *testing.T, match, typ string, clients ...*redis.Client) (map[string]int, int) {
		t.Helper()
		seen := map[string]int{}
		cursor, calls := uint64(0), 0
		for {
			c := clients[calls%len(clients)]
			keys, next, err := c.ScanType(ctx, cursor, match, 10, typ).Result()
			if err != nil {
				t.Fatal(err)
			}
			calls++
			if len(keys) > 20 {
				t.Fatalf("SCAN COUNT 10 answered %d keys", len(keys))
			}
			for _, k := range keys {
				seen[k]++
			}
			if cursor = next; cursor == 0 {
				return seen, calls
			}
			if calls > 100 {
				t.Fatal("SCAN does not end")
			}
		}
	}
	checkOnce := func(t *testing.T, seen map[string]int, want map[string]bool) {
		t.Helper()
		for k, n := range seen {
			if !want[k] || n != 1 {
				t.Errorf("SCAN gave %s %d times (expected: %v)", k, n, want[k])
			}
		}
		for k := range want {
			if seen[k] == 0 {
				t.Errorf("SCAN never gave %s", k)
			}
		}
	}

	t.Run("MatchJobsCount10", func(t *testing.T) {
		seen, calls := scanAll(t, "job:*", "", admin)
		checkOnce(t, seen, want)
		if calls < 3 {
			t.Fatalf("25 jobs took %d SCAN calls of COUNT 10", calls)
		}
	})
	t.Run("CursorsWorkOnAnotherNode", func(t *testing.T) {
		cfg := agqtest.DefaultConfig(t)
		cfg.DatabaseURL, cfg.AdminKey = a.DatabaseURL, a.AdminKey
		b := agqtest.StartConfig(t, cfg)
		seen, _ := scanAll(t, "job:*", "", admin, b.Admin(t))
		checkOnce(t, seen, want)
	})
	t.Run("MatchHolders", func(t *testing.T) {
		seen, _ := scanAll(t, "job:*:worker", "", admin)
		holders := map[string]bool{}
		for k := range want {
			if strings.HasSuffix(k, ":worker") {
				holders[k] = true
			}
		}
		checkOnce(t, seen, holders)
	})
	t.Run("TypeSet", func(t *testing.T) {
		seen, _ := scanAll(t, "*", "set", admin)
		checkOnce(t, seen, map[string]bool{"capability:sort:workers": true})
	})
	t.Run("Everything", func(t *testing.T) {
		seen, _ := scanAll(t, "*", "", admin)
		all := map[string]bool{"capability:sort:workers": true, "queue:ready": true, "worker:w-1:alive": true, "worker:w-1:metadata": true}
		for k := range want {
			all[k] = true
		}
		checkOnce(t, seen, all)
	})
	t.Run("RedisCLIScan", func(t *testing.T) {
		got := cli(t, a, "--scan", "--pattern", "job:*")
		seen := map[string]int{}
		for _, k := range got {
			seen[k]++
		}
		checkOnce(t, seen, want)
	})
}
