package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/agq/agq/records"
)

// An expiry cut off half-way (its connection gone while it dropped the
// period's partitions, as when agq or PostgreSQL dies there) leaves
// history consistent: the parent still needed carried forward, the
// period's other jobs no longer counted, and the counts those of the jobs
// that can be read. The next pass finishes the drop.
func TestHistoryExpiryCutOffHalfWayIsFinished(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	parent, child, lone := trJob("k-parent", 1, 1), trJob("k-child", 1, 1), trJob("k-lone", 1, 1)
	child.After = []string{parent.ID}
	b.submit(t, parent, child, lone)
	b.finish(t, parent.ID, records.StatusCompleted, `1`)
	b.finish(t, lone.ID, records.StatusCompleted, `2`)
	if _, err := b.st.DependenciesSettle(b.ctx, nil, 100); err != nil {
		t.Fatal(err)
	}
	b.moveAll(t, time.Hour, 2)
	lo := b.pastDue(t, "kpast")
	b.checkCounts(t, "past due")

	// A reader holds one of the period's partitions: the expiry carries
	// the parent, begins to detach the partition, waits for the reader to
	// finish it, and is cut off there.
	tx, err := b.st.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx)
	if _, err := tx.Exec(b.ctx, `LOCK TABLE jobs_history_kpast IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	expired := make(chan error, 1)
	go func() {
		_, err := b.st.HistoryExpire(context.Background(), 10)
		expired <- err
	}()
	var pid int
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the expiry never waited for the partition's lock: %v", <-expired)
		}
		// Outside tx: a transaction sees one snapshot of pg_stat_activity.
		err := b.st.Pool.QueryRow(b.ctx, `SELECT coalesce((SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DETACH PARTITION%' LIMIT 1), 0)`).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.st.Pool.Exec(b.ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := <-expired; err == nil {
		t.Fatal("the expiry cut off half-way answered no error")
	}
	tx.Rollback(b.ctx)

	var at time.Time
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT expires_at FROM jobs_history WHERE id = $1`, parent.ID).Scan(&at); err != nil {
		t.Fatalf("the parent after the cut-off expiry: %v", err)
	}
	if !at.After(lo.Add(time.Hour)) {
		t.Errorf("the parent expires at %v after the cut-off expiry, want carried past the period [%v, %v)", at, lo, lo.Add(time.Hour))
	}
	if b.count(t, "jobs_history", lone.ID) != 0 {
		t.Error("the lone job's partition, half detached, still reads")
	}
	b.checkCounts(t, "after the cut-off expiry")

	if _, err := b.st.HistoryExpire(b.ctx, 10); err != nil {
		t.Fatal(err)
	}
	if left := b.periodLeft(t, "kpast"); left != 0 {
		t.Errorf("%d partitions or periods of the period are left", left)
	}
	if b.count(t, "jobs_history", lone.ID) != 0 || b.count(t, "jobs_history", parent.ID) != 1 {
		t.Error("the next expiry did not drop the lone job and keep the parent")
	}
	b.checkCounts(t, "expired")
}

// Retention at a period's edges: a due period goes with its last instant's
// job, the next period keeps the job expiring at its first instant, and a
// job that ended just before the drop, at the least retention, is kept in
// a period still to come.
func TestHistoryRetentionAtPeriodEdges(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	last, first, just := trJob("e-last", 1, 1), trJob("e-first", 1, 1), trJob("e-just", 1, 1)
	b.submit(t, last, first, just)
	b.finish(t, last.ID, records.StatusCompleted, `1`)
	b.finish(t, first.ID, records.StatusCompleted, `2`)
	b.moveAll(t, time.Hour, 2)

	edge := time.Now().UTC().Truncate(time.Hour)
	if err := b.st.PeriodCreate(b.ctx, edge.Add(-time.Hour), edge, "epast"); err != nil {
		t.Fatal(err)
	}
	var current int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM history_periods WHERE lo = $1`, edge).Scan(&current); err != nil {
		t.Fatal(err)
	}
	if current == 0 {
		if err := b.st.PeriodCreate(b.ctx, edge, edge.Add(time.Hour), "enow"); err != nil {
			t.Fatal(err)
		}
	}
	for id, at := range map[string]time.Time{last.ID: edge.Add(-time.Microsecond), first.ID: edge} {
		if _, err := b.st.Pool.Exec(b.ctx, `UPDATE jobs_history SET expires_at = $2 WHERE id = $1`, id, at); err != nil {
			t.Fatal(err)
		}
	}
	b.recount(t)

	b.finish(t, just.ID, records.StatusCompleted, `3`)
	b.moveAll(t, time.Minute, 1)
	if _, err := b.st.HistoryExpire(b.ctx, 10); err != nil {
		t.Fatal(err)
	}
	if b.count(t, "jobs_history", last.ID) != 0 {
		t.Error("the job expiring at the due period's last instant was kept")
	}
	for _, id := range []string{first.ID, just.ID} {
		if _, err := b.st.JobGet(b.ctx, id); err != nil {
			t.Errorf("%s after the drop: %v", id, err)
		}
	}
	b.checkCounts(t, "after the drop")
}
