package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/store"
)

// A step's completion leaves every column job_steps' indexes read as it
// was (migration 033): completions update their rows in place (HOT),
// writing no index entry, where their pages have room.
func TestStepCompletionsAreHOTUpdates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connect(ctx, t, agqtest.NewDatabase(t))
	const n = 50
	for _, sql := range []string{`
		INSERT INTO jobs (id, queue, type, status, attempt, max_attempts, timeout_seconds, worker_id, delivery)
		SELECT 'h' || g, 'ready', 't', 'running', 1, 3, 3600, 'worker-1', gen_random_uuid()
		FROM generate_series(1, ` + fmt.Sprint(n) + `) g`, `
		INSERT INTO job_steps (job_id, step_id, ord, kind, status, attempts, max_attempts, retry_backoff_seconds, delivery)
		SELECT j.id, 'first', 1, 'step', 'running', 1, 3, 1, j.delivery FROM jobs j`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("preparing the data: %v\n%s", err, sql)
		}
	}
	var nss, ids, steps, workers []string
	var deliveries, outputs []*string
	var ords []int32
	for i := range n {
		nss, ids, steps, workers = append(nss, "default"), append(ids, fmt.Sprintf("h%d", i+1)), append(steps, "first"), append(workers, "worker-1")
		out := fmt.Sprintf(`{"n":%d}`, i)
		deliveries, outputs, ords = append(deliveries, nil), append(outputs, &out), append(ords, int32(i))
	}
	// In groups of five, each its own transaction, as agq sends them: a
	// page keeps room for some new versions (its fill factor), and each
	// group's leaves the old ones for the next to prune.
	hot := 0
	for lo := 0; lo < n; lo += 5 {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hotBefore := hotUpdates(ctx, t, tx)
		tag, err := tx.Exec(ctx, store.CompleteStepsGroupedSQL, nss[lo:lo+5], ids[lo:lo+5], steps[lo:lo+5], workers[lo:lo+5],
			deliveries[lo:lo+5], outputs[lo:lo+5], ords[:5])
		if err != nil || tag.RowsAffected() != 5 {
			t.Fatalf("completed %d steps: %v", tag.RowsAffected(), err)
		}
		hot += hotUpdates(ctx, t, tx) - hotBefore
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A new version goes beside the old where the page has room, and
	// pruning makes room only once a page is nearly full: a few
	// completions still find theirs full. Before migration 033, none was
	// HOT.
	if hot < n*3/4 {
		t.Errorf("%d of %d completions were HOT updates", hot, n)
	}
}

// hotUpdates is the count of HOT updates of job_steps this connection
// made and has not yet reported to the statistics (within a transaction,
// none is reported).
func hotUpdates(ctx context.Context, t *testing.T, tx pgx.Tx) int {
	t.Helper()
	var k int
	if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_hot_updated('job_steps'::regclass)`).Scan(&k); err != nil {
		t.Fatal(err)
	}
	return k
}

// job_steps_history has expires_at, then job_steps' columns in their
// order (moves copy rows by position), and a recall writes every column
// of job_steps but those generated from others.
func TestStepColumnsAgreeWithTheirHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connect(ctx, t, agqtest.NewDatabase(t))
	columns := func(table, where string) []string {
		rows, err := conn.Query(ctx, `SELECT attname::text FROM pg_attribute
			WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`+where+` ORDER BY attnum`, table)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
		return out
	}
	hot, history := columns("job_steps", ""), columns("job_steps_history", "")
	if want := append([]string{"expires_at"}, hot...); !slices.Equal(history, want) {
		t.Errorf("job_steps_history has columns %v, want %v", history, want)
	}
	if stored := columns("job_steps", " AND attgenerated = ''"); !slices.Equal(store.StepStoredColumns, stored) {
		t.Errorf("a recall writes %v, job_steps stores %v", store.StepStoredColumns, stored)
	}
}
