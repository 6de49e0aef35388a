package commands_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

func TestWorkerRegistration(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) { c.HeartbeatInterval = 7 * time.Second })
	ctx := context.Background()
	key := a.CreateKey(t, "worker", "w-1")
	c := a.Client(t, redis.Options{Username: "w-1", Password: key})

	tests := []struct {
		name, doc, want string
	}{
		{"RepliesWithIdAndInterval", `{"worker_id":"w-1","hostname":"h","agw_version":"0.1.0","capabilities":{"tools":["sort"]}}`, "OK worker_id=w-1 heartbeat_interval=7"},
		{"ReRegisteringTakesTheRecordOver", `{"worker_id":"w-1","hostname":"h2","agw_version":"0.1.1","capabilities":{"tools":["sort","uniq"]},"max_concurrent_jobs":4,"tags":{"tier":"dev"}}`, "OK worker_id=w-1 heartbeat_interval=7"},
		{"ToolsAreRequired", `{"worker_id":"w-1","hostname":"h","agw_version":"1","capabilities":{"agentic_units":["x"]}}`, "ERR Invalid capabilities format"},
		{"ToolsMustBeStrings", `{"worker_id":"w-1","hostname":"h","agw_version":"1","capabilities":{"tools":[1]}}`, "ERR Invalid capabilities format"},
		{"CapabilitiesMustBeAnObject", `{"worker_id":"w-1","hostname":"h","agw_version":"1","capabilities":"sort"}`, "ERR Invalid capabilities format"},
		{"WorkerIdIsChecked", `{"worker_id":"bad id!","hostname":"h","agw_version":"1","capabilities":{"tools":[]}}`, "ERR invalid worker_id"},
		{"HostnameIsRequired", `{"worker_id":"w-1","agw_version":"1","capabilities":{"tools":[]}}`, "ERR invalid registration: hostname is required"},
		{"BadJSONIsAnError", `{"worker_id":`, "ERR invalid registration: unexpected EOF"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Do(ctx, "WORKER.REGISTER", tc.doc).Text()
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Fatalf("WORKER.REGISTER = %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("AWorkerIdBelongsToItsKey", func(t *testing.T) {
		const taken = "NOPERM Worker ID already registered by another principal"
		otherKey := a.CreateKey(t, "worker", "w-2")
		other := a.Client(t, redis.Options{Password: otherKey})
		register := func(c *redis.Client, id string) error {
			return c.Do(ctx, "WORKER.REGISTER", `{"worker_id":"`+id+`","hostname":"h","agw_version":"1","capabilities":{"tools":[]}}`).Err()
		}
		// w-1 is ACTIVE, registered by its own key.
		if err := register(other, "w-1"); err == nil || err.Error() != taken {
			t.Fatalf("taking the live w-1: %v", err)
		}
		if err := other.Do(ctx, "WORKER.HEARTBEAT", "w-1").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("heartbeat for another principal's worker: %v", err)
		}
		// w-3's key exists; w-3 never registered.
		a.CreateKey(t, "worker", "w-3")
		if err := register(other, "w-3"); err == nil || err.Error() != taken {
			t.Fatalf("taking w-3 before it registered: %v", err)
		}
		// An id no key is named after belongs to whoever registered it first,
		// in every state since.
		if err := register(other, "shared-slot"); err != nil {
			t.Fatal(err)
		}
		third := a.Client(t, redis.Options{Password: a.CreateKey(t, "worker", "w-4")})
		for _, state := range []string{"ACTIVE", "UNREGISTERED", "DEAD"} {
			switch state {
			case "UNREGISTERED":
				if err := other.Do(ctx, "WORKER.UNREGISTER", "shared-slot").Err(); err != nil {
					t.Fatal(err)
				}
			case "DEAD":
				if _, err := a.Node.Store().Pool.Exec(ctx, `UPDATE workers SET state = 'DEAD' WHERE worker_id = 'shared-slot'`); err != nil {
					t.Fatal(err)
				}
			}
			if err := register(third, "shared-slot"); err == nil || err.Error() != taken {
				t.Fatalf("taking shared-slot while it is %s: %v", state, err)
			}
		}
		if err := register(other, "shared-slot"); err != nil {
			t.Fatalf("its own key registering shared-slot again: %v", err)
		}
		raw, err := a.Admin(t).Do(ctx, "WORKER.GET", "shared-slot").Text()
		if err != nil || !strings.Contains(raw, `"principal":"w-2"`) {
			t.Fatalf("WORKER.GET shared-slot = %s, %v", raw, err)
		}
	})
	t.Run("HeartbeatStoresStats", func(t *testing.T) {
		got, err := c.Do(ctx, "WORKER.HEARTBEAT", "w-1", `{"active_jobs":2,"cpu_usage_percent":45.2}`).Text()
		if err != nil || got != "OK" {
			t.Fatalf("WORKER.HEARTBEAT = %q, %v", got, err)
		}
		raw, err := a.Admin(t).Do(ctx, "WORKER.GET", "w-1").Text()
		if err != nil || !strings.Contains(raw, `"stats":{"active_jobs":2,"cpu_usage_percent":45.2}`) || !strings.Contains(raw, `"state":"ACTIVE"`) {
			t.Fatalf("WORKER.GET = %s, %v", raw, err)
		}
		if err := c.Do(ctx, "WORKER.HEARTBEAT", "w-1", `not json`).Err(); err == nil {
			t.Fatal("bad stats accepted")
		}
	})
	t.Run("DrainIsToldThroughTheHeartbeat", func(t *testing.T) {
		if err := a.Admin(t).Do(ctx, "WORKER.DRAIN", "w-1").Err(); err != nil {
			t.Fatal(err)
		}
		got, err := c.Do(ctx, "WORKER.HEARTBEAT", "w-1").Text()
		if err != nil || got != "OK drain=true" {
			t.Fatalf("WORKER.HEARTBEAT = %q, %v", got, err)
		}
		ids, err := a.Admin(t).Do(ctx, "WORKER.LIST", "DRAINING").StringSlice()
		if err != nil || len(ids) != 1 || ids[0] != "w-1" {
			t.Fatalf("WORKER.LIST DRAINING = %v, %v", ids, err)
		}
		// A reconnecting worker registers again: the drain stays.
		if err := c.Do(ctx, "WORKER.REGISTER", tests[0].doc).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Do(ctx, "WORKER.HEARTBEAT", "w-1").Text(); err != nil || got != "OK drain=true" {
			t.Fatalf("WORKER.HEARTBEAT after re-registering = %q, %v", got, err)
		}
	})
	t.Run("UnregisteredWorkerIsUnknownToHeartbeats", func(t *testing.T) {
		if err := c.Do(ctx, "WORKER.UNREGISTER", "w-1").Err(); err != nil {
			t.Fatal(err)
		}
		err := c.Do(ctx, "WORKER.HEARTBEAT", "w-1").Err()
		if err == nil || err.Error() != "ERR Worker not registered: w-1" {
			t.Fatalf("heartbeat after unregister: %v", err)
		}
		if err := c.Do(ctx, "BRPOP", "queue:ready", "0.1").Err(); err == nil || err.Error() != "ERR Worker not registered: w-1" {
			t.Fatalf("pop after unregister: %v", err)
		}
	})
}

