package engine_test

import (
	"errors"
	"testing"
	"time"

	"github.com/agq/agq/records"
)

func TestPopWaiting(t *testing.T) {
	t.Parallel()

	t.Run("ASingleSubmissionIsHandedToAWaitingPopWithoutAClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		popped := b.startPop(t, b.worker, newWait(deadline))
		res := b.submit(t, newJob("j1"))
		if res.Delivered == nil {
			t.Fatal("the submission was not handed to the waiting pop")
		}
		r := receive(t, "the pop's job", popped)
		if r.err != nil || r.queue != "q" || len(r.jobs) != 1 {
			t.Fatalf("pop: %q %d jobs, %v", r.queue, len(r.jobs), r.err)
		}
		j := r.jobs[0]
		if j.ID != "j1" || j.Attempt != 1 || j.Delivery == nil || *j.Delivery != *res.Delivered.Delivery {
			t.Fatalf("popped %s attempt %d delivery %v, handed delivery %v", j.ID, j.Attempt, j.Delivery, res.Delivered.Delivery)
		}
		if got := b.get(t, "j1"); got.Status != records.StatusRunning || *got.WorkerID != "w1" {
			t.Fatalf("after the hand-off: status %s worker %v", got.Status, got.WorkerID)
		}
	})

	t.Run("ABatchWakesAWaitingPopThatClaimsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		popped := b.startPop(t, b.worker, newWait(deadline))
		res, err := b.engine.SubmitBatch(b.ctx, []records.NewJob{newJob("j1")})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Delivered != nil {
			t.Fatal("a batch handed its job over")
		}
		r := receive(t, "the pop's job", popped)
		if r.err != nil || len(r.jobs) != 1 || r.jobs[0].ID != "j1" || r.jobs[0].Attempt != 1 {
			t.Fatalf("pop: %+v", r)
		}
	})

	t.Run("APopForAJobItCannotRunIsNotWoken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wait := newWait(300 * time.Millisecond)
		popped := b.startPop(t, b.worker, wait)
		job := newJob("j1")
		job.Requires = []string{"gpu"}
		if res := b.submit(t, job); res.Delivered != nil {
			t.Fatal("a job was handed to a worker that cannot run it")
		}
		r := receive(t, "the pop's end", popped)
		if r.err != nil || len(r.jobs) != 0 {
			t.Fatalf("pop: %+v, want nothing", r)
		}
	})

	t.Run("TheEndOfTheWaitAnswersNoJobAndNoError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wait := newWait(deadline)
		popped := b.startPop(t, b.worker, wait)
		wait.stop()
		r := receive(t, "the pop's end", popped)
		if r.err != nil || r.queue != "" || len(r.jobs) != 0 {
			t.Fatalf("pop: %+v, want nothing", r)
		}
	})

	t.Run("ADrainingWorkersPopGetsNothingUntilTheEndOfTheWait", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.submit(t, newJob("j1"))
		if err := b.engine.DrainWorker(b.ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		q, jobs, err := b.engine.PopWaiting(b.ctx, b.worker, nil, []string{"q"}, 1, newWait(200*time.Millisecond))
		if err != nil || q != "" || len(jobs) != 0 {
			t.Fatalf("pop: %q %d jobs, %v", q, len(jobs), err)
		}
		if time.Since(start) < 150*time.Millisecond {
			t.Fatal("the pop did not wait out its timeout")
		}
	})
}

// A client seen leaving is never handed a job: the job goes back to its
// queue, its attempt not counted.
func TestPopWaitingOfAClientThatLeft(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		batch bool
	}{
		{name: "AJobHandedOverGoesBack"},
		{name: "AJobClaimedAfterAWakeUpGoesBack", batch: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			wait := newWait(deadline)
			popped := b.startPop(t, b.worker, wait)
			wait.gone.Store(true)
			if tt.batch {
				if _, err := b.engine.SubmitBatch(b.ctx, []records.NewJob{newJob("j1")}); err != nil {
					t.Fatal(err)
				}
			} else if res := b.submit(t, newJob("j1")); res.Delivered == nil {
				t.Fatal("the submission was not handed to the waiting pop")
			}
			r := receive(t, "the pop's end", popped)
			if !errors.Is(r.err, records.ErrClientGone) || len(r.jobs) != 0 {
				t.Fatalf("pop: %d jobs, %v; want ErrClientGone", len(r.jobs), r.err)
			}
			got := b.get(t, "j1")
			if got.Status != records.StatusQueued || got.Attempt != 0 || got.WorkerID != nil {
				t.Fatalf("given back as status %s attempt %d worker %v, want queued at attempt 0", got.Status, got.Attempt, got.WorkerID)
			}
			if j := b.claimOne(t, b.worker); j.Attempt != 1 {
				t.Fatalf("claimed again at attempt %d, want 1", j.Attempt)
			}
		})
	}
}
