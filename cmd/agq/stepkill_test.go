package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
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

// PostgreSQL restarted (an immediate shutdown, its WAL writer slow so that
// nothing it had not flushed for a commit survives) while workers complete
// steps: every step answered OK is kept, and the same deliveries carry on
// afterwards, each completed step answering its output.
func TestPostgresRestartDuringStepCompletionsKeepsEveryStepAnswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := agqtest.OwnCluster(t, map[string]string{"wal_writer_delay": "10s"})
	srv := newAgqProcess(t, buildAgq(t), cl.ConnString("postgres"))
	srv.start(ctx)
	admin := redis.NewClient(srv.clientOptions("", srv.adminKey))
	defer admin.Close()
	key := mustText(ctx, t, admin, "KEY.CREATE", "worker", "stepper")
	w := redis.NewClient(srv.clientOptions("stepper", key))
	defer w.Close()
	mustText(ctx, t, w, "WORKER.REGISTER", `{"worker_id":"stepper","hostname":"h","agw_version":"1",`+
		`"capabilities":{"tools":[],"types":["steps"]},"max_concurrent_jobs":4}`)

	// Four jobs, each stepped on a connection of its own, so that
	// completions share commits as they do under load.
	const jobs = 4
	deliveries := make([]string, jobs)
	for j := range deliveries {
		mustText(ctx, t, admin, "JOB.SUBMIT", fmt.Sprintf(`{"job_id":"steps-%d","queue":"steps","type":"steps","timeout_seconds":600}`, j))
		var job struct {
			Delivery string `json:"delivery"`
		}
		if err := json.Unmarshal([]byte(mustText(ctx, t, w, "RPOP", "queue:steps")), &job); err != nil || job.Delivery == "" {
			t.Fatalf("popping job %d: %v", j, err)
		}
		deliveries[j] = job.Delivery
	}

	var phase atomic.Int32 // 0 before the restart, 1 during, 2 after
	var okBefore, okAfter [jobs]atomic.Int64
	answered := make([][]int, jobs) // per job, the steps answered OK
	stepping, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(srv.clientOptions("stepper", key))
			defer c.Close()
			id := fmt.Sprintf("steps-%d", j)
			for i := 0; stepping.Err() == nil; i++ {
				step := fmt.Sprintf("s-%d", i)
				if c.Do(stepping, "STEP.BEGIN", id, step, "DELIVERY", deliveries[j]).Err() != nil {
					time.Sleep(20 * time.Millisecond) // PostgreSQL is away
					continue
				}
				if c.Do(stepping, "STEP.COMPLETE", id, step, fmt.Sprintf(`{"n":%d}`, i), "DELIVERY", deliveries[j]).Err() != nil {
					continue
				}
				answered[j] = append(answered[j], i)
				switch phase.Load() {
				case 0:
					okBefore[j].Add(1)
				case 2:
					okAfter[j].Add(1)
				}
			}
		}()
	}
	streaming := func(counts *[jobs]atomic.Int64) func() error {
		return func() error {
			for j := range jobs {
				if n := counts[j].Load(); n < 50 {
					return fmt.Errorf("job %d: %d steps answered OK", j, n)
				}
			}
			return nil
		}
	}
	agqtest.Eventually(t, 30*time.Second, streaming(&okBefore))
	phase.Store(1)
	if err := cl.Crash(); err != nil {
		t.Fatalf("stopping postgres: %v", err)
	}
	time.Sleep(time.Second)
	if err := cl.Start(ctx); err != nil {
		t.Fatalf("starting postgres: %v", err)
	}
	phase.Store(2)
	agqtest.Eventually(t, 60*time.Second, streaming(&okAfter))
	stop()
	wg.Wait()

	for j := range jobs {
		id := fmt.Sprintf("steps-%d", j)
		type step struct {
			StepID string          `json:"step_id"`
			Status string          `json:"status"`
			Output json.RawMessage `json:"output"`
		}
		var steps []step
		for {
			var page []step
			raw := mustText(ctx, t, admin, "JOB.STEPS", id, "CURSOR", len(steps), "LIMIT", 1000)
			if err := json.Unmarshal([]byte(raw), &page); err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			steps = append(steps, page...)
		}
		completed := map[string]string{}
		for _, s := range steps {
			if s.Status == "completed" {
				completed[s.StepID] = string(s.Output)
			}
		}
		for _, i := range answered[j] {
			step := fmt.Sprintf("s-%d", i)
			if out := completed[step]; out != fmt.Sprintf(`{"n":%d}`, i) {
				t.Fatalf("%s: step %s answered OK, JOB.STEPS shows it with output %q", id, step, out)
			}
		}
		// The delivery carries on: the last step answered before the
		// restart, and the last one overall, answer their outputs.
		last := answered[j][len(answered[j])-1]
		for _, i := range []int{answered[j][okBefore[j].Load()-1], last} {
			got := mustText(ctx, t, w, "STEP.BEGIN", id, fmt.Sprintf("s-%d", i), "DELIVERY", deliveries[j])
			if want := fmt.Sprintf(`{"execute":false,"output":{"n":%d}}`, i); got != want {
				t.Fatalf("%s: STEP.BEGIN s-%d after the restart = %s, want %s", id, i, got, want)
			}
		}
		t.Logf("%s: %d steps answered OK before the restart, %d in all", id, okBefore[j].Load(), len(answered[j]))
	}
	srv.stop(t)
}
