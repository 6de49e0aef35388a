package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// Time in which agq or PostgreSQL was away is not the workers' silence: a
// worker that holds a job through an outage longer than three heartbeat
// intervals is not declared dead, its job is not run again, and its
// completion of a job on its last attempt is accepted. Nor are the
// connections agq lost when it was killed: the worker is away from agq far
// longer than --worker-gone-after.
func TestOutagesAreNotBlamedOnWorkers(t *testing.T) {
	t.Run("AgqKilled", func(t *testing.T) {
		srv := newAgqProcess(t, buildAgq(t), agqtest.NewDatabase(t))
		srv.extraArgs = []string{"--heartbeat-interval", "1s", "--worker-gone-after", "1s"}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		srv.start(ctx)
		holdThroughOutage(ctx, t, srv, func() {
			srv.kill()
			time.Sleep(4 * time.Second)
			srv.start(ctx)
		})
		srv.stop(t)
	})

	t.Run("PostgresRestarted", func(t *testing.T) {
		cl := agqtest.OwnCluster(t, nil)
		srv := newAgqProcess(t, buildAgq(t), cl.ConnString("postgres"))
		srv.extraArgs = []string{"--heartbeat-interval", "1s", "--worker-gone-after", "1s"}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		srv.start(ctx)
		holdThroughOutage(ctx, t, srv, func() {
			if err := cl.Stop(); err != nil {
				t.Fatalf("stopping postgres: %v", err)
			}
			time.Sleep(4 * time.Second)
			if err := cl.Start(ctx); err != nil {
				t.Fatalf("starting postgres: %v", err)
			}
		})
		srv.stop(t)
	})
}