func TestHeldJobsAcrossUnregisterAndCancel(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "holder", "t")

	t.Run("HeartbeatNamesJobsToCancel", func(t *testing.T) {
		id := submit(t, admin, map[string]any{"type": "t"})
		if _, d, ok := w.pop(t, "1", "ready"); !ok || d.JobID != id {
			t.Fatalf("pop: %+v", d)
		}
		if err := w.update(ctx, id, map[string]any{"status": "running"}); err != nil {
			t.Fatal(err)
		}
		if err := admin.Do(ctx, "JOB.CANCEL", id).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := w.c.Do(ctx, "WORKER.HEARTBEAT", "holder").Text()
		if err != nil || got != "OK cancel="+id {
			t.Fatalf("WORKER.HEARTBEAT = %q, %v", got, err)
		}
		if err := w.update(ctx, id, map[string]any{"status": "cancelled"}); err == nil || !strings.HasPrefix(err.Error(), "CANCELLED") {
			t.Fatalf("update after cancel: %v", err)
		}
	})
	t.Run("UnregisterRequeuesHeldJobsAtOnce", func(t *testing.T) {
		id := submit(t, admin, map[string]any{"type": "t"})
		if _, d, ok := w.pop(t, "1", "ready"); !ok || d.JobID != id {
			t.Fatalf("pop: %+v", d)
		}
		if err := w.c.Do(ctx, "WORKER.UNREGISTER", "holder").Err(); err != nil {
			t.Fatal(err)
		}
		v := getJob(t, admin, id)
		if v.Status != "queued" || v.Attempt != 0 || v.WorkerID != nil {
			t.Fatalf("job after unregister: %+v", v)
		}
	})
}

