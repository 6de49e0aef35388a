package watchdog_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/clock"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
	"github.com/agq/agq/watchdog"
)

func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{URL: agqtest.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// submit adds a queued job.
func submit(t *testing.T, st *store.Store, id string) {
	t.Helper()
	job := records.NewJob{ID: id, Queue: "q", MaxAttempts: 3, RetryBackoffSeconds: 1, TimeoutSeconds: 3600}
	if _, _, err := st.JobsSubmit(context.Background(), []records.NewJob{job}); err != nil {
		t.Fatal(err)
	}
}

// arrange sets a job's columns directly: the state the watchdog finds is
// what is tested.
func arrange(t *testing.T, st *store.Store, id, set string) {
	t.Helper()
	if _, err := st.Pool.Exec(context.Background(), `UPDATE jobs SET `+set+` WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

func status(t *testing.T, st *store.Store, id string) string {
	t.Helper()
	var s string
	err := st.Pool.QueryRow(context.Background(), `SELECT coalesce((SELECT status FROM jobs_all WHERE id = $1 LIMIT 1), 'deleted')`, id).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func runOnce(t *testing.T, w *watchdog.Watchdog) {
	t.Helper()
	if err := w.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestUnackedDeliveriesWaitForAFullWindowAfterStart(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	submit(t, st, "unacked")
	// Delivered long ago, and never acknowledged: while this watchdog
	// was not running, the worker's acknowledgement could have failed.
	arrange(t, st, "unacked", `status = 'running', worker_id = 'w', attempt = 1,
		ack_deadline = now() - interval '1 hour', lease_expires_at = now() + interval '1 hour',
		deadline_at = now() + interval '1 hour'`)
	fake := clock.NewFake(time.Date(2031, 5, 4, 12, 0, 0, 0, time.UTC))
	w := watchdog.New(watchdog.Config{Store: st, Clock: fake, AckTimeout: 30 * time.Second})

	runOnce(t, w)
	fake.Advance(29 * time.Second)
	runOnce(t, w)
	if s := status(t, st, "unacked"); s != "running" {
		t.Fatalf("within the grace after start the job is %s, want running", s)
	}
	fake.Advance(time.Second)
	runOnce(t, w)
	if s := status(t, st, "unacked"); s != "queued" {
		t.Fatalf("a full ack window after start the job is %s, want queued", s)
	}
}

// duePeriod makes a history period an hour past, holding one job, id:
// what retention finds once the job's retention ran out.
func duePeriod(t *testing.T, st *store.Store, suffix, id string) {
	t.Helper()
	ctx := context.Background()
	lo := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	for _, table := range []string{"jobs_history", "job_steps_history", "job_logs_history", "job_signals_history"} {
		if _, err := st.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s_%s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
			table, suffix, table, lo.Format(time.RFC3339), lo.Add(time.Hour).Format(time.RFC3339))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Pool.Exec(ctx, `INSERT INTO history_periods (lo, hi, suffix) VALUES ($1, $2, $3)`, lo, lo.Add(time.Hour), suffix); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `
		INSERT INTO jobs_history (expires_at, namespace, id, seq, queue, status, max_attempts, timeout_seconds, finished_at)
		VALUES ($1, 'default', $2, 1, 'q', 'completed', 1, 60, now() - interval '8 days')`, lo.Add(time.Minute), id); err != nil {
		t.Fatal(err)
	}
}

func TestRetentionRunsOncePerRetentionEvery(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	fake := clock.NewFake(time.Date(2031, 5, 4, 12, 0, 0, 0, time.UTC))
	w := watchdog.New(watchdog.Config{Store: st, Clock: fake, RetentionEvery: time.Minute})
	runOnce(t, w) // the first sweep's retention pass; nothing to expire yet

	duePeriod(t, st, "due", "old")
	fake.Advance(59 * time.Second)
	runOnce(t, w)
	if s := status(t, st, "old"); s != "completed" {
		t.Fatalf("retention ran again before a minute had passed: the job is %s", s)
	}
	fake.Advance(time.Second)
	runOnce(t, w)
	if s := status(t, st, "old"); s != "deleted" {
		t.Fatalf("a minute after the last retention pass the job is %s, want deleted", s)
	}
}

// Finished jobs move into history expiring at their retention past their
// end (now, for those already past it); the others stay.
func TestFinishedJobsMoveIntoHistoryByTheirRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)

	// Each job: its final status (or a waiting/running one) and how long
	// ago it finished (or was created).
	jobs := []struct {
		id, status string
		age        time.Duration
	}{
		{"completed-8d", "completed", 8 * 24 * time.Hour},
		{"completed-6d", "completed", 6 * 24 * time.Hour},
		{"failed-31d", "failed", 31 * 24 * time.Hour},
		{"failed-20d", "failed", 20 * 24 * time.Hour},
		{"cancelled-31d", "cancelled", 31 * 24 * time.Hour},
		{"queued-90d", "queued", 90 * 24 * time.Hour},
		{"running-90d", "running", 90 * 24 * time.Hour},
		{"retrying-90d", "retrying", 90 * 24 * time.Hour},
	}
	var batch []records.NewJob
	for _, j := range jobs {
		batch = append(batch, records.NewJob{ID: j.id, Queue: "q", MaxAttempts: 3, RetryBackoffSeconds: 1, TimeoutSeconds: 3600})
	}
	if _, _, err := st.JobsSubmit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		// Arrange the job's history directly: the ages are what is tested.
		_, err := st.Pool.Exec(ctx, `
			UPDATE jobs SET status = $2, created_at = now() - $3::interval,
				finished_at = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN now() - $3::interval END,
				worker_id = CASE WHEN $2 = 'running' THEN 'w' END,
				lease_expires_at = CASE WHEN $2 = 'running' THEN now() + interval '1 hour' END,
				deadline_at = CASE WHEN $2 = 'running' THEN now() + interval '1 hour' END,
				run_at = CASE WHEN $2 = 'retrying' THEN now() + interval '1 hour' ELSE run_at END
			WHERE id = $1`, j.id, j.status, j.age)
		if err != nil {
			t.Fatal(err)
		}
	}
	w := watchdog.New(watchdog.Config{Store: st, HistoryBatch: 2}) // small batches: several statements
	if err := w.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		var table string
		var left float64 // seconds until it expires
		err := st.Pool.QueryRow(ctx, `
			SELECT 'jobs', 0::float8 FROM jobs WHERE id = $1
			UNION ALL SELECT 'history', extract(epoch FROM expires_at - now())::float8 FROM jobs_history WHERE id = $1`, j.id).Scan(&table, &left)
		if err != nil {
			t.Fatalf("%s: %v", j.id, err)
		}
		finished := j.status == "completed" || j.status == "failed" || j.status == "cancelled"
		retain := 7 * 24 * time.Hour
		if j.status != "completed" {
			retain = 30 * 24 * time.Hour
		}
		want := max(retain-j.age, 0).Seconds()
		switch {
		case !finished && table != "jobs":
			t.Errorf("%s (%s) moved into history", j.id, j.status)
		case finished && table != "history":
			t.Errorf("%s (%s) stayed in jobs", j.id, j.status)
		case finished && (left < want-60 || left > want+60):
			t.Errorf("%s expires in %.0f s, want %.0f", j.id, left, want)
		}
	}
}

// A server restarted with another retention applies it to the jobs
// already in history within a sweep.
func TestAChangedRetentionReachesHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	if _, _, err := st.JobsSubmit(ctx, []records.NewJob{{ID: "done-2d", Queue: "q", MaxAttempts: 3, RetryBackoffSeconds: 1, TimeoutSeconds: 3600}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE jobs SET status = 'completed', finished_at = now() - interval '2 days' WHERE id = 'done-2d'`); err != nil {
		t.Fatal(err)
	}
	left := func() time.Duration {
		t.Helper()
		var s float64
		if err := st.Pool.QueryRow(ctx, `SELECT extract(epoch FROM expires_at - now())::float8 FROM jobs_history WHERE id = 'done-2d'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return time.Duration(s * float64(time.Second))
	}
	for _, c := range []struct{ retain, left time.Duration }{
		{7 * 24 * time.Hour, 5 * 24 * time.Hour},
		{3 * 24 * time.Hour, 24 * time.Hour},
		{40 * 24 * time.Hour, 38 * 24 * time.Hour},
	} {
		w := watchdog.New(watchdog.Config{Store: st, RetainCompleted: c.retain})
		if err := w.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if got := left(); got < c.left-time.Minute || got > c.left+time.Minute {
			t.Errorf("retention %v: the job expires in %v, want %v", c.retain, got, c.left)
		}
	}
}
