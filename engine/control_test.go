package engine_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agq/agq/records"
)

func TestCancelJob(t *testing.T) {
	t.Parallel()

	t.Run("AQueuedJobIsCancelledAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.submit(t, newJob("j1"))
		waited := b.startWaitJob(t, "j1", newWait(deadline))
		if err := b.engine.CancelJob(b.ctx, "j1"); err != nil {
			t.Fatal(err)
		}
		if w := receive(t, "JOB.WAIT's answer", waited); w.err != nil || !w.found || w.job.Status != records.StatusCancelled {
			t.Fatalf("JOB.WAIT: found %v, status %s, %v", w.found, w.job.Status, w.err)
		}
		_, jobs, err := b.engine.Claim(b.ctx, b.worker, []string{"q"}, 1)
		if err != nil || len(jobs) != 0 {
			t.Fatalf("claimed %d jobs of a cancelled one, %v", len(jobs), err)
		}
	})

	t.Run("ARunningJobIsListedInItsHoldersNextHeartbeat", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.submitAndClaim(t, newJob("j1"))
		hb, err := b.engine.Heartbeat(b.ctx, "w1", nil)
		if err != nil || len(hb.Cancels) != 0 {
			t.Fatalf("heartbeat before the cancel: %+v, %v", hb, err)
		}
		if err := b.engine.CancelJob(b.ctx, "j1"); err != nil {
			t.Fatal(err)
		}
		if got := b.get(t, "j1"); got.Status != records.StatusRunning || !got.CancelRequested {
			t.Fatalf("status %s, cancel requested %v; want running, asked to cancel", got.Status, got.CancelRequested)
		}
		hb, err = b.engine.Heartbeat(b.ctx, "w1", nil)
		if err != nil || !slices.Equal(hb.Cancels, []string{"j1"}) {
			t.Fatalf("heartbeat: %+v, %v; want j1 to cancel", hb, err)
		}
	})

	t.Run("AnUnknownJobIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		err := b.engine.CancelJob(b.ctx, "missing")
		requireJobError(t, err, "missing")
		if !errors.Is(err, records.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	})
}

func TestRetryJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// end ends the job w1 holds.
		end func(t *testing.T, b *testBundle, held records.Job)
		// refused is the status a StateError names; "" when the retry is done.
		refused string
	}{
		{
			name: "AFailedJobGoesBackToQueuedWithNoAttemptSpent",
			end: func(t *testing.T, b *testBundle, held records.Job) {
				r := report(held, "w1", records.StatusFailed)
				r.Error = "boom"
				if err := b.engine.Report(r)(b.ctx); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "ACancelledJobGoesBackToQueuedWithNoAttemptSpent",
			end: func(t *testing.T, b *testBundle, held records.Job) {
				if err := b.engine.Report(report(held, "w1", records.StatusCancelled))(b.ctx); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "ACompletedJobIsAStateError",
			end: func(t *testing.T, b *testBundle, held records.Job) {
				if err := b.engine.Report(report(held, "w1", records.StatusCompleted))(b.ctx); err != nil {
					t.Fatal(err)
				}
			},
			refused: records.StatusCompleted,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			held := b.submitAndClaim(t, newJob("j1"))
			tt.end(t, b, held)
			before := b.get(t, "j1")
			err := b.engine.RetryJob(b.ctx, "j1")
			if tt.refused != "" {
				requireJobError(t, err, "j1")
				var state *records.StateError
				if !errors.As(err, &state) || state.Status != tt.refused {
					t.Fatalf("got %v, want StateError naming %s", err, tt.refused)
				}
				if got := b.get(t, "j1"); got.Status != before.Status {
					t.Fatalf("the refused retry moved the job to %s", got.Status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := b.get(t, "j1")
			if got.Status != records.StatusQueued || got.Attempt != 0 || got.WorkerID != nil {
				t.Fatalf("status %s attempt %d worker %v; want queued at attempt 0", got.Status, got.Attempt, got.WorkerID)
			}
			if string(got.Errors) != string(before.Errors) {
				t.Fatalf("errors %s, want the history kept: %s", got.Errors, before.Errors)
			}
			if again := b.claimOne(t, b.worker); again.Attempt != 1 {
				t.Fatalf("claimed again at attempt %d, want 1", again.Attempt)
			}
		})
	}
}

// A job cannot be queued again while another unfinished job holds its
// unique key.
func TestRetryJobWhoseUniqueKeyIsHeld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := newJob("j1")
	first.UniqueKey = "k"
	held := b.submitAndClaim(t, first)
	r := report(held, "w1", records.StatusFailed)
	r.Error = "boom"
	if err := b.engine.Report(r)(b.ctx); err != nil {
		t.Fatal(err)
	}
	second := newJob("j2")
	second.UniqueKey = "k"
	if res := b.submit(t, second); !res.Created {
		t.Fatalf("the key of a failed job still held j2 back: %+v", res)
	}
	err := b.engine.RetryJob(b.ctx, "j1")
	requireJobError(t, err, "j1")
	if !errors.Is(err, records.ErrUniqueKeyHeld) {
		t.Fatalf("got %v, want ErrUniqueKeyHeld", err)
	}
	if got := b.get(t, "j1"); got.Status != records.StatusFailed {
		t.Fatalf("status %s, want failed still", got.Status)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()

	t.Run("AQueueRunningItsMaximumGivesNothingMore", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		one := 1
		limits, err := b.engine.ConfigureQueue(b.ctx, "q", records.LimitsChange{MaxRunning: &one})
		if err != nil || limits.MaxRunning != 1 {
			t.Fatalf("configure: %+v, %v", limits, err)
		}
		if _, err := b.engine.SubmitBatch(b.ctx, []records.NewJob{newJob("j1"), newJob("j2")}); err != nil {
			t.Fatal(err)
		}
		held := b.claimOne(t, b.worker)
		w2 := b.registerWorker(t, "w2")
		if _, jobs, err := b.engine.Claim(b.ctx, w2, []string{"q"}, 1); err != nil || len(jobs) != 0 {
			t.Fatalf("a second claim got %d jobs, %v; want none while one runs", len(jobs), err)
		}

		// The pop the limit holds back is woken when the running job ends.
		popped := b.startPop(t, w2, newWait(5*time.Second))
		if err := b.engine.Report(report(held, "w1", records.StatusCompleted))(b.ctx); err != nil {
			t.Fatal(err)
		}
		p := receive(t, "the pop's job", popped)
		if p.err != nil || len(p.jobs) != 1 || p.jobs[0].ID == held.ID {
			t.Fatalf("pop: %+v, want the other job", p)
		}
	})

	t.Run("ATypeRunningItsMaximumGivesNothingMore", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		one := 1
		if _, err := b.engine.ConfigureType(b.ctx, "t", records.LimitsChange{MaxRunning: &one}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.engine.SubmitBatch(b.ctx, []records.NewJob{newJob("j1"), newJob("j2")}); err != nil {
			t.Fatal(err)
		}
		held := b.claimOne(t, b.worker)
		w2 := b.registerWorker(t, "w2")
		popped := b.startPop(t, w2, newWait(5*time.Second))
		if err := b.engine.Report(report(held, "w1", records.StatusCompleted))(b.ctx); err != nil {
			t.Fatal(err)
		}
		p := receive(t, "the pop's job", popped)
		if p.err != nil || len(p.jobs) != 1 || p.jobs[0].ID == held.ID {
			t.Fatalf("pop: %+v, want the other job", p)
		}
	})
}

func TestWorkers(t *testing.T) {
	t.Parallel()

	t.Run("ADrainingWorkerClaimsNothingAndItsHeartbeatSaysDrain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.submit(t, newJob("j1"))
		if err := b.engine.DrainWorker(b.ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		if _, jobs, err := b.engine.Claim(b.ctx, b.worker, []string{"q"}, 1); !errors.Is(err, records.ErrWorkerDraining) || len(jobs) != 0 {
			t.Fatalf("claim: %d jobs, %v; want ErrWorkerDraining", len(jobs), err)
		}
		if hb, err := b.engine.Heartbeat(b.ctx, "w1", nil); err != nil || !hb.Drain {
			t.Fatalf("heartbeat: %+v, %v; want drain", hb, err)
		}
	})

	t.Run("AWorkerNotRegisteredMustRegister", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.submit(t, newJob("j1"))
		if err := b.engine.UnregisterWorker(b.ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		stranger := b.worker
		stranger.ID = "stranger"
		for _, w := range []records.Worker{b.worker, stranger} {
			var notRegistered *records.WorkerNotRegisteredError
			_, jobs, err := b.engine.Claim(b.ctx, w, []string{"q"}, 1)
			if !errors.As(err, &notRegistered) || notRegistered.ID != w.ID || len(jobs) != 0 {
				t.Fatalf("claim by %s: %d jobs, %v; want WorkerNotRegisteredError", w.ID, len(jobs), err)
			}
			if _, err := b.engine.Heartbeat(b.ctx, w.ID, nil); !errors.As(err, &notRegistered) {
				t.Fatalf("heartbeat by %s: %v; want WorkerNotRegisteredError", w.ID, err)
			}
		}
	})

	t.Run("UnregisteringRequeuesTheJobsItHeldForOthers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		held := b.submitAndClaim(t, newJob("j1"))
		w2 := b.registerWorker(t, "w2")
		popped := b.startPop(t, w2, newWait(5*time.Second))
		if err := b.engine.UnregisterWorker(b.ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		p := receive(t, "the pop's job", popped)
		if p.err != nil || len(p.jobs) != 1 || p.jobs[0].ID != held.ID || *p.jobs[0].Delivery == *held.Delivery {
			t.Fatalf("pop: %+v, want j1 delivered anew", p)
		}
		if got := b.get(t, "j1"); *got.WorkerID != "w2" {
			t.Fatalf("j1 is held by %v, want w2", got.WorkerID)
		}
	})

	t.Run("RegisteringAgainKeepsTheJobsItHolds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		held := b.submitAndClaim(t, newJob("j1"))
		b.registerWorker(t, "w1")
		got := b.get(t, "j1")
		if got.Status != records.StatusRunning || *got.WorkerID != "w1" || *got.Delivery != *held.Delivery {
			t.Fatalf("status %s worker %v; want still running for w1", got.Status, got.WorkerID)
		}
		if err := b.engine.Report(report(held, "w1", records.StatusCompleted))(b.ctx); err != nil {
			t.Fatal(err)
		}
	})
}
