package commands_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

func fastHeartbeats(c *config.Config) { c.HeartbeatInterval = time.Second }

func TestSilentWorkerIsDeadAndItsJobGoesToAnother(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, fastHeartbeats)
	ctx := context.Background()
	admin := a.Admin(t)
	silent := registerWorker(t, a, "silent", "t")
	alive := registerWorker(t, a, "alive", "t")
	id := submit(t, admin, map[string]any{"type": "t"})
	if _, d, ok := silent.pop(t, "1", "ready"); !ok || d.JobID != id {
		t.Fatalf("pop: %+v", d)
	}
	if err := silent.update(ctx, id, map[string]any{"status": "running"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// alive keeps heartbeating while it waits; silent never does again.
	defer alive.keepHeartbeating()()
	_, d, ok := alive.pop(t, "10", "ready")
	if !ok || d.JobID != id || d.Attempt != 2 {
		t.Fatalf("the other worker got %+v (ok=%v), want %s at attempt 2", d, ok, id)
	}
	elapsed := time.Since(start)
	t.Logf("job re-delivered %v after its worker went silent", elapsed)
	if elapsed > 6*time.Second {
		t.Fatalf("dead worker's job came back after %v", elapsed)
	}
	state, err := admin.Do(ctx, "WORKER.LIST", "DEAD").StringSlice()
	if err != nil || len(state) != 1 || state[0] != "silent" {
		t.Fatalf("WORKER.LIST DEAD = %v, %v", state, err)
	}
	err = silent.update(ctx, id, map[string]any{"status": "completed"})
	if err == nil || err.Error() != fmt.Sprintf("ERR job %s is owned by alive", id) {
		t.Fatalf("the dead worker's late update: %v", err)
	}
	raw, _ := admin.Do(ctx, "JOB.GET", id).Text()
	if !strings.Contains(raw, "worker silent was lost while holding the job") {
		t.Fatalf("error history does not say why: %s", raw)
	}
}

func TestJobPastItsTimeoutFailsTheAttemptAndRetries(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, fastHeartbeats)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "slow", "t")
	id := submit(t, admin, map[string]any{"type": "t", "timeout_seconds": 1, "retry_backoff_seconds": 0.1})
	if _, d, ok := w.pop(t, "1", "ready"); !ok || d.JobID != id {
		t.Fatalf("pop: %+v", d)
	}
	if err := w.update(ctx, id, map[string]any{"status": "running"}); err != nil {
		t.Fatal(err)
	}
	// The worker keeps heartbeating: only the timeout can end the attempt.
	defer w.keepHeartbeating()()
	_, d, ok := w.pop(t, "10", "ready")
	if !ok || d.JobID != id || d.Attempt != 2 {
		t.Fatalf("retry: %+v ok=%v", d, ok)
	}
	raw, _ := admin.Do(ctx, "JOB.GET", id).Text()
	if !strings.Contains(raw, "timed out after 1 seconds") {
		t.Fatalf("error history: %s", raw)
	}
	worker, _ := admin.Do(ctx, "WORKER.GET", "slow").Text()
	if !strings.Contains(worker, `"timed_out_jobs":1`) {
		t.Fatalf("worker not flagged: %s", worker)
	}
}

func TestCancelledJobNeverAcknowledgedEndsCancelledAtLeaseExpiry(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, fastHeartbeats)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "gone", "t")
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
	raw, err := admin.Do(ctx, "JOB.WAIT", id, "10").Text()
	if err != nil || !strings.Contains(raw, `"status":"cancelled"`) || !strings.Contains(raw, `"attempt":1`) {
		t.Fatalf("JOB.WAIT = %s, %v", raw, err)
	}
}

