package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// awaitingJob submits a job, pops it as a registered worker and makes it
// wait for the signal named approve; it answers the worker's key.
func awaitingJob(ctx context.Context, t *testing.T, srv *agqProcess, admin *redis.Client, id string) string {
	t.Helper()
	key := mustText(ctx, t, admin, "KEY.CREATE", "worker", "waiter")
	mustText(ctx, t, admin, "JOB.SUBMIT", `{"job_id":"`+id+`","queue":"waits","type":"wait"}`)
	w := redis.NewClient(srv.clientOptions("waiter", key))
	defer w.Close()
	mustText(ctx, t, w, "WORKER.REGISTER", waiterRegistration)
	delivery := popDelivery(ctx, t, w)
	if got := mustText(ctx, t, w, "STEP.WAIT", id, "approval", "SIGNAL", "approve", "DELIVERY", delivery); got != "AWAITING never" {
		t.Fatalf("STEP.WAIT = %q", got)
	}
	return key
}

const waiterRegistration = `{"worker_id":"waiter","hostname":"h","agw_version":"1","capabilities":{"tools":[],"types":["wait"]}}`

// popDelivery pops the waits queue's next job and answers its delivery token.
func popDelivery(ctx context.Context, t *testing.T, w *redis.Client) string {
	t.Helper()
	v, err := w.BRPop(ctx, 20*time.Second, "queue:waits").Result()
	if err != nil || len(v) != 2 {
		t.Fatalf("BRPOP: %v %v", v, err)
	}
	var job struct {
		Delivery string `json:"delivery"`
	}
	if err := json.Unmarshal([]byte(v[1]), &job); err != nil || job.Delivery == "" {
		t.Fatalf("popped %s: %v", v[1], err)
	}
	return job.Delivery
}

// resumeWait pops the woken job as a worker of key on srv and checks that
// its wait answers the signal.
func resumeWait(ctx context.Context, t *testing.T, srv *agqProcess, key, id, want string) {
	t.Helper()
	w := redis.NewClient(srv.clientOptions("waiter", key))
	defer w.Close()
	mustText(ctx, t, w, "WORKER.REGISTER", waiterRegistration)
	delivery := popDelivery(ctx, t, w)
	if got := mustText(ctx, t, w, "STEP.WAIT", id, "approval", "SIGNAL", "approve", "DELIVERY", delivery); got != want {
		t.Fatalf("STEP.WAIT after the wake = %s, want %s", got, want)
	}
}

// agq killed (SIGKILL) right after JOB.SIGNAL answered OK: the signal and
// the wake it made are kept, and the job is delivered after the restart
// with its wait answering the signal.
func TestASignalAnsweredOKSurvivesAKillOfAgq(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := newAgqProcess(t, buildAgq(t), agqtest.NewDatabase(t))
	srv.start(ctx)
	admin := redis.NewClient(srv.clientOptions("", srv.adminKey))
	defer admin.Close()
	key := awaitingJob(ctx, t, srv, admin, "approve-me")
	mustText(ctx, t, admin, "JOB.SIGNAL", "approve-me", "approve", `{"by":"ann"}`, "ID", "a-1")
	srv.kill()

	db, err := pgx.Connect(ctx, srv.databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	var status string
	if err := db.QueryRow(ctx, `SELECT status FROM jobs_all WHERE id = 'approve-me'`).Scan(&status); err != nil || status != "queued" {
		t.Fatalf("the job after the kill: %q %v, want queued", status, err)
	}

	srv.start(ctx)
	admin2 := redis.NewClient(srv.clientOptions("", srv.adminKey))
	defer admin2.Close()
	// Re-sent after the crash, the signal is stored once.
	mustText(ctx, t, admin2, "JOB.SIGNAL", "approve-me", "approve", `{"by":"ann"}`, "ID", "a-1")
	resumeWait(ctx, t, srv, key, "approve-me", `{"signal":"approve","payload":{"by":"ann"}}`)
	srv.stop(t)
}

// PostgreSQL restarted while a job awaits: the wait outlives it, and a
// signal sent afterwards wakes the job.
func TestAWaitOutlivesAPostgresRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := agqtest.OwnCluster(t, nil)
	srv := newAgqProcess(t, buildAgq(t), cl.ConnString("postgres"))
	srv.start(ctx)
	admin := redis.NewClient(srv.clientOptions("", srv.adminKey))
	defer admin.Close()
	key := awaitingJob(ctx, t, srv, admin, "outlives")

	if err := cl.Crash(); err != nil {
		t.Fatalf("stopping postgres: %v", err)
	}
	time.Sleep(time.Second)
	if err := cl.Start(ctx); err != nil {
		t.Fatalf("starting postgres: %v", err)
	}
	agqtest.Eventually(t, 60*time.Second, func() error {
		return admin.Do(ctx, "JOB.SIGNAL", "outlives", "approve", `"late"`, "ID", "after-restart").Err()
	})
	resumeWait(ctx, t, srv, key, "outlives", `{"signal":"approve","payload":"late"}`)
	srv.stop(t)
}
