package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// TestStepsBeginGroup checks that a group of begins from several jobs and
// workers answers each call as the locked path would, writes nothing for
// a step completed with an equal input, and acknowledges the deliveries
// it begins steps of.
func TestStepsBeginGroup(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t, "w-c")
	claim := func(id, worker string) records.Job {
		b.submit(t, trJob(id, 3, 0))
		return b.claim(t, id, worker)
	}
	begin := func(p records.StepBeginParams) {
		t.Helper()
		if _, _, err := b.st.StepBegin(b.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	call := func(j records.Job, worker, step, input string) records.StepBeginParams {
		p := stepCall(j, step)
		p.WorkerID = worker
		return records.StepBeginParams{StepParams: p, Input: json.RawMessage(input)}
	}
	three, one := 3, 1

	fresh, other := claim("begin-fresh", holder), claim("begin-other", "w-c")
	done, redo, open := claim("begin-done", holder), claim("begin-redo", holder), claim("begin-open", holder)
	begin(call(done, holder, "s1", `{"x":1}`))
	begin(call(redo, holder, "s1", `{"x":1}`))
	begin(call(open, holder, "s1", ``))
	for _, j := range []records.Job{done, redo} {
		if _, err := b.st.StepComplete(b.ctx, stepCall(j, "s1"), []byte(`"out"`)); err != nil {
			t.Fatal(err)
		}
	}
	// Steps open when their deliveries were lost: begun again in the next.
	lost, used := claim("begin-lost", holder), claim("begin-used", holder)
	begin(records.StepBeginParams{StepParams: stepCall(lost, "s1"), MaxAttempts: &three})
	begin(records.StepBeginParams{StepParams: stepCall(used, "s1"), MaxAttempts: &three})
	b.expireLease(t, lost.ID)
	b.expireLease(t, used.ID)
	lost, used = b.claim(t, lost.ID, holder), b.claim(t, used.ID, holder)
	refused, twice, cancelling := claim("begin-refused", holder), claim("begin-twice", holder), claim("begin-cancelling", holder)
	if _, err := b.st.JobCancel(b.ctx, cancelling.ID); err != nil {
		t.Fatal(err)
	}
	stale := call(claim("begin-stale", holder), holder, "s1", ``)
	stale.Delivery = "00000000-0000-4000-8000-000000000000"
	usedUp := call(used, holder, "s1", ``)
	usedUp.MaxAttempts = &one

	var xmin string
	readXmin := func() string {
		t.Helper()
		var x string
		if err := b.st.Pool.QueryRow(b.ctx, `SELECT xmin::text FROM job_steps WHERE job_id = $1 AND step_id = 's1'`, done.ID).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	xmin = readXmin()

	calls := []records.StepBeginParams{
		call(fresh, holder, "s1", `{"n":1}`),
		call(other, "w-c", "s1", ``),
		call(done, holder, "s1", `{"x":1}`), // completed with an equal input
		call(redo, holder, "s1", `{"x":2}`), // completed with another
		call(open, holder, "s1", ``),        // sent again by its delivery
		call(lost, holder, "s1", ``),
		usedUp,
		call(refused, another, "s1", ``),
		call(twice, holder, "s1", ``),
		call(twice, holder, "s1", ``), // the same begin twice in the group
		stale,
		call(cancelling, holder, "s1", ``),
	}
	type want struct {
		execute bool
		attempt int
		output  string
		err     string
	}
	wants := []want{
		{execute: true, attempt: 1},
		{execute: true, attempt: 1},
		{output: `"out"`},
		{execute: true, attempt: 1},
		{execute: true, attempt: 1},
		{execute: true, attempt: 2},
		{err: "step s1 used its 1 attempts: the job failed"},
		{err: "job is owned by w-a"},
		{execute: true, attempt: 1},
		{execute: true, attempt: 1},
		{err: "delivery is not the job's current one"},
		{err: "job was cancelled"},
	}
	res, fx := b.st.StepsBegin(b.ctx, calls)
	for i, r := range res {
		w := wants[i]
		if r.Result.Execute != w.execute || r.Result.Attempt != w.attempt || string(r.Result.Output) != w.output ||
			(r.Err == nil) != (w.err == "") || r.Err != nil && !strings.Contains(r.Err.Error(), w.err) {
			t.Errorf("call %d: %+v, %v; want %+v", i, r.Result, r.Err, w)
		}
	}
	var attempts *records.StepAttemptsError
	if !errors.As(res[6].Err, &attempts) {
		t.Errorf("the begin past its attempts: %v", res[6].Err)
	}
	if x := readXmin(); x != xmin {
		t.Errorf("the completed step was written (xmin %s, then %s)", xmin, x)
	}
	for id, status := range map[string]string{used.ID: records.StatusFailed, cancelling.ID: records.StatusCancelled, fresh.ID: records.StatusRunning} {
		if got := b.get(t, id); got.Status != status {
			t.Errorf("%s: %s, want %s", id, got.Status, status)
		}
	}
	if len(fx.Done) != 2 {
		t.Errorf("effects: %+v", fx)
	}
	var unacked int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND ack_deadline IS NOT NULL`,
		[]string{fresh.ID, other.ID, lost.ID, twice.ID}).Scan(&unacked); err != nil || unacked != 0 {
		t.Errorf("%d deliveries left unacknowledged (%v)", unacked, err)
	}
	steps, err := b.st.JobSteps(b.ctx, records.JobStepsParams{JobID: fresh.ID, Limit: 10})
	if err != nil || len(steps) != 1 || steps[0].Status != records.StepRunning || string(steps[0].Input) != `{"n": 1}` || steps[0].Attempts != 1 {
		t.Errorf("%s's steps: %+v, %v", fresh.ID, steps, err)
	}
}

// Delivery tokens compare as UUIDs on both paths: a token spelled in
// capitals or in braces is the job's, and a token that is no UUID is
// answered stale, never with the database's error.
func TestStepCallsCompareTokensAsUUIDs(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	b.submit(t, trJob("tokens-spelled", 3, 0))
	j := b.claim(t, "tokens-spelled", holder)
	upper, braced := stepCall(j, "s1"), stepCall(j, "s2")
	upper.Delivery, braced.Delivery = strings.ToUpper(upper.Delivery), "{"+braced.Delivery+"}"
	got, _ := b.st.StepsBegin(b.ctx, []records.StepBeginParams{{StepParams: upper}})
	if got[0].Err != nil || !got[0].Result.Execute {
		t.Fatalf("a grouped begin with its token in capitals: %+v", got[0])
	}
	if r, _, err := b.st.StepBegin(b.ctx, records.StepBeginParams{StepParams: braced}); err != nil || !r.Execute {
		t.Fatalf("a begin with its token in braces: %+v, %v", r, err)
	}
	if _, err := b.st.StepComplete(b.ctx, upper, nil); err != nil {
		t.Fatalf("a completion with its token in capitals: %v", err)
	}
	res, _ := b.st.StepsComplete(b.ctx, []store.StepCompletion{{StepParams: braced}})
	if res[0].Err != nil || !res[0].Changed {
		t.Fatalf("a grouped completion with its token in braces: %+v", res[0])
	}
	bad := stepCall(j, "s3")
	bad.Delivery = "not-a-token"
	var stale *records.StaleDeliveryError
	got, _ = b.st.StepsBegin(b.ctx, []records.StepBeginParams{{StepParams: bad}})
	if !errors.As(got[0].Err, &stale) {
		t.Fatalf("a grouped begin with a token that is no UUID: %v", got[0].Err)
	}
	if _, _, err := b.st.StepBegin(b.ctx, records.StepBeginParams{StepParams: bad}); !errors.As(err, &stale) {
		t.Fatalf("a begin with a token that is no UUID: %v", err)
	}
	if _, err := b.st.StepComplete(b.ctx, bad, nil); !errors.As(err, &stale) {
		t.Fatalf("a completion with a token that is no UUID: %v", err)
	}
	if _, _, _, err := b.st.StepSleep(b.ctx, records.StepSleepParams{StepParams: bad, For: time.Second}); !errors.As(err, &stale) {
		t.Fatalf("a sleep with a token that is no UUID: %v", err)
	}
	if _, _, _, err := b.st.StepFail(b.ctx, records.StepFailParams{StepParams: bad, Message: "x"}); !errors.As(err, &stale) {
		t.Fatalf("a failure with a token that is no UUID: %v", err)
	}
}
