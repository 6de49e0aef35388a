package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// reexpire runs one call of HistoryReexpire with the server's retention
// retain, reading up to limit jobs of history.
func (b *trBundle) reexpire(t *testing.T, retain time.Duration, limit int) int {
	t.Helper()
	n, err := b.st.HistoryReexpire(b.ctx, store.RetentionParams{Completed: retain, Failed: retain, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// recount counts history's jobs into history_counts anew, after a test
// moved jobs between periods by hand.
func (b *trBundle) recount(t *testing.T) {
	t.Helper()
	if _, err := b.st.Pool.Exec(b.ctx, `DELETE FROM history_counts`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.Pool.Exec(b.ctx, `
		INSERT INTO history_counts SELECT h.namespace, h.queue, h.status, p.lo, count(*)
		FROM jobs_history h JOIN history_periods p ON h.expires_at >= p.lo AND h.expires_at < p.hi GROUP BY 1, 2, 3, 4`); err != nil {
		t.Fatal(err)
	}
}

// walking says whether a changed retention is still being applied to the
// default namespace's history.
func (b *trBundle) walking(t *testing.T) bool {
	t.Helper()
	var n int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM history_retention WHERE cursor IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// checkExpiries checks that each job of history expires at its end plus
// the retention of its status, or in the same period, with its steps, log
// lines and signals in its period.
func (b *trBundle) checkExpiries(t *testing.T, completed, failed time.Duration) {
	t.Helper()
	rows, err := b.st.Pool.Query(b.ctx, `
		SELECT j.id, j.status, j.finished_at, j.expires_at, p.lo, p.hi,
			(SELECT count(*) FROM job_steps_history s WHERE s.namespace = j.namespace AND s.job_id = j.id AND s.expires_at <> j.expires_at)
			+ (SELECT count(*) FROM job_logs_history l WHERE l.namespace = j.namespace AND l.job_id = j.id AND l.expires_at <> j.expires_at)
			+ (SELECT count(*) FROM job_signals_history g WHERE g.namespace = j.namespace AND g.job_id = j.id AND g.expires_at <> j.expires_at)
		FROM jobs_history j JOIN history_periods p ON j.expires_at >= p.lo AND j.expires_at < p.hi`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, status string
		var finished, expires, lo, hi time.Time
		var strays int
		if err := rows.Scan(&id, &status, &finished, &expires, &lo, &hi, &strays); err != nil {
			t.Fatal(err)
		}
		want := finished.Add(failed)
		if status == records.StatusCompleted {
			want = finished.Add(completed)
		}
		if want.Before(time.Now()) {
			want = time.Now()
		}
		// A job whose new expiry falls in its period stays put.
		if want.Before(lo) || !want.Before(hi.Add(time.Minute)) {
			t.Errorf("%s (%s, ended %v) expires %v in [%v, %v); want about %v", id, status, finished, expires, lo, hi, want)
		}
		if strays > 0 {
			t.Errorf("%s: %d of its steps, log lines and signals are in another period", id, strays)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// A retention changed with NAMESPACE.CONFIG reaches the jobs already in
// history: a longer one keeps a job past the end of the period it moved
// into, even one already due, and no period is dropped while the change
// is applied; a shorter one moves the jobs into earlier periods. The walk
// goes on from where it stopped, a call at a time, and the counts follow.
func TestHistoryFollowsAChangedRetention(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	var ids []string
	for _, id := range []string{"r-1", "r-2", "r-3", "r-4", "r-5"} {
		b.submit(t, trJob(id, 1, 1))
		ids = append(ids, id)
	}
	stepped := trJob("r-stepped", 1, 1)
	b.submit(t, stepped)
	for i, id := range ids {
		status := records.StatusCompleted
		if i%2 == 1 {
			status = records.StatusFailed
		}
		b.finish(t, id, status, `1`)
	}
	j := b.claim(t, stepped.ID, holder)
	call := records.StepParams{JobID: stepped.ID, StepID: "one", WorkerID: holder, Delivery: *j.Delivery}
	if _, _, err := b.st.StepBegin(b.ctx, records.StepBeginParams{StepParams: call}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.StepComplete(b.ctx, call, json.RawMessage(`"out"`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.st.JobLogAppend(b.ctx, stepped.ID, holder, "a line"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.JobUpdate(b.ctx, records.Report{ID: stepped.ID, WorkerID: holder, Status: records.StatusCompleted,
		Delivery: *j.Delivery, Raw: json.RawMessage(`"fine"`)}); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, stepped.ID)
	b.moveAll(t, time.Hour, len(ids))
	if n := b.reexpire(t, time.Hour, 100); n != 0 || b.walking(t) {
		t.Fatalf("the retention the jobs moved with moved %d of them (walking %v)", n, b.walking(t))
	}

	// Two jobs' periods are past due, as if their hour ran out.
	b.pastDue(t, "rpast", "r-1", "r-stepped")
	b.checkCounts(t, "before the change")

	longer := 3 * 24 * time.Hour
	if _, err := b.st.NamespaceConfigure(b.ctx, "default", records.NamespaceChange{RetainCompleted: &longer, RetainFailed: &longer}); err != nil {
		t.Fatal(err)
	}
	// One job a call: the walk stops and goes on as after a crash.
	moved := b.reexpire(t, time.Hour, 1)
	if !b.walking(t) {
		t.Fatal("one job read of six, and the walk is over")
	}
	if _, err := b.st.HistoryExpire(b.ctx, 10); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		b.get(t, id)
	}
	for calls := 0; b.walking(t); calls++ {
		if calls > len(ids) {
			t.Fatal("the walk does not end")
		}
		moved += b.reexpire(t, time.Hour, 1)
	}
	if moved != len(ids) {
		t.Errorf("a retention three days longer moved %d jobs of %d", moved, len(ids))
	}
	b.checkExpiries(t, longer, longer)
	b.checkCounts(t, "a longer retention")
	if _, err := b.st.HistoryExpire(b.ctx, 10); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := b.st.JobGet(b.ctx, id); err != nil {
			t.Errorf("%s after the drop of the period it left: %v", id, err)
		}
	}
	var left int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM history_periods WHERE suffix = 'rpast'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("the past period, empty, was not dropped (%d, %v)", left, err)
	}
	steps, err := b.st.JobSteps(b.ctx, records.JobStepsParams{JobID: stepped.ID, Limit: 10})
	if err != nil || len(steps) != 1 || string(steps[0].Output) != `"out"` {
		t.Errorf("the moved job's steps: %+v, %v", steps, err)
	}

	// Shorter: failed jobs at the least retention, completed at the
	// server's hour again.
	shorter := time.Minute
	var none time.Duration
	if _, err := b.st.NamespaceConfigure(b.ctx, "default", records.NamespaceChange{RetainCompleted: &none, RetainFailed: &shorter}); err != nil {
		t.Fatal(err)
	}
	moved = b.reexpire(t, time.Hour, 100)
	if b.walking(t) || moved == 0 {
		t.Fatalf("a shorter retention moved %d jobs, walking %v", moved, b.walking(t))
	}
	b.checkExpiries(t, time.Hour, shorter)
	b.checkCounts(t, "a shorter retention")
	if n := b.reexpire(t, time.Hour, 100); n != 0 {
		t.Errorf("the same retention again moved %d jobs", n)
	}
}
