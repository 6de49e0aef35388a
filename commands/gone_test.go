package commands_test

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// killableWorker is a worker whose connections can all be cut at once, as
// when its process is killed: with SO_LINGER 0 the socket is reset, not
// closed in order.
type killableWorker struct {
	*testWorker
	mu    sync.Mutex
	conns []net.Conn
}

func newKillableWorker(t *testing.T, a *agqtest.Agq, id, key string) *killableWorker {
	t.Helper()
	k := &killableWorker{}
	c := a.Client(t, redis.Options{Username: id, Password: key, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				k.mu.Lock()
				k.conns = append(k.conns, conn)
				k.mu.Unlock()
			}
			return conn, err
		}})
	k.testWorker = &testWorker{id: id, c: c}
	return k
}

// kill resets every connection the worker opened.
func (k *killableWorker) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

func (k *killableWorker) register(t *testing.T) {
	t.Helper()
	reg, _ := json.Marshal(map[string]any{"worker_id": k.id, "hostname": "h", "agw_version": "1",
		"capabilities": map[string]any{"tools": []string{"t"}}})
	if err := k.c.Do(context.Background(), "WORKER.REGISTER", string(reg)).Err(); err != nil {
		t.Fatalf("WORKER.REGISTER %s: %v", k.id, err)
	}
}

// holdJob submits a job to queue and has k take and acknowledge it.
func (k *killableWorker) holdJob(t *testing.T, admin *redis.Client, queue string) delivered {
	t.Helper()
	id := submit(t, admin, map[string]any{"type": "t", "queue": queue})
	_, d, ok := k.pop(t, "5", queue)
	if !ok || d.JobID != id {
		t.Fatalf("%s popped %+v (ok=%v), want %s", k.id, d, ok, id)
	}
	if err := k.update(context.Background(), id, map[string]any{"status": "running", "delivery": d.Delivery}); err != nil {
		t.Fatal(err)
	}
	return d
}

// pastStartGrace waits until a node that was up at started is past its
// start-up grace: connections it loses before do not count. The node
// says it runs a moment after it is up.
func pastStartGrace(started time.Time, grace time.Duration) {
	time.Sleep(time.Until(started.Add(grace + 500*time.Millisecond)))
}

// A worker killed while holding a job: its connections reset, it does not
// come back, and its job is delivered to another worker within seconds,
// long before its heartbeats (30 s apart) would be missed.
func TestAWorkerWhoseConnectionsAllCloseIsLost(t *testing.T) {
	t.Parallel()
	const goneAfter = time.Second
	a := agqtest.Start(t, func(c *config.Config) { c.WorkerGoneAfter = goneAfter })
	started := time.Now()
	admin := a.Admin(t)
	ctx := context.Background()
	victim := newKillableWorker(t, a, "victim", a.CreateKey(t, "worker", "victim"))
	victim.register(t)
	// A second connection of its pool: all must close.
	if err := victim.c.Do(ctx, "WORKER.HEARTBEAT", "victim").Err(); err != nil {
		t.Fatal(err)
	}
	other := registerWorker(t, a, "survivor", "t")
	d := victim.holdJob(t, admin, "gone")
	pastStartGrace(started, goneAfter)

	victim.kill()
	killed := time.Now()
	_, again, ok := other.pop(t, "10", "gone")
	if !ok || again.JobID != d.JobID || again.Attempt != 2 {
		t.Fatalf("the other worker got %+v (ok=%v), want %s at attempt 2", again, ok, d.JobID)
	}
	t.Logf("delivered again %v after its worker was killed", time.Since(killed).Round(time.Millisecond))
	if dead, err := admin.Do(ctx, "WORKER.LIST", "DEAD").StringSlice(); err != nil || !slices.Equal(dead, []string{"victim"}) {
		t.Fatalf("WORKER.LIST DEAD = %v, %v", dead, err)
	}
	if raw, _ := admin.Do(ctx, "JOB.GET", d.JobID).Text(); !strings.Contains(raw, "worker victim was lost while holding the job") {
		t.Fatalf("the job's errors do not say why: %s", raw)
	}
}

// The default AGQ_WORKER_GONE_AFTER (10 s): a killed worker's job is
// delivered again within 15 s.
func TestAKilledWorkersJobIsDeliveredAgainWithin15sByDefault(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	started := time.Now()
	if a.Config.WorkerGoneAfter != 10*time.Second {
		t.Fatalf("default worker-gone-after %v", a.Config.WorkerGoneAfter)
	}
	admin := a.Admin(t)
	victim := newKillableWorker(t, a, "victim", a.CreateKey(t, "worker", "victim"))
	victim.register(t)
	other := registerWorker(t, a, "survivor", "t")
	d := victim.holdJob(t, admin, "gone")
	pastStartGrace(started, a.Config.WorkerGoneAfter)

	victim.kill()
	killed := time.Now()
	_, again, ok := other.pop(t, "15", "gone")
	took := time.Since(killed)
	if !ok || again.JobID != d.JobID {
		t.Fatalf("after %v the other worker got %+v (ok=%v), want %s", took, again, ok, d.JobID)
	}
	t.Logf("delivered again %v after its worker was killed", took.Round(time.Millisecond))
	if took >= 15*time.Second {
		t.Fatalf("delivered again after %v", took)
	}
}

