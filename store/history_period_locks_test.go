package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A period's partitions are created while reads of the _all views hold
// some history tables and wait for others: the creation neither waits for
// those reads nor makes them wait, so neither can deadlock with the other.
// (Created as PARTITION OF, each partition locked its table against reads
// until the creation committed: a read holding job_steps_history and
// asking for jobs_history deadlocked with it.)
func TestAPeriodIsCreatedUnderReadsOfHistory(t *testing.T) {
	b := newTrBundle(t)
	read := b.reading(t, "job_steps_history")
	lo := time.Now().UTC().Truncate(time.Hour).Add(72 * time.Hour)
	created := make(chan error, 1)
	go func() { created <- b.st.PeriodCreate(b.ctx, lo, lo.Add(time.Hour), "underreads") }()
	select {
	case err := <-created:
		if err != nil {
			t.Fatalf("creating the period under a read: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the period's creation waits for a read of job_steps_history")
	}
	// The read goes on to the other history tables, the new partitions
	// among them.
	for _, table := range []string{"jobs_all", "job_logs_history", "job_signals_history", "job_steps_history_underreads"} {
		if _, err := read.Exec(b.ctx, `SELECT count(*) FROM `+table); err != nil {
			t.Fatalf("reading %s after the creation: %v", table, err)
		}
	}
	var attached int
	if err := read.QueryRow(b.ctx, `
		SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE c.relname LIKE '%\_underreads'`).Scan(&attached); err != nil {
		t.Fatal(err)
	}
	if attached != 4 {
		t.Errorf("%d of the 4 history tables have the period's partition", attached)
	}
	if n := b.periodLeft(t, "underreads"); n != 5 {
		t.Errorf("the period has %d partitions and rows in history_periods, want 4 and 1", n)
	}
}

// A due period is dropped while a read of the _all views holds some
// history tables and goes on to the others: the read is not made to wait,
// and the drop, which waits for the reads that may still see the period's
// partitions, ends once the read does. (Dropped as partitions, they locked
// their tables against reads one after another, and the read and the drop
// deadlocked.)
func TestAPeriodIsDroppedUnderReadsOfHistory(t *testing.T) {
	b := newTrBundle(t)
	edge := time.Now().UTC().Truncate(time.Hour)
	if err := b.st.PeriodCreate(b.ctx, edge.Add(-2*time.Hour), edge.Add(-time.Hour), "dropped"); err != nil {
		t.Fatal(err)
	}
	read := b.reading(t, "job_steps_all")
	expired := make(chan error, 1)
	go func() {
		_, err := b.st.HistoryExpire(b.ctx, 10)
		expired <- err
	}()
	time.Sleep(500 * time.Millisecond) // the drop under way
	for _, view := range []string{"jobs_all", "job_logs_all", "job_signals_all", "job_steps_all"} {
		if _, err := read.Exec(b.ctx, `SELECT count(*) FROM `+view); err != nil {
			t.Fatalf("reading %s while the period is dropped: %v", view, err)
		}
	}
	if err := read.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-expired:
		if err != nil {
			t.Fatalf("dropping the period: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the period's drop did not end once the read did")
	}
	if left := b.periodLeft(t, "dropped"); left != 0 {
		t.Errorf("%d partitions or periods of the dropped period are left", left)
	}
}

// reading begins a transaction that reads table, as a read of history
// does, and is rolled back when the test ends.
func (b *trBundle) reading(t *testing.T, table string) pgx.Tx {
	t.Helper()
	read, err := b.st.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { read.Rollback(context.Background()) })
	if _, err := read.Exec(b.ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := read.Exec(b.ctx, `SELECT count(*) FROM `+table); err != nil {
		t.Fatal(err)
	}
	return read
}

// periodLeft counts the tables and the history_periods row left of the
// period named suffix.
func (b *trBundle) periodLeft(t *testing.T, suffix string) int {
	t.Helper()
	var left int
	if err := b.st.Pool.QueryRow(b.ctx, `
		SELECT (SELECT count(*) FROM pg_class WHERE relname LIKE '%\_' || $1) + (SELECT count(*) FROM history_periods WHERE suffix = $1)`,
		suffix).Scan(&left); err != nil {
		t.Fatal(err)
	}
	return left
}