func TestInfoShowsLeaderQueuesWorkersAndJobs(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	registerWorker(t, a, "w", "t")
	submit(t, admin, map[string]any{"type": "t", "queue": "mail"})
	agqtest.Eventually(t, 10*time.Second, func() error {
		info, err := admin.Info(ctx).Result()
		if err != nil {
			return err
		}
		for _, want := range []string{"is_leader:1", "leader_node_id:" + a.Node.ID, "queue_mail:queued=1", "workers_active:1", "jobs_queued:1"} {
			if !strings.Contains(info, want) {
				return fmt.Errorf("INFO lacks %q:\n%s", want, info)
			}
		}
		return nil
	})
}

// keepHeartbeating heartbeats every 200ms until the returned stop is called.
func (w *testWorker) keepHeartbeating() (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
				w.c.Do(context.Background(), "WORKER.HEARTBEAT", w.id)
			}
		}
	}()
	return func() { close(done); <-exited }
}

// A job whose wake-up was never sent (its node died between the commit and
// the notice) still reaches a blocked pop: the node re-checks the queues
// its clients wait on.
func TestABlockedPopFindsAJobWhoseWakeUpWasLost(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	w := registerWorker(t, a, "w", "t")
	got := make(chan string, 1)
	start := time.Now()
	go func() {
		res, err := w.c.Do(ctx, "BRPOP", "queue:lost", "40").StringSlice()
		if err != nil {
			got <- err.Error()
			return
		}
		got <- res[1]
	}()
	// Submitted straight through the store: nobody publishes its note.
	st, err := store.Open(ctx, store.Config{URL: a.DatabaseURL})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	time.Sleep(200 * time.Millisecond) // the pop is blocked by now
	if _, _, err := st.JobsSubmit(ctx, []records.NewJob{{ID: "lost-note", Queue: "lost", Type: "t", MaxAttempts: 3, TimeoutSeconds: 60}}); err != nil {
		t.Fatal(err)
	}
	select {
	case job := <-got:
		if !strings.Contains(job, `"job_id":"lost-note"`) {
			t.Fatalf("BRPOP = %s", job)
		}
		t.Logf("the job reached the blocked pop %v after it blocked", time.Since(start).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the blocked pop never got the job whose wake-up was lost")
	}
}

// A report refused about a waiting job, or a JOB.RETRY of one, held the
// job's row for a moment, while claims pass over locked rows: a pop that
// looked then found nothing. Their end wakes the queue's pops, so the job
// is not left waiting for the periodic re-check.
func TestWhatHoldsAWaitingJobForAMomentWakesItsQueue(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "locked-w", "t")
	popper := a.Client(t, redis.Options{Username: "locked-w", Password: w.c.Options().Password, ReadTimeout: time.Minute, MaxRetries: -1})
	for _, tc := range []struct {
		name  string
		hold  func(id string) error
		check func(error) bool
	}{
		{"a refused report", func(id string) error { return w.update(ctx, id, map[string]any{"status": "completed"}) },
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "queued") }},
		{"JOB.RETRY", func(id string) error { return admin.Do(ctx, "JOB.RETRY", id).Err() },
			func(err error) bool { return err == nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := submit(t, admin, map[string]any{"queue": "locked", "type": "t"})
			db, err := pgx.Connect(ctx, a.DatabaseURL)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close(ctx)
			tx, err := db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, id); err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 1)
			go func() {
				res, err := popper.Do(ctx, "BRPOP", "queue:locked", "30").StringSlice()
				if err != nil {
					got <- err.Error()
					return
				}
				got <- res[1]
			}()
			awaitBlockedPop(t, a) // its claim passed over the locked job
			held := make(chan error, 1)
			go func() { held <- tc.hold(id) }()
			time.Sleep(200 * time.Millisecond) // waiting for the row
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			if err := <-held; !tc.check(err) {
				t.Fatalf("%s of a waiting job answered %v", tc.name, err)
			}
			select {
			case job := <-got:
				if !strings.Contains(job, `"job_id":"`+id+`"`) {
					t.Fatalf("BRPOP = %s", job)
				}
				t.Logf("popped %v after the row was released", time.Since(released).Round(time.Millisecond))
			case <-time.After(5 * time.Second):
				t.Fatal("the waiting job did not reach the blocked pop once its row was let go")
			}
		})
	}
}
