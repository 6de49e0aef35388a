package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/migrations"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// A database of the schema before history, holding finished jobs with
// steps and log lines and an unfinished one, upgrades: the finished jobs
// move into history with their steps and lines and answer as before; the
// unfinished one stays.
func TestHistoryUpgradeOfAnExistingDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := agqtest.NewEmptyDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE agq_schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.Version >= 28 {
			break
		}
		if _, err := conn.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO agq_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `
		INSERT INTO jobs (id, queue, status, max_attempts, timeout_seconds, result, finished_at)
		SELECT 'old-' || g, 'q', 'completed', 1, 60, '{"n": 1}', now() - interval '1 hour' FROM generate_series(1, 1000) g;
		INSERT INTO jobs (id, queue, status, max_attempts, timeout_seconds) VALUES ('waiting', 'q', 'queued', 1, 60);
		INSERT INTO job_steps (job_id, step_id, ord, kind, status, max_attempts, retry_backoff_seconds, output, completed_at)
		VALUES ('old-1', 's', 1, 'step', 'completed', 1, 1, '"out"', now() - interval '1 hour');
		INSERT INTO job_logs (job_id, attempt, line) VALUES ('old-1', 1, 'a line')`); err != nil {
		t.Fatal(err)
	}

	st, err := store.Open(ctx, store.Config{URL: url, Rules: engine.Decisions{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := migrations.Apply(ctx, st.Pool); err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	moved := 0
	for {
		n, err := st.HistoryMove(ctx, store.HistoryParams{After: time.Second, RetentionParams: store.RetentionParams{
			Completed: 7 * 24 * time.Hour, Failed: 7 * 24 * time.Hour, Limit: 300}})
		if err != nil {
			t.Fatal(err)
		}
		if moved += n; n == 0 {
			break
		}
	}
	if moved != 1000 {
		t.Fatalf("moved %d finished jobs, want 1000", moved)
	}
	j, err := st.JobGet(ctx, "old-1")
	if err != nil || j.Status != records.StatusCompleted || string(j.Result) != `{"n": 1}` || j.Steps != 1 {
		t.Fatalf("old-1 after the upgrade: %+v, %v", j, err)
	}
	lines, _, err := st.JobLogs(ctx, "old-1", 1)
	if err != nil || len(lines) != 1 {
		t.Errorf("old-1's lines: %v, %v", lines, err)
	}
	if j, err := st.JobGet(ctx, "waiting"); err != nil || j.Status != records.StatusQueued {
		t.Errorf("the waiting job: %+v, %v", j, err)
	}
	var inJobs int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&inJobs); err != nil || inJobs != 1 {
		t.Errorf("jobs holds %d rows, want the waiting one (%v)", inJobs, err)
	}
}
