package engine_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/records"
)

func TestReport(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		maxAttempts int
		report      func(r *records.Report)
		// ended is the status a JOB.WAIT started before the report
		// returns; "" when the job has not ended.
		ended string
		check func(t *testing.T, j records.Job)
	}{
		{
			name: "CompletedEndsTheJobWithItsResult",
			report: func(r *records.Report) {
				r.Status, r.Raw = records.StatusCompleted, json.RawMessage(`{"ok":true}`)
			},
			ended: records.StatusCompleted,
			check: func(t *testing.T, j records.Job) {
				var result struct{ OK bool }
				if err := json.Unmarshal(j.Result, &result); err != nil || !result.OK || j.FinishedAt == nil {
					t.Fatalf("result %s, finished at %v", j.Result, j.FinishedAt)
				}
			},
		},
		{
			name:   "FailedNotRetryableEndsTheJobFailed",
			report: func(r *records.Report) { r.Status, r.Error, r.Retryable = records.StatusFailed, "boom", false },
			ended:  records.StatusFailed,
			check: func(t *testing.T, j records.Job) {
				if j.Attempt != 1 || errorCount(t, j) != 1 {
					t.Fatalf("attempt %d, errors %s", j.Attempt, j.Errors)
				}
			},
		},
		{
			name:        "FailedOnTheLastAttemptEndsTheJobFailed",
			maxAttempts: 1,
			report:      func(r *records.Report) { r.Status, r.Error, r.Retryable = records.StatusFailed, "boom", true },
			ended:       records.StatusFailed,
		},
		{
			name:   "FailedRetryableWithAttemptsLeftWaitsToRunAgain",
			report: func(r *records.Report) { r.Status, r.Error, r.Retryable = records.StatusFailed, "boom", true },
			check: func(t *testing.T, j records.Job) {
				// Retried at once (backoff 0): a retrying job due now reads as queued.
				if j.Status != records.StatusQueued || j.Attempt != 1 || j.WorkerID != nil || errorCount(t, j) != 1 {
					t.Fatalf("status %s attempt %d worker %v errors %s", j.Status, j.Attempt, j.WorkerID, j.Errors)
				}
			},
		},
		{
			name: "SnoozedWaitsUntilLaterWithItsAttemptGivenBack",
			report: func(r *records.Report) {
				r.Status, r.SnoozeFor = records.StatusSnoozed, time.Hour
			},
			check: func(t *testing.T, j records.Job) {
				if j.Status != records.StatusScheduled || j.Attempt != 0 || j.WorkerID != nil {
					t.Fatalf("status %s attempt %d worker %v", j.Status, j.Attempt, j.WorkerID)
				}
				if until := time.Until(j.RunAt); until < 55*time.Minute || until > 65*time.Minute {
					t.Fatalf("due in %v, want an hour", until)
				}
			},
		},
		{
			name: "ProgressKeepsTheJobRunning",
			report: func(r *records.Report) {
				r.Status, r.Raw = "", json.RawMessage(`{"progress_percent":40}`)
			},
			check: func(t *testing.T, j records.Job) {
				var progress struct {
					Percent int `json:"progress_percent"`
				}
				if err := json.Unmarshal(j.Progress, &progress); err != nil || progress.Percent != 40 {
					t.Fatalf("progress %s", j.Progress)
				}
				if j.Status != records.StatusRunning || j.Attempt != 1 || *j.WorkerID != "w1" {
					t.Fatalf("status %s attempt %d worker %v", j.Status, j.Attempt, j.WorkerID)
				}
			},
		},
		{
			name:   "RunningAcknowledgesAndKeepsTheJobRunning",
			report: func(r *records.Report) { r.Status = records.StatusRunning },
			check: func(t *testing.T, j records.Job) {
				if j.Status != records.StatusRunning || j.Attempt != 1 || j.AckDeadline != nil {
					t.Fatalf("status %s attempt %d ack deadline %v", j.Status, j.Attempt, j.AckDeadline)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			job := newJob("j1")
			if tt.maxAttempts > 0 {
				job.MaxAttempts = tt.maxAttempts
			}
			claimed := b.submitAndClaim(t, job)
			wait := newWait(deadline)
			waited := b.startWaitJob(t, "j1", wait)
			r := report(claimed, "w1", "")
			tt.report(&r)
			if err := b.engine.Report(r)(b.ctx); err != nil {
				t.Fatalf("report: %v", err)
			}
			if tt.ended == "" {
				wait.stop()
			}
			w := receive(t, "JOB.WAIT's answer", waited)
			switch {
			case w.err != nil:
				t.Fatalf("JOB.WAIT: %v", w.err)
			case tt.ended == "" && w.found:
				t.Fatalf("JOB.WAIT answered the job, %s, which has not ended", w.job.Status)
			case tt.ended != "" && (!w.found || w.job.Status != tt.ended):
				t.Fatalf("JOB.WAIT: found %v, status %s; want %s", w.found, w.job.Status, tt.ended)
			}
			got := b.get(t, "j1")
			if tt.ended != "" && got.Status != tt.ended {
				t.Fatalf("status %s, want %s", got.Status, tt.ended)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}

	t.Run("ARetryDueAtOnceWakesAWaitingPop", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		claimed := b.submitAndClaim(t, newJob("j1"))
		w2 := b.registerWorker(t, "w2")
		popped := b.startPop(t, w2, newWait(5*time.Second))
		r := report(claimed, "w1", records.StatusFailed)
		r.Error, r.Retryable = "boom", true
		if err := b.engine.Report(r)(b.ctx); err != nil {
			t.Fatal(err)
		}
		p := receive(t, "the pop's job", popped)
		if p.err != nil || len(p.jobs) != 1 || p.jobs[0].ID != "j1" || p.jobs[0].Attempt != 2 {
			t.Fatalf("pop: %+v, want j1 at attempt 2", p)
		}
	})

	t.Run("ReportsAddedToOneGroupEachTakeEffect", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if _, err := b.engine.SubmitBatch(b.ctx, []records.NewJob{newJob("j1"), newJob("j2")}); err != nil {
			t.Fatal(err)
		}
		_, jobs, err := b.engine.Claim(b.ctx, b.worker, []string{"q"}, 2)
		if err != nil || len(jobs) != 2 {
			t.Fatalf("claimed %d, %v", len(jobs), err)
		}
		var waits []func() error
		for _, j := range jobs {
			wait := b.engine.Report(report(j, "w1", records.StatusCompleted))
			waits = append(waits, func() error { return wait(b.ctx) })
		}
		for _, wait := range waits {
			if err := wait(); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{"j1", "j2"} {
			if got := b.get(t, id); got.Status != records.StatusCompleted {
				t.Fatalf("%s is %s", id, got.Status)
			}
		}
	})
}

func errorCount(t *testing.T, j records.Job) int {
	t.Helper()
	var errs []json.RawMessage
	if err := json.Unmarshal(j.Errors, &errs); err != nil {
		t.Fatalf("errors %s: %v", j.Errors, err)
	}
	return len(errs)
}

// Refusals name their job and wrap their cause.
func TestReportRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// report prepares the case from a job w1 holds and returns the
		// report to refuse.
		report func(t *testing.T, b *testBundle, held records.Job) records.Report
		check  func(t *testing.T, err error)
		// status is the job's status after the refusal.
		status string
	}{
		{
			name: "AnotherWorkersReportIsNotTheOwners",
			report: func(t *testing.T, b *testBundle, held records.Job) records.Report {
				b.registerWorker(t, "w2")
				return records.Report{ID: held.ID, WorkerID: "w2", Status: records.StatusCompleted}
			},
			check: func(t *testing.T, err error) {
				var owner *records.NotOwnerError
				if !errors.As(err, &owner) || owner.Owner != "w1" {
					t.Fatalf("got %v, want NotOwnerError naming w1", err)
				}
			},
			status: records.StatusRunning,
		},
		{
			name: "AReportAboutAnEarlierDeliveryIsStale",
			report: func(t *testing.T, b *testBundle, held records.Job) records.Report {
				if err := b.engine.UnregisterWorker(b.ctx, "w1"); err != nil {
					t.Fatal(err)
				}
				b.registerWorker(t, "w1")
				if again := b.claimOne(t, b.worker); *again.Delivery == *held.Delivery {
					t.Fatal("the second delivery has the first one's token")
				}
				return records.Report{ID: held.ID, WorkerID: "w1", Status: records.StatusCompleted, Delivery: *held.Delivery}
			},
			check: func(t *testing.T, err error) {
				var stale *records.StaleDeliveryError
				if !errors.As(err, &stale) {
					t.Fatalf("got %v, want StaleDeliveryError", err)
				}
			},
			status: records.StatusRunning,
		},
		{
			name: "AReportAfterCancelIsCancelled",
			report: func(t *testing.T, b *testBundle, held records.Job) records.Report {
				if err := b.engine.CancelJob(b.ctx, held.ID); err != nil {
					t.Fatal(err)
				}
				return report(held, "w1", records.StatusCompleted)
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, records.ErrJobCancelled) {
					t.Fatalf("got %v, want ErrJobCancelled", err)
				}
			},
			status: records.StatusCancelled,
		},
		{
			name: "AnotherStatusAboutACompletedJobIsAStateError",
			report: func(t *testing.T, b *testBundle, held records.Job) records.Report {
				if err := b.engine.Report(report(held, "w1", records.StatusCompleted))(b.ctx); err != nil {
					t.Fatal(err)
				}
				r := report(held, "w1", records.StatusFailed)
				r.Error = "late"
				return r
			},
			check: func(t *testing.T, err error) {
				var state *records.StateError
				if !errors.As(err, &state) || state.Status != records.StatusCompleted {
					t.Fatalf("got %v, want StateError naming completed", err)
				}
			},
			status: records.StatusCompleted,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			held := b.submitAndClaim(t, newJob("j1"))
			err := b.engine.Report(tt.report(t, b, held))(b.ctx)
			requireJobError(t, err, "j1")
			tt.check(t, err)
			if got := b.get(t, "j1"); got.Status != tt.status {
				t.Fatalf("status %s after the refusal, want %s", got.Status, tt.status)
			}
		})
	}

	t.Run("ASnoozePastTheLimitFailsTheJob", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, func(cfg *engine.Config) { cfg.MaxSnoozes = 1 })
		held := b.submitAndClaim(t, newJob("j1"))
		r := report(held, "w1", records.StatusSnoozed) // due again at once
		if err := b.engine.Report(r)(b.ctx); err != nil {
			t.Fatalf("first snooze: %v", err)
		}
		held = b.claimOne(t, b.worker)
		err := b.engine.Report(report(held, "w1", records.StatusSnoozed))(b.ctx)
		requireJobError(t, err, "j1")
		var limit *records.SnoozeLimitError
		if !errors.As(err, &limit) || limit.Snoozes != 1 {
			t.Fatalf("got %v, want SnoozeLimitError after 1 snooze", err)
		}
		if got := b.get(t, "j1"); got.Status != records.StatusFailed {
			t.Fatalf("status %s, want failed", got.Status)
		}
	})

	t.Run("AReportAboutAnUnknownJobIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, status := range []string{"", records.StatusRunning, records.StatusCompleted, records.StatusSnoozed} {
			err := b.engine.Report(records.Report{ID: "missing", WorkerID: "w1", Status: status, SnoozeFor: time.Second})(b.ctx)
			requireJobError(t, err, "missing")
			if !errors.Is(err, records.ErrNotFound) {
				t.Fatalf("status %q: got %v, want ErrNotFound", status, err)
			}
		}
	})
}

// Clients re-send reports after timeouts: the same final report again
// succeeds and changes nothing.
func TestReportTheSameFinalReportTwice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status string
	}{
		{name: "CompletedTwiceIsOneCompletion", status: records.StatusCompleted},
		{name: "FailedTwiceIsOneFailure", status: records.StatusFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			held := b.submitAndClaim(t, newJob("j1"))
			r := report(held, "w1", tt.status)
			r.Error = "boom" // not retryable
			if err := b.engine.Report(r)(b.ctx); err != nil {
				t.Fatalf("first report: %v", err)
			}
			first := b.get(t, "j1")
			if err := b.engine.Report(r)(b.ctx); err != nil {
				t.Fatalf("second report: %v", err)
			}
			second := b.get(t, "j1")
			if second.Status != tt.status || !second.UpdatedAt.Equal(first.UpdatedAt) ||
				string(second.Errors) != string(first.Errors) || second.Attempt != 1 {
				t.Fatalf("the second report changed the job: %s at %v, errors %s → %s at %v, errors %s",
					first.Status, first.UpdatedAt, first.Errors, second.Status, second.UpdatedAt, second.Errors)
			}
		})
	}
}
