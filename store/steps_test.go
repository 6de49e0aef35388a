package store_test

import (
	"errors"
	"testing"

	"github.com/agq/agq/store"
)

// stepCall is the holder's call about the job's current delivery.
func stepCall(j store.Job, step string) store.StepParams {
	return store.StepParams{JobID: j.ID, StepID: step, WorkerID: holder, Delivery: str(j.Delivery)}
}

// expireLease makes the job's holder look lost to the lease sweep.
func (b *trBundle) expireLease(t *testing.T, id string) {
	t.Helper()
	if _, err := b.st.Pool.Exec(b.ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.JobsRecoverExpiredLeases(b.ctx, 100); err != nil {
		t.Fatal(err)
	}
}

func TestStepAttempts(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)

	t.Run("ALostDeliveryWithAStepOpenCountsAgainstTheStep", func(t *testing.T) {
		t.Parallel()
		id := "steps-lost"
		b.submit(t, trJob(id, 1, 0))
		j := b.claim(t, id, holder)
		two := 2
		if r, _, err := b.st.StepBegin(b.ctx, store.StepBeginParams{StepParams: stepCall(j, "s"), MaxAttempts: &two}); err != nil || r.Attempt != 1 {
			t.Fatalf("begin: %+v %v", r, err)
		}
		b.expireLease(t, id)
		if got := b.get(t, id); got.Status != store.StatusQueued {
			t.Fatalf("the job's one attempt was used by its step's failure: %s", got.Status)
		}
		j = b.claim(t, id, holder)
		if r, _, err := b.st.StepBegin(b.ctx, store.StepBeginParams{StepParams: stepCall(j, "s")}); err != nil || r.Attempt != 2 {
			t.Fatalf("begun again: %+v %v", r, err)
		}
		b.expireLease(t, id)
		if got := b.get(t, id); got.Status != store.StatusFailed {
			t.Fatalf("past the step's attempts: %s", got.Status)
		}
	})

	t.Run("ALostDeliveryWithoutAStepCountsAgainstTheJob", func(t *testing.T) {
		t.Parallel()
		id := "steps-lost-outside"
		b.submit(t, trJob(id, 1, 0))
		j := b.claim(t, id, holder)
		if _, _, err := b.st.StepBegin(b.ctx, store.StepBeginParams{StepParams: stepCall(j, "s")}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.st.StepComplete(b.ctx, stepCall(j, "s"), []byte(`1`)); err != nil {
			t.Fatal(err)
		}
		b.expireLease(t, id)
		if got := b.get(t, id); got.Status != store.StatusFailed {
			t.Fatalf("lost between steps, its one attempt used: %s", got.Status)
		}
	})

	t.Run("AJobHasAtMostMaxSteps", func(t *testing.T) {
		t.Parallel()
		id := "steps-many"
		b.submit(t, trJob(id, 3, 0))
		j := b.claim(t, id, holder)
		if _, err := b.st.Pool.Exec(b.ctx, `
			INSERT INTO job_steps (job_id, step_id, ord, kind, status, attempts, max_attempts, retry_backoff_seconds)
			SELECT $1, 's' || n, n, 'step', 'completed', 1, 3, 0 FROM generate_series(1, $2::int) n`, id, store.MaxSteps); err != nil {
			t.Fatal(err)
		}
		var limit *store.StepLimitError
		if _, _, err := b.st.StepBegin(b.ctx, store.StepBeginParams{StepParams: stepCall(j, "one-more")}); !errors.As(err, &limit) {
			t.Fatalf("step %d: %v", store.MaxSteps+1, err)
		}
		if _, _, _, err := b.st.StepSleep(b.ctx, store.StepSleepParams{StepParams: stepCall(j, "nap"), For: 1}); !errors.As(err, &limit) {
			t.Fatalf("sleep %d: %v", store.MaxSteps+1, err)
		}
		if got, err := b.st.JobGet(b.ctx, id); err != nil || got.Steps != store.MaxSteps {
			t.Fatalf("JobGet's steps: %d, %v", got.Steps, err)
		}
	})
}
