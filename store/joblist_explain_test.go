package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// JOB.LIST reads history through indexes that yield ids in order, so a
// page ends at its limit whatever history holds: planned over 300,000
// jobs in three periods of history, a status that never ends up there
// reads none of it, and a rare queue or status reads a page's worth of
// each queue's and status's index instead of all of history.
func TestJobListOverHistoryReadsAPage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := agqtest.NewDatabase(t)
	full := connect(ctx, t, url)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := store.ForPool(pool)
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 3)
	for i, suffix := range []string{"la", "lb", "lc"} {
		lo := day.AddDate(0, 0, i)
		if err := st.PeriodCreate(ctx, lo, lo.AddDate(0, 0, 1), suffix); err != nil {
			t.Fatal(err)
		}
	}
	for _, sql := range []string{`
		INSERT INTO queues (name) VALUES ('email'), ('etl'), ('audit'), ('burn')`, `
		INSERT INTO jobs_history (expires_at, id, seq, queue, type, status, attempt, max_attempts, timeout_seconds, finished_at)
		SELECT $1::timestamptz + (g % 3) * interval '1 day' + interval '1 hour', 'h' || lpad(g::text, 7, '0'), g,
			CASE WHEN g % 1000 = 0 THEN 'audit' WHEN g % 5 < 3 THEN 'email' ELSE 'etl' END, 't',
			CASE WHEN g % 1000 = 0 OR g % 100 > 4 THEN 'completed' WHEN g % 100 = 0 THEN 'cancelled' ELSE 'failed' END,
			1, 3, 3600, now() - interval '1 day'
		FROM generate_series(1, 300000) g`, `
		INSERT INTO history_counts SELECT namespace, queue, status, date_trunc('day', expires_at), count(*)
		FROM jobs_history GROUP BY 1, 2, 3, 4`, `
		INSERT INTO jobs (id, queue, type, status, attempt, max_attempts, timeout_seconds, worker_id, delivery)
		SELECT 'j' || lpad(g::text, 7, '0'), CASE WHEN g % 2 = 0 THEN 'burn' ELSE 'email' END, 't',
			CASE WHEN g % 3 = 0 THEN 'running' ELSE 'queued' END, CASE WHEN g % 3 = 0 THEN 1 ELSE 0 END, 3, 3600,
			CASE WHEN g % 3 = 0 THEN 'worker-1' END, CASE WHEN g % 3 = 0 THEN gen_random_uuid() END
		FROM generate_series(1, 3000) g`,
		`ANALYZE`} {
		var args []any
		if strings.Contains(sql, "$1") {
			args = append(args, day)
		}
		if _, err := full.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("preparing the data: %v\n%s", err, sql)
		}
	}
	rec := newRecordingStore(ctx, t)
	list := func(p records.JobListParams) func(context.Context, *store.Store) error {
		return func(ctx context.Context, st *store.Store) error {
			_, err := st.JobList(ctx, p)
			return err
		}
	}
	const jobsIndexes = "jobs_pkey|jobs_queue_status|jobs_unfinished|jobs_running|jobs_finished"
	checkPlans(ctx, t, full, rec, []explainCase{
		{name: "RunningJobsReadNoHistory", run: list(records.JobListParams{Status: "running", Limit: 100}),
			match: "ORDER BY id LIMIT", index: jobsIndexes, maxScanned: 3000},
		{name: "AQueuesQueuedJobsReadNoHistory", run: list(records.JobListParams{Queue: "burn", Status: "queued", Limit: 1}),
			match: "ORDER BY id LIMIT", index: jobsIndexes, maxScanned: 3000},
		// 3,000 of them, behind 297,000 others in id order.
		{name: "ARareStatusReadsAPageOfEachQueue", run: list(records.JobListParams{Status: "cancelled", Limit: 100}),
			match: "ORDER BY id LIMIT", index: jobsIndexes, maxScanned: 3000},
		// 300 of them.
		{name: "ARareQueueReadsAPageOfEachStatus", run: list(records.JobListParams{Queue: "audit", Limit: 100}),
			match: "ORDER BY id LIMIT", index: jobsIndexes, maxScanned: 3000},
		{name: "AQueueWithNoHistoryReadsNone", run: list(records.JobListParams{Queue: "burn", Status: "completed", Limit: 100}),
			match: "ORDER BY id LIMIT", index: jobsIndexes, maxScanned: 3000},
		{name: "EveryJobReadsAPage", run: list(records.JobListParams{Limit: 100}),
			match: "ORDER BY id LIMIT", index: "jobs_pkey", maxScanned: 3000},
	})
}