func TestUnacknowledgedDeliveryReturnsWithoutCountingAnAttempt(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) { c.AckTimeout = 500 * time.Millisecond })
	admin := a.Admin(t)
	w := registerWorker(t, a, "silent", "t")
	id := submit(t, admin, map[string]any{"type": "t"})
	if _, d, ok := w.pop(t, "1", "ready"); !ok || d.JobID != id || d.Attempt != 1 {
		t.Fatalf("pop: %+v", d)
	}
	// No JOB.UPDATE: the delivery is not acknowledged.
	_, d, ok := w.pop(t, "10", "ready")
	if !ok || d.JobID != id || d.Attempt != 1 {
		t.Fatalf("redelivery: %+v ok=%v", d, ok)
	}
}

func TestRestartedWorkerGivesBackTheJobsItNoLongerRuns(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "fixed-id", "t")
	kept := submit(t, admin, map[string]any{"type": "t", "job_id": "kept"})
	lost := submit(t, admin, map[string]any{"type": "t", "job_id": "lost"})
	for range 2 {
		_, d, ok := w.pop(t, "1", "ready")
		if !ok {
			t.Fatal("pop found nothing")
		}
		if err := w.update(ctx, d.JobID, map[string]any{"status": "running"}); err != nil {
			t.Fatal(err)
		}
	}
	// The same worker id comes back (a reconnect, or a new process) and
	// says what it runs.
	doc := `{"worker_id":"fixed-id","hostname":"h","agw_version":"1","capabilities":{"tools":["t"]},"running_jobs":["kept"]}`
	if err := w.c.Do(ctx, "WORKER.REGISTER", doc).Err(); err != nil {
		t.Fatal(err)
	}
	if v := getJob(t, admin, kept); v.Status != "running" || v.WorkerID == nil || *v.WorkerID != "fixed-id" {
		t.Fatalf("the job it still runs: %+v", v)
	}
	v := getJob(t, admin, lost)
	if v.Status != "queued" || len(v.Errors) != 1 || !strings.Contains(string(v.Errors[0]), "restarted without it") {
		t.Fatalf("the job it lost: %+v", v)
	}
}

func TestAJobNeverAcknowledgedEndsFailedInsteadOfCyclingForever(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) { c.AckTimeout = 200 * time.Millisecond })
	admin := a.Admin(t)
	w := registerWorker(t, a, "crashy", "t")
	id := submit(t, admin, map[string]any{"type": "t", "max_attempts": 1})
	// Each delivery is dropped unacknowledged, as by a worker that dies
	// on this job before it can say a word.
	for i := 1; i <= 3; i++ {
		if _, d, ok := w.pop(t, "10", "ready"); !ok || d.JobID != id {
			t.Fatalf("delivery %d: %+v %v", i, d, ok)
		}
	}
	agqtest.Eventually(t, 10*time.Second, func() error {
		if v := getJob(t, admin, id); v.Status != "failed" || len(v.Errors) != 1 {
			return fmt.Errorf("job is %s with %d errors", v.Status, len(v.Errors))
		}
		return nil
	})
}

// A worker's pops blocked on any node look again when it registers with
// other capabilities (on another connection, on another node): a job only
// the new ones cover reaches them at once, not at a periodic re-check.
func TestBlockedPopsFollowTheirWorkersNewCapabilities(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	b := agqtest.Start(t, func(c *config.Config) { c.DatabaseURL = a.DatabaseURL })
	admin := a.Admin(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, registerOn string }{{"same node", "a"}, {"other node", "b"}} {
		t.Run(tc.name, func(t *testing.T) {
			id := "newcaps-" + strings.ReplaceAll(tc.name, " ", "-")
			key := a.CreateKey(t, "worker", id)
			register := func(c *redis.Client, tools ...string) {
				t.Helper()
				doc := fmt.Sprintf(`{"worker_id":%q,"hostname":"h","agw_version":"1","capabilities":{"tools":["%s"]}}`, id, strings.Join(tools, `","`))
				if err := c.Do(ctx, "WORKER.REGISTER", doc).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// A client that neither times out nor sends the pop again.
			popper := a.Client(t, redis.Options{Username: id, Password: key, ReadTimeout: time.Minute, MaxRetries: -1})
			register(popper, "old")
			queue := "newcaps-" + tc.registerOn
			popped := make(chan []string, 1)
			go func() {
				res, _ := popper.Do(ctx, "BRPOP", "queue:"+queue, "30").StringSlice()
				popped <- res
			}()
			awaitBlockedPop(t, a)
			other := a
			if tc.registerOn == "b" {
				other = b
			}
			register(other.Client(t, redis.Options{Username: id, Password: key}), "old", "new")
			want := submit(t, admin, map[string]any{"queue": queue, "type": "new"})
			select {
			case res := <-popped:
				if len(res) != 2 || !strings.Contains(res[1], want) {
					t.Fatalf("the blocked pop answered %q, want job %s", res, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the blocked pop was not given the job its worker's new capabilities cover")
			}
		})
	}
}
