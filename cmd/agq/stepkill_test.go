package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// agq killed (SIGKILL) while a worker completes steps: every step answered
// OK is kept, and after the restart the same delivery carries on from the
// step it was at, the completed ones answering their outputs.
func TestKillDuringStepCompletionsKeepsEveryStepAnswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := newAgqProcess(t, buildAgq(t), agqtest.NewDatabase(t))
	srv.start(ctx)
	admin := redis.NewClient(srv.clientOptions("", srv.adminKey))
	defer admin.Close()
	key := mustText(ctx, t, admin, "KEY.CREATE", "worker", "stepper")
	mustText(ctx, t, admin, "JOB.SUBMIT", `{"job_id":"many-steps","queue":"steps","type":"steps","timeout_seconds":600}`)

	w := redis.NewClient(srv.clientOptions("stepper", key))
	defer w.Close()
	reg := `{"worker_id":"stepper","hostname":"h","agw_version":"1","capabilities":{"tools":[],"types":["steps"]}}`
	mustText(ctx, t, w, "WORKER.REGISTER", reg)
	raw := mustText(ctx, t, w, "RPOP", "queue:steps")
	var job struct {
		Delivery string `json:"delivery"`
	}
	if err := json.Unmarshal([]byte(raw), &job); err != nil || job.Delivery == "" {
		t.Fatalf("popped %s: %v", raw, err)
	}

	const killAfter = 100
	completed := 0 // steps answered OK
	killed := make(chan struct{})
	for i := 0; ; i++ {
		step := fmt.Sprintf("s-%d", i)
		if err := w.Do(ctx, "STEP.BEGIN", "many-steps", step, "DELIVERY", job.Delivery).Err(); err != nil {
			break
		}
		if err := w.Do(ctx, "STEP.COMPLETE", "many-steps", step, fmt.Sprintf(`{"n":%d}`, i), "DELIVERY", job.Delivery).Err(); err != nil {
			break
		}
		if completed++; completed == killAfter {
			go func() { srv.kill(); close(killed) }() // while the worker goes on
		}
		if i > 100*killAfter {
			t.Fatal("agq answered long after it was killed")
		}
	}
	if completed < killAfter {
		t.Fatalf("only %d steps completed before the kill", completed)
	}
	<-killed

	db, err := pgx.Connect(ctx, srv.databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	var kept int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM job_steps WHERE job_id = 'many-steps' AND status = 'completed'`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept < completed {
		t.Fatalf("%d steps answered OK, %d kept", completed, kept)
	}

	// The same delivery carries on: a completed step answers its output.
	srv.start(ctx)
	w2 := redis.NewClient(srv.clientOptions("stepper", key))
	defer w2.Close()
	mustText(ctx, t, w2, "WORKER.REGISTER", reg)
	last := fmt.Sprintf("s-%d", completed-1)
	got := mustText(ctx, t, w2, "STEP.BEGIN", "many-steps", last, "DELIVERY", job.Delivery)
	if want := fmt.Sprintf(`{"execute":false,"output":{"n":%d}}`, completed-1); got != want {
		t.Fatalf("STEP.BEGIN %s after the restart = %s, want %s", last, got, want)
	}
}

// A durable sleep outlives agq: killed (SIGKILL) while the job sleeps,
// agq restarted wakes it on time, and the same call then answers OK.
func TestASleepWakesOnTimeAcrossAnAgqRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := newAgqProcess(t, buildAgq(t), agqtest.NewDatabase(t))
	srv.start(ctx)
	admin := redis.NewClient(srv.clientOptions("", srv.adminKey))
	defer admin.Close()
	key := mustText(ctx, t, admin, "KEY.CREATE", "worker", "sleeper")
	mustText(ctx, t, admin, "JOB.SUBMIT", `{"job_id":"nap","queue":"naps","type":"nap"}`)
	reg := `{"worker_id":"sleeper","hostname":"h","agw_version":"1","capabilities":{"tools":[],"types":["nap"]}}`
	pop := func(c *redis.Client) string {
		t.Helper()
		v, err := c.BRPop(ctx, 20*time.Second, "queue:naps").Result()
		if err != nil || len(v) != 2 {
			t.Fatalf("BRPOP: %v %v", v, err)
		}
		var job struct {
			Delivery string `json:"delivery"`
		}
		if err := json.Unmarshal([]byte(v[1]), &job); err != nil {
			t.Fatal(err)
		}
		return job.Delivery
	}

	w := redis.NewClient(srv.clientOptions("sleeper", key))
	defer w.Close()
	mustText(ctx, t, w, "WORKER.REGISTER", reg)
	d := pop(w)
	slept := time.Now()
	if got := mustText(ctx, t, w, "STEP.SLEEP", "nap", "wait", "3", "DELIVERY", d); len(got) < 9 || got[:9] != "SLEEPING " {
		t.Fatalf("STEP.SLEEP = %q", got)
	}
	srv.kill()
	srv.start(ctx)

	w2 := redis.NewClient(srv.clientOptions("sleeper", key))
	defer w2.Close()
	mustText(ctx, t, w2, "WORKER.REGISTER", reg)
	d2 := pop(w2)
	if woke := time.Since(slept); woke < 3*time.Second || woke > 8*time.Second {
		t.Fatalf("the job woke after %v, not on its 3 s", woke)
	}
	if got := mustText(ctx, t, w2, "STEP.SLEEP", "nap", "wait", "3", "DELIVERY", d2); got != "OK" {
		t.Fatalf("STEP.SLEEP after the wake = %q, want OK", got)
	}
}