// holdThroughOutage has a worker, heartbeating every second as agw does,
// take a job with one attempt, lives through outage, resumes heartbeating
// a moment after it (as a worker whose next tick comes later would), then
// completes the job once a dead-worker sweep has certainly run.
func holdThroughOutage(ctx context.Context, t *testing.T, srv *agqProcess, outage func()) {
	t.Helper()
	admin := redis.NewClient(srv.clientOptions("", srv.adminKey))
	defer admin.Close()
	key := mustText(ctx, t, admin, "KEY.CREATE", "worker", "holder")
	w := redis.NewClient(srv.clientOptions("holder", key))
	defer w.Close()
	reg := `{"worker_id":"holder","hostname":"h","agw_version":"0","capabilities":{"tools":["t"]}}`
	if err := w.Do(ctx, "WORKER.REGISTER", reg).Err(); err != nil {
		t.Fatal(err)
	}
	var paused atomic.Bool
	var beats atomic.Int64
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	go func() {
		for hbCtx.Err() == nil {
			if !paused.Load() && w.Do(hbCtx, "WORKER.HEARTBEAT", "holder").Err() == nil {
				beats.Add(1)
			}
			select {
			case <-hbCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	mustText(ctx, t, admin, "JOB.SUBMIT", `{"job_id":"once","queue":"hold","type":"t","max_attempts":1}`)
	res, err := w.BRPop(ctx, 5*time.Second, "queue:hold").Result()
	if err != nil {
		t.Fatal(err)
	}
	var job struct {
		Attempt  int    `json:"attempt"`
		Delivery string `json:"delivery"`
	}
	if err := json.Unmarshal([]byte(res[1]), &job); err != nil {
		t.Fatal(err)
	}
	ack := fmt.Sprintf(`{"status":"running","attempt":%d,"delivery":%q}`, job.Attempt, job.Delivery)
	if err := w.Do(ctx, "JOB.UPDATE", "once", ack).Err(); err != nil {
		t.Fatal(err)
	}

	paused.Store(true)
	outage()
	back := time.Now()
	time.Sleep(1500 * time.Millisecond)
	before := beats.Load()
	paused.Store(false)
	agqtest.Eventually(t, 20*time.Second, func() error {
		if beats.Load() == before {
			return fmt.Errorf("no heartbeat answered since the outage")
		}
		return nil
	})
	// Past three intervals since agq could hear the worker again: a
	// sweep that wrongly counted the outage would have struck by now.
	time.Sleep(time.Until(back.Add(4 * time.Second)))

	done := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, job.Attempt, job.Delivery)
	if err := w.Do(ctx, "JOB.UPDATE", "once", done).Err(); err != nil {
		t.Fatalf("the worker's completion after the outage: %v", err)
	}
	raw := mustText(ctx, t, admin, "JOB.GET", "once")
	if !strings.Contains(raw, `"status":"completed"`) || !strings.Contains(raw, `"attempt":1,`) {
		t.Fatalf("the job after the outage: %s", raw)
	}
	dead, err := admin.Do(ctx, "WORKER.LIST", "DEAD").StringSlice()
	if err != nil || slices.Contains(dead, "holder") {
		t.Fatalf("WORKER.LIST DEAD = %v, %v: the outage was blamed on the worker", dead, err)
	}
}

// A claim commits without waiting for the WAL flush, so a database crash
// can lose it: the job is then delivered again with the same attempt
// number — here to another slot of the same worker, so neither the owner
// nor the attempt tells the deliveries apart. The delivery token does: the
// first delivery's report is refused and never lands on the newer one.
func TestAStaleDeliveryIsRefusedAfterACrashLostItsClaim(t *testing.T) {
	// The WAL writer waits long, so an unflushed claim is still in
	// PostgreSQL's buffers when it stops immediately.
	cl := agqtest.OwnCluster(t, map[string]string{"wal_writer_delay": "10s"})
	srv := newAgqProcess(t, buildAgq(t), cl.ConnString("postgres"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv.start(ctx)
	admin := redis.NewClient(srv.clientOptions("", srv.adminKey))
	defer admin.Close()
	key := mustText(ctx, t, admin, "KEY.CREATE", "worker", "w")
	slot := func() *redis.Client {
		c := redis.NewClient(srv.clientOptions("w", key))
		t.Cleanup(func() { c.Close() })
		return c
	}
	first, second := slot(), slot()
	if err := first.Do(ctx, "WORKER.REGISTER", `{"worker_id":"w","hostname":"h","agw_version":"0","capabilities":{"tools":["t"]},"max_concurrent_jobs":2}`).Err(); err != nil {
		t.Fatal(err)
	}
	mustText(ctx, t, admin, "JOB.SUBMIT", `{"job_id":"twice","queue":"crash","type":"t"}`)
	type delivery struct {
		Attempt  int    `json:"attempt"`
		Delivery string `json:"delivery"`
	}
	pop := func(c *redis.Client) delivery {
		t.Helper()
		res, err := c.BRPop(ctx, 10*time.Second, "queue:crash").Result()
		if err != nil {
			t.Fatal(err)
		}
		var d delivery
		if err := json.Unmarshal([]byte(res[1]), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d1 := pop(first)

	if err := cl.Crash(); err != nil {
		t.Fatalf("crashing postgres: %v", err)
	}
	if err := cl.Start(ctx); err != nil {
		t.Fatalf("starting postgres: %v", err)
	}
	db, err := pgx.Connect(ctx, cl.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var status string
	if err := db.QueryRow(ctx, `SELECT status FROM jobs_all WHERE id = 'twice'`).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status == "running" {
		// The WAL writer flushed the claim before the crash after all:
		// undo it as the crash would have.
		t.Log("the claim survived the crash; undoing it as a lost claim")
		if _, err := db.Exec(ctx, `UPDATE jobs SET status = 'queued', attempt = 0, worker_id = NULL, delivery = NULL,
			ack_deadline = NULL, lease_expires_at = NULL, deadline_at = NULL WHERE id = 'twice'`); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Logf("the claim was lost in the crash: the job is %s", status)
	}

	// The job is delivered again, as the same attempt, to the worker's
	// other slot.
	agqtest.Eventually(t, 30*time.Second, func() error {
		return second.Do(ctx, "WORKER.HEARTBEAT", "w").Err()
	})
	d2 := pop(second)
	if d2.Attempt != d1.Attempt || d2.Delivery == d1.Delivery {
		t.Fatalf("deliveries %+v then %+v: want the same attempt with a new token", d1, d2)
	}
	stale := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, d1.Attempt, d1.Delivery)
	err = first.Do(ctx, "JOB.UPDATE", "twice", stale).Err()
	if err == nil || !strings.Contains(err.Error(), "was delivered again") {
		t.Fatalf("the first delivery's report after the crash: %v, want it refused", err)
	}
	fresh := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, d2.Attempt, d2.Delivery)
	if err := second.Do(ctx, "JOB.UPDATE", "twice", fresh).Err(); err != nil {
		t.Fatalf("the new delivery's report: %v", err)
	}
	raw := mustText(ctx, t, admin, "JOB.GET", "twice")
	if !strings.Contains(raw, `"status":"completed"`) {
		t.Fatalf("the job: %s", raw)
	}
	srv.stop(t)
}
