package store_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// moveAll moves every finished job of the bundle's database into history
// (retention as given), failing the test unless want jobs moved.
func (b *trBundle) moveAll(t *testing.T, retain time.Duration, want int) {
	t.Helper()
	n, err := b.st.HistoryMove(b.ctx, store.HistoryParams{RetentionParams: store.RetentionParams{
		Completed: retain, Failed: retain, Limit: 1000}})
	if err != nil || n != want {
		t.Fatalf("moved %d, %v; want %d", n, err, want)
	}
}

// pastDue creates the period two hours past with suffix and moves into it
// the history of the jobs ids, their steps, log lines and signals with
// them — all of history when no id is given — as if their retention had
// run out; the history's counts follow. It answers the period's start.
func (b *trBundle) pastDue(t *testing.T, suffix string, ids ...string) time.Time {
	t.Helper()
	lo := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	if err := b.st.PeriodCreate(b.ctx, lo, lo.Add(time.Hour), suffix); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"jobs_history", "job_steps_history", "job_logs_history", "job_signals_history"} {
		key := "job_id"
		if table == "jobs_history" {
			key = "id"
		}
		if _, err := b.st.Pool.Exec(b.ctx, `UPDATE `+table+` SET expires_at = $1 WHERE coalesce(cardinality($2::text[]), 0) = 0 OR `+key+` = ANY($2)`,
			lo.Add(time.Minute), ids); err != nil {
			t.Fatal(err)
		}
	}
	if len(ids) == 0 {
		// Every count moves with its jobs: the counts stay as they were
		// checked.
		if _, err := b.st.Pool.Exec(b.ctx, `UPDATE history_counts SET period_lo = $1`, lo); err != nil {
			t.Fatal(err)
		}
	} else {
		b.recount(t)
	}
	return lo
}

// finish claims job id (its own queue) and ends it with status and raw.
func (b *trBundle) finish(t *testing.T, id, status, raw string) {
	t.Helper()
	j := b.claim(t, id, holder)
	r := records.Report{ID: id, WorkerID: holder, Status: status, Delivery: *j.Delivery, Raw: json.RawMessage(raw)}
	if status == records.StatusFailed {
		r.Error = "broke"
	}
	if _, err := b.st.JobUpdate(b.ctx, r); err != nil {
		t.Fatalf("finishing %s: %v", id, err)
	}
}