// A worker whose connections all closed and that comes back within the
// window keeps its jobs and finishes them.
func TestAWorkerThatComesBackInTimeKeepsItsJobs(t *testing.T) {
	t.Parallel()
	const goneAfter = 2 * time.Second
	a := agqtest.Start(t, func(c *config.Config) { c.WorkerGoneAfter = goneAfter })
	started := time.Now()
	admin := a.Admin(t)
	ctx := context.Background()
	key := a.CreateKey(t, "worker", "blinker")
	first := newKillableWorker(t, a, "blinker", key)
	first.register(t)
	d := first.holdJob(t, admin, "blink")
	pastStartGrace(started, goneAfter)

	first.kill()
	time.Sleep(goneAfter / 2)
	// Its new process (or its pool) connects again with the same key.
	back := newKillableWorker(t, a, "blinker", key)
	if err := back.c.Do(ctx, "PING").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * goneAfter)
	if live, err := admin.Do(ctx, "WORKER.LIST", "ACTIVE").StringSlice(); err != nil || !slices.Contains(live, "blinker") {
		t.Fatalf("WORKER.LIST ACTIVE = %v, %v", live, err)
	}
	if err := back.update(ctx, d.JobID, map[string]any{"status": "completed", "delivery": d.Delivery}); err != nil {
		t.Fatalf("completing the job it kept: %v", err)
	}
	if v := getJob(t, admin, d.JobID); v.Status != "completed" || v.Attempt != 1 {
		t.Fatalf("the job: %+v", v)
	}
}

// An agq restart never costs a worker its jobs: the connections a stopping
// node closes are its own doing, whether the worker comes back to the
// node that replaces it or to another that ran all along and leads.
func TestAnAgqRestartCostsNoWorkerItsJobs(t *testing.T) {
	t.Parallel()
	const goneAfter = time.Second
	fast := func(c *config.Config) { c.WorkerGoneAfter = goneAfter }
	t.Run("BackToTheSameAddress", func(t *testing.T) {
		t.Parallel()
		cfg := agqtest.DefaultConfig(t)
		cfg.Listen, cfg.WorkerGoneAfter = agqtest.StableAddr(t), goneAfter
		first := agqtest.StartConfig(t, cfg)
		started := time.Now()
		w := newKillableWorker(t, first, "restarted", first.CreateKey(t, "worker", "restarted"))
		holdThroughRestart(t, first, w, started, func() *agqtest.Agq {
			_ = first.Node.Close()
			time.Sleep(3 * goneAfter)
			return agqtest.StartConfig(t, cfg)
		})
	})
	t.Run("ToAnotherNodeThatLeads", func(t *testing.T) {
		t.Parallel()
		leader := agqtest.Start(t, fast)
		first := agqtest.Start(t, fast, func(c *config.Config) { c.DatabaseURL = leader.DatabaseURL })
		started := time.Now()
		key := first.CreateKey(t, "worker", "moved")
		w := newKillableWorker(t, first, "moved", key)
		holdThroughRestart(t, first, w, started, func() *agqtest.Agq {
			_ = first.Node.Close()
			// The leader sweeps all the while; the worker takes its
			// time to come back, to the leader.
			time.Sleep(3 * goneAfter)
			w.testWorker = &testWorker{id: "moved", c: leader.Client(t, redis.Options{Username: "moved", Password: key})}
			return leader
		})
	})
}

// holdThroughRestart has w hold a job on a, past a's start-up grace, then
// restart: restart stops a and answers the node the worker comes back to,
// which must find the worker ACTIVE, let it heartbeat and complete its job.
func holdThroughRestart(t *testing.T, a *agqtest.Agq, w *killableWorker, started time.Time, restart func() *agqtest.Agq) {
	t.Helper()
	ctx := context.Background()
	w.register(t)
	d := w.holdJob(t, a.Admin(t), "restart")
	pastStartGrace(started, a.Config.WorkerGoneAfter)
	b := restart()
	// Back, and past any window that could have counted the restart.
	if err := w.c.Do(ctx, "WORKER.HEARTBEAT", w.id).Err(); err != nil {
		t.Fatalf("heartbeat after the restart: %v", err)
	}
	time.Sleep(3 * a.Config.WorkerGoneAfter)
	admin := b.Admin(t)
	if live, err := admin.Do(ctx, "WORKER.LIST", "ACTIVE").StringSlice(); err != nil || !slices.Contains(live, w.id) {
		t.Fatalf("WORKER.LIST ACTIVE = %v, %v", live, err)
	}
	if err := w.update(ctx, d.JobID, map[string]any{"status": "completed", "delivery": d.Delivery}); err != nil {
		t.Fatalf("completing the job it held through the restart: %v", err)
	}
	if v := getJob(t, admin, d.JobID); v.Status != "completed" || v.Attempt != 1 {
		t.Fatalf("the job: %+v", v)
	}
}
