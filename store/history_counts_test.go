package store_test

import (
	"maps"
	"testing"
	"time"

	"github.com/agq/agq/records"
)

// checkCounts compares what INFO, QUEUE.STATS and DBSIZE count (jobs in
// history by their periods' counts) with a count of the jobs themselves.
func (b *trBundle) checkCounts(t *testing.T, when string) {
	t.Helper()
	want := map[string]int64{}
	perQueue := map[string]int64{}
	rows, err := b.st.Pool.Query(b.ctx, `
		SELECT queue, CASE WHEN status IN ('scheduled', 'retrying') AND run_at <= now() THEN 'queued' ELSE status END, count(*)
		FROM jobs_all WHERE namespace = 'default' GROUP BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for rows.Next() {
		var queue, status string
		var n int64
		if err := rows.Scan(&queue, &status, &n); err != nil {
			t.Fatal(err)
		}
		want[status] += n
		perQueue[queue+" "+status] = n
		total += n
	}
	rows.Close()

	got, err := b.st.JobCounts(b.ctx)
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("%s: JobCounts %v (%v), the jobs themselves %v", when, got, err, want)
	}
	qs, err := b.st.QueueStats(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	gotQueues := map[string]int64{}
	for _, q := range qs {
		for status, n := range q.Counts {
			if n > 0 {
				gotQueues[q.Name+" "+status] = n
			}
		}
	}
	if !maps.Equal(gotQueues, perQueue) {
		t.Errorf("%s: QueueStats %v, the jobs themselves %v", when, gotQueues, perQueue)
	}
	if jobs, _, err := b.st.KeyspaceJobCounts(b.ctx); err != nil || jobs != total {
		t.Errorf("%s: KeyspaceJobCounts %d (%v), the jobs themselves %d", when, jobs, err, total)
	}
}

// The counts of finished jobs in history follow the jobs: moved in,
// recalled by a retry, carried forward past a dropped period as the parent
// of an unfinished child, and gone with their period.
func TestHistoryCountsFollowTheJobs(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	parent, child, done, failed := trJob("c-parent", 1, 1), trJob("c-child", 1, 1), trJob("c-done", 1, 1), trJob("c-failed", 1, 1)
	child.After = []string{parent.ID}
	b.submit(t, parent, child, done, failed)
	b.finish(t, parent.ID, records.StatusCompleted, `1`)
	b.finish(t, done.ID, records.StatusCompleted, `2`)
	b.finish(t, failed.ID, records.StatusFailed, `null`)
	if _, err := b.st.DependenciesSettle(b.ctx, nil, 100); err != nil {
		t.Fatal(err)
	}
	b.checkCounts(t, "before the move")
	b.moveAll(t, time.Hour, 3)
	b.checkCounts(t, "moved")

	if _, err := b.st.JobRetry(b.ctx, failed.ID); err != nil {
		t.Fatal(err)
	}
	if b.count(t, "jobs", failed.ID) != 1 {
		t.Fatal("the retried job is not back in jobs")
	}
	b.checkCounts(t, "a job recalled")

	// The jobs in history into a period two hours past, their counts with
	// them (the test moves them by hand).
	lo := b.pastDue(t, "cpast")
	b.checkCounts(t, "past due")

	if _, err := b.st.HistoryExpire(b.ctx, 10); err != nil {
		t.Fatal(err)
	}
	if b.count(t, "jobs_history", done.ID) != 0 || b.count(t, "jobs_history", parent.ID) != 1 {
		t.Fatal("the expiry did not drop the lone job and carry the parent")
	}
	b.checkCounts(t, "expired, the parent carried")
	var stale int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM history_counts WHERE period_lo = $1`, lo).Scan(&stale); err != nil || stale != 0 {
		t.Errorf("the dropped period keeps %d counts (%v)", stale, err)
	}
}
