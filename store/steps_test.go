package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// stepCall is the holder's call about the job's current delivery.
func stepCall(j records.Job, step string) records.StepParams {
	return records.StepParams{JobID: j.ID, StepID: step, WorkerID: holder, Delivery: str(j.Delivery)}
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
		if r, _, err := b.st.StepBegin(b.ctx, records.StepBeginParams{StepParams: stepCall(j, "s"), MaxAttempts: &two}); err != nil || r.Attempt != 1 {
			t.Fatalf("begin: %+v %v", r, err)
		}
		b.expireLease(t, id)
		if got := b.get(t, id); got.Status != records.StatusQueued {
			t.Fatalf("the job's one attempt was used by its step's failure: %s", got.Status)
		}
		j = b.claim(t, id, holder)
		if r, _, err := b.st.StepBegin(b.ctx, records.StepBeginParams{StepParams: stepCall(j, "s")}); err != nil || r.Attempt != 2 {
			t.Fatalf("begun again: %+v %v", r, err)
		}
		b.expireLease(t, id)
		if got := b.get(t, id); got.Status != records.StatusFailed {
			t.Fatalf("past the step's attempts: %s", got.Status)
		}
	})

	t.Run("ALostDeliveryWithoutAStepCountsAgainstTheJob", func(t *testing.T) {
		t.Parallel()
		id := "steps-lost-outside"
		b.submit(t, trJob(id, 1, 0))
		j := b.claim(t, id, holder)
		if _, _, err := b.st.StepBegin(b.ctx, records.StepBeginParams{StepParams: stepCall(j, "s")}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.st.StepComplete(b.ctx, stepCall(j, "s"), []byte(`1`)); err != nil {
			t.Fatal(err)
		}
		b.expireLease(t, id)
		if got := b.get(t, id); got.Status != records.StatusFailed {
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
			SELECT $1, 's' || n, n, 'step', 'completed', 1, 3, 0 FROM generate_series(1, $2::int) n`, id, records.MaxSteps); err != nil {
			t.Fatal(err)
		}
		var limit *records.StepLimitError
		if _, _, err := b.st.StepBegin(b.ctx, records.StepBeginParams{StepParams: stepCall(j, "one-more")}); !errors.As(err, &limit) {
			t.Fatalf("step %d: %v", records.MaxSteps+1, err)
		}
		if _, _, _, err := b.st.StepSleep(b.ctx, records.StepSleepParams{StepParams: stepCall(j, "nap"), For: 1}); !errors.As(err, &limit) {
			t.Fatalf("sleep %d: %v", records.MaxSteps+1, err)
		}
		if got, err := b.st.JobGet(b.ctx, id); err != nil || got.Steps != records.MaxSteps {
			t.Fatalf("JobGet's steps: %d, %v", got.Steps, err)
		}
	})
}

// TestStepsCompleteGroup checks that a group of completions from several
// jobs and workers answers each call as the locked path would.
func TestStepsCompleteGroup(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t, "w-c")
	claim := func(id, worker string) records.Job {
		b.submit(t, trJob(id, 3, 0))
		return b.claim(t, id, worker)
	}
	begin := func(j records.Job, worker, step string) {
		t.Helper()
		p := stepCall(j, step)
		p.WorkerID = worker
		if _, _, err := b.st.StepBegin(b.ctx, records.StepBeginParams{StepParams: p}); err != nil {
			t.Fatal(err)
		}
	}
	a, c := claim("group-a", holder), claim("group-c", "w-c")
	begin(a, holder, "s1")
	begin(a, holder, "s2")
	begin(c, "w-c", "s1")
	refused, notBegun, done, cancelling := claim("group-refused", holder), claim("group-not-begun", holder),
		claim("group-done", holder), claim("group-cancelling", holder)
	begin(refused, holder, "s1")
	begin(notBegun, holder, "s1")
	begin(done, holder, "s1")
	begin(cancelling, holder, "s1")
	if _, err := b.st.StepComplete(b.ctx, stepCall(done, "s1"), []byte(`"before"`)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.JobCancel(b.ctx, cancelling.ID); err != nil {
		t.Fatal(err)
	}
	call := func(j records.Job, worker, step, output string) store.StepCompletion {
		p := stepCall(j, step)
		p.WorkerID = worker
		return store.StepCompletion{StepParams: p, Output: []byte(output)}
	}
	stale := call(a, holder, "s1", `0`)
	stale.Delivery = "00000000-0000-4000-8000-000000000000"
	calls := []store.StepCompletion{
		call(a, holder, "s1", `1`),
		call(c, "w-c", "s1", `{"c":1}`),
		call(refused, another, "s1", `2`), // another worker
		call(a, holder, "s2", ``),
		call(c, "w-c", "s1", `{"c":2}`), // re-sent in the group
		call(notBegun, holder, "s2", `3`),
		call(done, holder, "s1", `"again"`), // re-sent after it completed
		stale,
		call(cancelling, holder, "s1", `4`),
	}
	type want struct {
		changed bool
		err     string
	}
	wants := []want{
		{true, ""},
		{true, ""},
		{false, "job is owned by w-a"},
		{true, ""},
		{false, ""},
		{false, "step s2 was not begun"},
		{false, ""},
		{false, "delivery is not the job's current one"},
		{false, "job was cancelled"},
	}
	res, fx := b.st.StepsComplete(b.ctx, calls)
	for i, r := range res {
		w := wants[i]
		if r.Changed != w.changed || (r.Err == nil) != (w.err == "") || r.Err != nil && !strings.Contains(r.Err.Error(), w.err) {
			t.Errorf("call %d: changed %v, %v; want %v, %q", i, r.Changed, r.Err, w.changed, w.err)
		}
		if r.Err == nil {
			continue
		}
		// The locked path, asked again, refuses alike.
		if _, err := b.st.StepComplete(b.ctx, calls[i].StepParams, calls[i].Output); err == nil || err.Error() != r.Err.Error() {
			if i != len(calls)-1 { // the cancelled job: now cancelled, not cancelling
				t.Errorf("call %d: group %q, locked path %v", i, r.Err, err)
			}
		}
	}
	if len(fx.Done) != 1 || fx.Done[0] != cancelling.ID {
		t.Errorf("effects: %+v", fx)
	}
	outputs := map[string]string{}
	for _, id := range []string{a.ID, c.ID, done.ID} {
		steps, err := b.st.JobSteps(b.ctx, records.JobStepsParams{JobID: id, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			if s.Status != records.StepCompleted {
				t.Errorf("%s %s: %s", id, s.StepID, s.Status)
			}
			outputs[id+"/"+s.StepID] = string(s.Output)
		}
	}
	for k, v := range map[string]string{"group-a/s1": `1`, "group-a/s2": `null`, "group-c/s1": `{"c": 1}`, "group-done/s1": `"before"`} {
		if outputs[k] != v {
			t.Errorf("%s: output %s, want %s", k, outputs[k], v)
		}
	}
}
