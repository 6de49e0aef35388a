package engine_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/agq/agq/records"
)

func TestSubmit(t *testing.T) {
	t.Parallel()

	t.Run("ASubmittedJobIsClaimedAtItsFirstAttemptWithADeliveryToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res := b.submit(t, newJob("j1"))
		if res.ID != "j1" || !res.Created || res.Delivered != nil {
			t.Fatalf("submit result: %+v", res)
		}
		queue, jobs, err := b.engine.Claim(b.ctx, b.worker, []string{"q"}, 1)
		if err != nil || queue != "q" || len(jobs) != 1 {
			t.Fatalf("claim: %q %d jobs, %v", queue, len(jobs), err)
		}
		j := jobs[0]
		if j.ID != "j1" || j.Attempt != 1 || j.Delivery == nil || *j.Delivery == "" {
			t.Fatalf("claimed job: id %s attempt %d delivery %v", j.ID, j.Attempt, j.Delivery)
		}
		got := b.get(t, "j1")
		if got.Status != records.StatusRunning || got.WorkerID == nil || *got.WorkerID != "w1" {
			t.Fatalf("after the claim: status %s worker %v", got.Status, got.WorkerID)
		}
	})

	t.Run("ABatchIsStoredInOrderAndEachJobIsClaimable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.engine.SubmitBatch(b.ctx, []records.NewJob{newJob("b1"), newJob("b2"), newJob("b3")})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{"b1", "b2", "b3"} {
			if res[i].ID != want || !res[i].Created {
				t.Fatalf("result %d: %+v, want %s created", i, res[i], want)
			}
		}
		_, jobs, err := b.engine.Claim(b.ctx, b.worker, []string{"q"}, 3)
		if err != nil || len(jobs) != 3 {
			t.Fatalf("claimed %d jobs, %v", len(jobs), err)
		}
		for _, j := range jobs {
			if j.Attempt != 1 || j.Delivery == nil {
				t.Fatalf("claimed %s at attempt %d, delivery %v", j.ID, j.Attempt, j.Delivery)
			}
		}
	})

	t.Run("PushAnswersTheQueuesReadyDepth", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.submit(t, newJob("p0"))
		n, err := b.engine.Push(b.ctx, "q", []records.NewJob{newJob("p1"), newJob("p2")})
		if err != nil || n != 3 {
			t.Fatalf("push: %d, %v; want 3", n, err)
		}
	})

	// As Redis serves blocked clients only after LPUSH replies, a job a
	// waiting pop took at once still counts.
	t.Run("APushHandedToAWaitingPopStillCountsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		popped := b.startPop(t, b.worker, newWait(deadline))
		n, err := b.engine.Push(b.ctx, "q", []records.NewJob{newJob("p1")})
		if err != nil || n != 1 {
			t.Fatalf("push: %d, %v; want 1", n, err)
		}
		if r := receive(t, "the pop's job", popped); len(r.jobs) != 1 || r.jobs[0].ID != "p1" {
			t.Fatalf("pop: %+v", r)
		}
	})
}

// A job id is the idempotency key: the same job again is the job stored,
// other contents under its id are refused.
func TestSubmitTheSameID(t *testing.T) {
	t.Parallel()
	other := newJob("j1")
	other.Payload = json.RawMessage(`{"n":2}`)
	tests := []struct {
		name  string
		batch bool
		again records.NewJob
		// exists says the submission is refused with JobExistsError.
		exists bool
	}{
		{name: "SameContentsIsTheSameJob", again: newJob("j1")},
		{name: "SameContentsInABatchIsTheSameJob", batch: true, again: newJob("j1")},
		{name: "OtherContentsAreRefused", again: other, exists: true},
		{name: "OtherContentsInABatchAreRefused", batch: true, again: other, exists: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.submit(t, newJob("j1"))
			var res records.SubmitResult
			var err error
			if tt.batch {
				var all []records.SubmitResult
				if all, err = b.engine.SubmitBatch(b.ctx, []records.NewJob{tt.again}); err == nil {
					res = all[0]
				}
			} else {
				res, err = b.engine.Submit(tt.again)(b.ctx)
			}
			if tt.exists {
				var exists *records.JobExistsError
				if !errors.As(err, &exists) || exists.ID != "j1" {
					t.Fatalf("got %v (%T), want JobExistsError for j1", err, err)
				}
			} else if err != nil || res.ID != "j1" || res.Created || !res.Same {
				t.Fatalf("got %+v, %v; want the existing j1", res, err)
			}
			if n, err := b.engine.QueueDepth(b.ctx, "q"); err != nil || n != 1 {
				t.Fatalf("queue depth %d, %v; want the one job", n, err)
			}
			if got := b.get(t, "j1"); string(got.Payload) != `{"n": 1}` {
				t.Fatalf("stored payload %s, want the first submission's", got.Payload)
			}
		})
	}
}