// count counts the rows of a table holding job id.
func (b *trBundle) count(t *testing.T, table, id string) int {
	t.Helper()
	var n int
	key := "id"
	if table != "jobs" && table != "jobs_history" {
		key = "job_id"
	}
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM `+table+` WHERE `+key+` = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A finished job moves into history with its steps, log lines and
// signals, and answers every read and write as it did in jobs.
func TestHistoryKeepsAnsweringForAMovedJob(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	done, failed, stepped := trJob("h-done", 1, 1), trJob("h-failed", 1, 1), trJob("h-stepped", 1, 1)
	done.Payload = json.RawMessage(`{"n":1}`)
	b.submit(t, done, failed, stepped)
	b.finish(t, done.ID, records.StatusCompleted, `{"answer":42}`)
	b.finish(t, failed.ID, records.StatusFailed, `null`)

	j := b.claim(t, stepped.ID, holder)
	call := records.StepParams{JobID: stepped.ID, StepID: "one", WorkerID: holder, Delivery: *j.Delivery}
	if _, _, err := b.st.StepBegin(b.ctx, records.StepBeginParams{StepParams: call, Input: json.RawMessage(`"in"`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.StepComplete(b.ctx, call, json.RawMessage(`"out"`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.st.JobLogAppend(b.ctx, stepped.ID, holder, "a line"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.st.JobSignal(b.ctx, records.SignalParams{JobID: stepped.ID, Name: "go", Payload: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.JobUpdate(b.ctx, records.Report{ID: stepped.ID, WorkerID: holder, Status: records.StatusCompleted,
		Delivery: *j.Delivery, Raw: json.RawMessage(`"fine"`)}); err != nil {
		t.Fatal(err)
	}
	before := b.get(t, done.ID)

	b.moveAll(t, time.Hour, 3)
	for table, want := range map[string]int{"jobs": 0, "jobs_history": 1, "job_steps": 0, "job_steps_history": 1,
		"job_logs": 0, "job_logs_history": 1, "job_signals": 0, "job_signals_history": 1} {
		if got := b.count(t, table, stepped.ID); got != want {
			t.Errorf("%s holds %d rows of the moved job, want %d", table, got, want)
		}
	}

	t.Run("Reads", func(t *testing.T) {
		got := b.get(t, done.ID)
		if got.Status != records.StatusCompleted || string(got.Result) != `{"answer": 42}` || !got.FinishedAt.Equal(*before.FinishedAt) {
			t.Errorf("JOB.GET from history: %s %s %v, want it as before: %s %s %v",
				got.Status, got.Result, got.FinishedAt, before.Status, before.Result, before.FinishedAt)
		}
		if s := b.get(t, stepped.ID); s.Steps != 1 {
			t.Errorf("the moved job counts %d steps, want 1", s.Steps)
		}
		list, err := b.st.JobList(b.ctx, records.JobListParams{Status: records.StatusCompleted, Limit: 10})
		if err != nil || len(list) != 2 || list[0].ID != done.ID || list[1].ID != stepped.ID {
			t.Errorf("JOB.LIST STATUS completed: %v, %v", list, err)
		}
		steps, err := b.st.JobSteps(b.ctx, records.JobStepsParams{JobID: stepped.ID, Limit: 10})
		if err != nil || len(steps) != 1 || string(steps[0].Output) != `"out"` || steps[0].Status != "completed" {
			t.Errorf("JOB.STEPS: %+v, %v", steps, err)
		}
		lines, _, err := b.st.JobLogs(b.ctx, stepped.ID, 0)
		if err != nil || len(lines) != 1 || lines[0] != "a line" {
			t.Errorf("JOB.LOGS: %v, %v", lines, err)
		}
		signals, err := b.st.JobSignals(b.ctx, stepped.ID, 10)
		if err != nil || len(signals) != 1 || signals[0].Name != "go" {
			t.Errorf("signals: %v, %v", signals, err)
		}
		counts, err := b.st.JobCounts(b.ctx)
		if err != nil || counts[records.StatusCompleted] != 2 || counts[records.StatusFailed] != 1 {
			t.Errorf("counts: %v, %v", counts, err)
		}
	})

	t.Run("Writes", func(t *testing.T) {
		var ended *records.JobEndedError
		if _, _, err := b.st.JobSignal(b.ctx, records.SignalParams{JobID: done.ID, Name: "x", Payload: json.RawMessage(`1`)}); !errors.As(err, &ended) {
			t.Errorf("a signal to a job in history: %v, want JobEndedError", err)
		}
		var state *records.StateError
		if _, err := b.st.JobCancel(b.ctx, done.ID); !errors.As(err, &state) || state.Status != records.StatusCompleted {
			t.Errorf("cancelling a completed job in history: %v, want a StateError (completed)", err)
		}
		// The completion sent again by its worker answers as the first.
		if _, err := b.st.JobUpdate(b.ctx, records.Report{ID: stepped.ID, WorkerID: holder, Status: records.StatusCompleted,
			Delivery: *j.Delivery, Raw: json.RawMessage(`"fine"`)}); err != nil {
			t.Errorf("the completion sent again: %v", err)
		}
	})

	t.Run("ResubmittedIDs", func(t *testing.T) {
		res, _, err := b.st.JobsSubmit(b.ctx, []records.NewJob{done})
		if err != nil || res[0].Created || !res[0].Same || res[0].ID != done.ID {
			t.Errorf("the same job again: %+v, %v; want the existing one", res, err)
		}
		other := done
		other.Payload = json.RawMessage(`{"n":2}`)
		var exists *records.JobExistsError
		if _, _, err := b.st.JobsSubmit(b.ctx, []records.NewJob{other}); !errors.As(err, &exists) {
			t.Errorf("the id with other contents: %v, want JobExistsError", err)
		}
		res2, errs, _ := b.st.JobsSubmitEach(b.ctx, []records.NewJob{done, trJob("h-new", 1, 1)})
		if errs[0] != nil || res2[0].Created || errs[1] != nil || !res2[1].Created {
			t.Errorf("a group with the id and a new job: %+v, %v", res2, errs)
		}
		if n := b.count(t, "jobs", done.ID); n != 0 {
			t.Errorf("jobs holds %d rows of the re-submitted id", n)
		}
	})

	t.Run("RetryBringsTheJobBack", func(t *testing.T) {
		if _, err := b.st.JobRetry(b.ctx, failed.ID); err != nil {
			t.Fatal(err)
		}
		if got := b.get(t, failed.ID); got.Status != records.StatusQueued {
			t.Errorf("retried: %s, want queued", got.Status)
		}
		if b.count(t, "jobs", failed.ID) != 1 || b.count(t, "jobs_history", failed.ID) != 0 {
			t.Error("the retried job is not back among the unfinished alone")
		}
		if _, err := b.st.JobRetryFrom(b.ctx, stepped.ID, "one"); err != nil {
			t.Fatal(err)
		}
		if b.count(t, "job_steps", stepped.ID) != 1 || b.count(t, "job_logs", stepped.ID) != 1 || b.count(t, "job_signals", stepped.ID) != 1 {
			t.Error("the job retried from a step came back without its steps, lines or signals")
		}
		if got := b.get(t, stepped.ID); got.Status != records.StatusQueued {
			t.Errorf("retried from its step: %s, want queued", got.Status)
		}
	})
}

// Retention drops whole periods once past, keeping (carried into the
// current period) a parent whose child is unfinished; an expired id can
// be submitted anew.
func TestHistoryExpiresPeriods(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	parent, child, lone := trJob("x-parent", 1, 1), trJob("x-child", 1, 1), trJob("x-lone", 1, 1)
	child.After = []string{parent.ID}
	b.submit(t, parent, child, lone)
	b.finish(t, parent.ID, records.StatusCompleted, `1`)
	b.finish(t, lone.ID, records.StatusCompleted, `2`)
	// A parent moves once its end is settled (the child released).
	b.moveAll(t, time.Hour, 1)
	if _, err := b.st.DependenciesSettle(b.ctx, nil, 100); err != nil {
		t.Fatal(err)
	}
	b.moveAll(t, time.Hour, 1)

	// Both jobs into a period two hours past, as if their retention ran out.
	b.pastDue(t, "past")

	t.Run("ADropWaitsForAReadOfItsPeriod", func(t *testing.T) {
		tx, err := b.st.Pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx)
		if _, err := tx.Exec(b.ctx, `LOCK TABLE jobs_history_past IN ACCESS SHARE MODE`); err != nil {
			t.Fatal(err)
		}
		expired := make(chan error, 1)
		go func() {
			_, err := b.st.HistoryExpire(b.ctx, 10)
			expired <- err
		}()
		select {
		case err := <-expired:
			t.Fatalf("expired a period another transaction reads (%v)", err)
		case <-time.After(time.Second):
		}
		// The read goes on meanwhile: nothing it asks for waits on the drop.
		for _, view := range []string{"jobs_all", "job_steps_all", "job_logs_all", "job_signals_all"} {
			if _, err := tx.Exec(b.ctx, `SELECT count(*) FROM `+view); err != nil {
				t.Fatalf("reading %s while the period is dropped: %v", view, err)
			}
		}
		tx.Rollback(b.ctx)
		if err := <-expired; err != nil {
			t.Fatalf("the drop once the read ended: %v", err)
		}
	})

	if _, err := b.st.HistoryExpire(b.ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.JobGet(b.ctx, lone.ID); !errors.Is(err, records.ErrNotFound) {
		t.Errorf("the expired job: %v, want not found", err)
	}
	if got := b.get(t, parent.ID); got.Status != records.StatusCompleted {
		t.Errorf("the parent of an unfinished child: %s, want kept", got.Status)
	}
	var periods int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM history_periods WHERE suffix = 'past'`).Scan(&periods); err != nil || periods != 0 {
		t.Errorf("the past period is still there (%d, %v)", periods, err)
	}
	res, _, err := b.st.JobsSubmit(b.ctx, []records.NewJob{lone})
	if err != nil || !res[0].Created {
		t.Errorf("the expired id submitted again: %+v, %v; want a new job", res, err)
	}

	// Its child ended, the parent goes with the next past period.
	if _, err := b.st.JobCancel(b.ctx, child.ID); err != nil {
		t.Fatal(err)
	}
	b.moveAll(t, time.Hour, 1)
	b.pastDue(t, "past2")
	if _, err := b.st.HistoryExpire(b.ctx, 10); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{parent.ID, child.ID} {
		if _, err := b.st.JobGet(b.ctx, id); !errors.Is(err, records.ErrNotFound) {
			t.Errorf("%s once its period passed: %v, want not found", id, err)
		}
	}
}

// Periods are aligned to their widths and never overlap: near expiries get
// an hour, later ones a day, far ones thirty days, and an existing period
// takes every expiry it covers.
func TestHistoryPeriodWidths(t *testing.T) {
	now := time.Date(2026, 11, 28, 13, 20, 0, 0, time.UTC)
	for _, c := range []struct {
		name       string
		at         time.Time
		have       [][2]time.Time
		lo, hi     time.Time
		suffix     string
		wantExists bool
	}{
		{"an hour for an expiry within a day", now.Add(3 * time.Hour), nil,
			time.Date(2026, 11, 28, 16, 0, 0, 0, time.UTC), time.Date(2026, 11, 28, 17, 0, 0, 0, time.UTC), "20261128t16h", false},
		{"a day for one a week ahead", now.Add(7 * 24 * time.Hour), nil,
			time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC), "20261205t00d", false},
		{"an hour where the day holds an hour's period", now.Add(30 * time.Hour),
			[][2]time.Time{{time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC)}},
			time.Date(2026, 11, 29, 19, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC), "20261129t19h", false},
		{"the existing period that covers it", now.Add(2 * time.Hour),
			[][2]time.Time{{time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)}},
			time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), "", true},
	} {
		lo, hi, suffix, exists := store.PeriodFor(c.at, now, c.have)
		if !lo.Equal(c.lo) || !hi.Equal(c.hi) || suffix != c.suffix || exists != c.wantExists {
			t.Errorf("%s: [%v, %v) %q exists %v; want [%v, %v) %q exists %v", c.name, lo, hi, suffix, exists,
				c.lo, c.hi, c.suffix, c.wantExists)
		}
	}
	// Far: thirty days, aligned to thirty days since the zero time.
	lo, hi, _, _ := store.PeriodFor(now.Add(365*24*time.Hour), now, nil)
	if hi.Sub(lo) != 30*24*time.Hour || !lo.Equal(lo.Truncate(30*24*time.Hour)) || now.Add(365*24*time.Hour).Before(lo) {
		t.Errorf("a year ahead: [%v, %v)", lo, hi)
	}
}
