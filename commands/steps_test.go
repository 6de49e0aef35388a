package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// stepJob is a delivered job and the worker holding it, for step calls.
type stepJob struct {
	t  *testing.T
	w  *testWorker
	id string
	d  delivered
}

// popStep pops queue's next job for w; it fails the test on timeout.
func popStep(t *testing.T, w *testWorker, queue string) stepJob {
	t.Helper()
	_, d, ok := w.pop(t, "5", queue)
	if !ok {
		t.Fatal("no job delivered")
	}
	return stepJob{t: t, w: w, id: d.JobID, d: d}
}

// call runs a STEP.* command with the delivery's token appended.
func (j stepJob) call(cmd, step string, args ...any) *redis.Cmd {
	all := append([]any{cmd, j.id, step}, args...)
	all = append(all, "DELIVERY", j.d.Delivery)
	return j.w.c.Do(context.Background(), all...)
}

func (j stepJob) text(cmd, step string, args ...any) string {
	j.t.Helper()
	s, err := j.call(cmd, step, args...).Text()
	if err != nil {
		j.t.Fatalf("%s %s: %v", cmd, step, err)
	}
	return s
}

type stepView struct {
	StepID   string          `json:"step_id"`
	Kind     string          `json:"kind"`
	Status   string          `json:"status"`
	Attempts int             `json:"attempts"`
	Input    json.RawMessage `json:"input"`
	Output   json.RawMessage `json:"output"`
	Errors   []struct {
		Error string `json:"error"`
	} `json:"errors"`
	WakeAt *time.Time `json:"wake_at"`
}

func jobSteps(t *testing.T, c *redis.Client, id string, args ...any) []stepView {
	t.Helper()
	raw, err := c.Do(context.Background(), append([]any{"JOB.STEPS", id}, args...)...).Text()
	if err != nil {
		t.Fatalf("JOB.STEPS: %v", err)
	}
	var steps []stepView
	if err := json.Unmarshal([]byte(raw), &steps); err != nil {
		t.Fatalf("JOB.STEPS %s: %v", raw, err)
	}
	return steps
}

type stepsJobView struct {
	Status  string `json:"status"`
	Attempt int    `json:"attempt"`
	Steps   int    `json:"steps"`
	Errors  []struct {
		Error string `json:"error"`
	} `json:"errors"`
}

func getStepsJob(t *testing.T, c *redis.Client, id string) stepsJobView {
	t.Helper()
	raw, err := c.Do(context.Background(), "JOB.GET", id).Text()
	if err != nil {
		t.Fatal(err)
	}
	var v stepsJobView
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// runStep is what a worker does with a step: begin it, and run fn only
// when agq says so.
func (j stepJob) runStep(step string, input any, fn func() any) json.RawMessage {
	j.t.Helper()
	in, _ := json.Marshal(map[string]any{"input": input})
	var r struct {
		Execute bool            `json:"execute"`
		Attempt int             `json:"attempt"`
		Output  json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal([]byte(j.text("STEP.BEGIN", step, string(in))), &r); err != nil {
		j.t.Fatal(err)
	}
	if !r.Execute {
		return r.Output
	}
	out, _ := json.Marshal(fn())
	if s := j.text("STEP.COMPLETE", step, string(out)); s != "OK" {
		j.t.Fatalf("STEP.COMPLETE %s: %s", step, s)
	}
	return out
}

// A three-step job whose worker is lost after the first step: delivered
// again, the completed step answers its output and is not run again; the
// step the lost delivery left open runs again, its attempt counted.
func TestAJobDeliveredAgainResumesAfterItsCompletedSteps(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "stepper", "shop")
	id := submit(t, admin, map[string]any{"type": "shop", "queue": "orders"})

	sub := admin.Subscribe(ctx, "job."+id+".status")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	charges, ships, mails := 0, 0, 0
	j := popStep(t, w, "orders")
	charge := j.runStep("charge", map[string]any{"amount": 10, "currency": "EUR"}, func() any { charges++; return map[string]string{"charge_id": "ch_1"} })
	// The worker begins the second step and is lost: its jobs go back.
	if got := j.text("STEP.BEGIN", "ship"); got != `{"execute":true,"attempt":1}` {
		t.Fatalf("STEP.BEGIN ship: %s", got)
	}
	if err := w.c.Do(ctx, "WORKER.UNREGISTER", "stepper").Err(); err != nil {
		t.Fatal(err)
	}
	w = registerWorker(t, a, "stepper2", "shop")
	j = popStep(t, w, "orders")
	// The same input, written another way, is the same JSON value.
	again := j.runStep("charge", map[string]any{"currency": "EUR", "amount": 10.0}, func() any { charges++; return nil })
	if string(again) != string(charge) {
		t.Fatalf("the completed step answered %s, want %s", again, charge)
	}
	if got := j.text("STEP.BEGIN", "ship"); got != `{"execute":true,"attempt":2}` {
		t.Fatalf("the step the lost delivery left open: %s", got)
	}
	ships++
	if s := j.text("STEP.COMPLETE", "ship", `"tracked"`); s != "OK" {
		t.Fatal(s)
	}
	if s := j.text("STEP.COMPLETE", "ship", `"tracked"`); s != "OK" { // re-sent
		t.Fatal(s)
	}
	j.runStep("mail", nil, func() any { mails++; return "sent" })
	if err := j.w.update(ctx, id, map[string]any{"status": "completed", "delivery": j.d.Delivery}); err != nil {
		t.Fatal(err)
	}
	if charges != 1 || ships != 1 || mails != 1 {
		t.Fatalf("side effects: %d charges, %d ships, %d mails", charges, ships, mails)
	}

	steps := jobSteps(t, admin, id)
	got := []string{}
	for _, s := range steps {
		got = append(got, fmt.Sprintf("%s:%s:%s:%d:%s", s.StepID, s.Kind, s.Status, s.Attempts, s.Output))
	}
	want := []string{`charge:step:completed:1:{"charge_id":"ch_1"}`, `ship:step:completed:2:"tracked"`, `mail:step:completed:1:"sent"`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("JOB.STEPS: %v, want %v", got, want)
	}
	if page := jobSteps(t, admin, id, "CURSOR", 1, "LIMIT", 1); len(page) != 1 || page[0].StepID != "ship" {
		t.Fatalf("the second page of one: %+v", page)
	}
	if v := getStepsJob(t, admin, id); v.Steps != 3 || v.Status != "completed" {
		t.Fatalf("JOB.GET: %+v", v)
	}

	// job.<id>.status told of each completed step.
	completed := map[string]bool{}
	for len(completed) < 3 {
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("waiting for step_completed: %v (have %v)", err, completed)
		}
		var ev struct {
			Event  string `json:"event"`
			StepID string `json:"step_id"`
		}
		json.Unmarshal([]byte(m.Payload), &ev)
		if ev.Event == "step_completed" {
			completed[ev.StepID] = true
		}
	}
}

// STEP.FAIL's decision comes from the retry policy with the step's attempts:
// retried at retry_after_seconds, then failed past the step's max_attempts;
// JOB.RETRY keeps the completed steps and gives the failed step its
// attempts back. Step failures do not use up the job's own attempts.
func TestAFailedStepRetriesOnItsOwnAttempts(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "failer", "f")
	id := submit(t, admin, map[string]any{"type": "f", "queue": "fails", "max_attempts": 2, "retry_backoff_seconds": 0})

	j := popStep(t, w, "fails")
	j.runStep("prepare", "x", func() any { return "ready" })
	if got := j.text("STEP.BEGIN", "call", `{"max_attempts":3,"retry_backoff_seconds":0}`); got != `{"execute":true,"attempt":1}` {
		t.Fatal(got)
	}
	sub := admin.Subscribe(ctx, "job."+id+".status")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	first := j.text("STEP.FAIL", "call", `{"message":"503 from upstream","retry_after_seconds":1}`)
	var r struct {
		Retry   bool      `json:"retry"`
		RetryAt time.Time `json:"retry_at"`
	}
	if err := json.Unmarshal([]byte(first), &r); err != nil || !r.Retry || r.RetryAt.Before(before.Add(900*time.Millisecond)) || r.RetryAt.After(time.Now().Add(1100*time.Millisecond)) {
		t.Fatalf("STEP.FAIL with retry_after_seconds 1: %s", first)
	}
	if again := j.text("STEP.FAIL", "call", `{"message":"503 from upstream","retry_after_seconds":1}`); again != first {
		t.Fatalf("STEP.FAIL re-sent: %s, first %s", again, first)
	}
	for {
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(m.Payload, `"event":"step_failed"`) {
			if !strings.Contains(m.Payload, `"step_id":"call"`) {
				t.Fatalf("step_failed without its step: %s", m.Payload)
			}
			break
		}
	}
	if v := getStepsJob(t, admin, id); v.Status != "retrying" || len(v.Errors) != 1 || v.Errors[0].Error != "step call: 503 from upstream" {
		t.Fatalf("after the first failure: %+v", v)
	}

	j = popStep(t, w, "fails")
	if time.Now().Before(r.RetryAt.Add(-10 * time.Millisecond)) {
		t.Fatalf("delivered again before %v", r.RetryAt)
	}
	if got := j.text("STEP.BEGIN", "call"); got != `{"execute":true,"attempt":2}` {
		t.Fatal(got)
	}
	if got := j.text("STEP.FAIL", "call", `{"message":"again"}`); !strings.HasPrefix(got, `{"retry":true,"retry_at":"`) {
		t.Fatal(got)
	}
	// Two step failures: the job's own failure is still its first.
	j = popStep(t, w, "fails")
	if err := j.w.update(ctx, id, map[string]any{"status": "failed", "error": "outside", "delivery": j.d.Delivery}); err != nil {
		t.Fatal(err)
	}
	if v := getStepsJob(t, admin, id); v.Status != "queued" { // retrying, due at once
		t.Fatalf("a job failure after two step failures, max_attempts 2: %+v", v)
	}
	j = popStep(t, w, "fails")
	if got := j.text("STEP.BEGIN", "call"); got != `{"execute":true,"attempt":3}` {
		t.Fatal(got)
	}
	if got := j.text("STEP.FAIL", "call", `{"message":"third"}`); got != `{"retry":false}` {
		t.Fatalf("past the step's max_attempts: %s", got)
	}
	if got := j.text("STEP.FAIL", "call", `{"message":"third"}`); got != `{"retry":false}` {
		t.Fatalf("re-sent: %s", got)
	}
	if v := getStepsJob(t, admin, id); v.Status != "failed" || v.Errors[len(v.Errors)-1].Error != "step call: third" {
		t.Fatalf("after the last attempt: %+v", v)
	}

	if err := admin.Do(ctx, "JOB.RETRY", id).Err(); err != nil {
		t.Fatal(err)
	}
	j = popStep(t, w, "fails")
	if out := j.runStep("prepare", "x", func() any { t.Fatal("prepare ran again"); return nil }); string(out) != `"ready"` {
		t.Fatalf("the completed step after JOB.RETRY: %s", out)
	}
	if got := j.text("STEP.BEGIN", "call"); got != `{"execute":true,"attempt":1}` {
		t.Fatalf("the failed step after JOB.RETRY: %s", got)
	}

	// A failure the worker calls final fails the job at once.
	if got := j.text("STEP.FAIL", "call", `{"message":"card declined","non_retryable":true}`); got != `{"retry":false}` {
		t.Fatal(got)
	}
	if v := getStepsJob(t, admin, id); v.Status != "failed" {
		t.Fatalf("after a non-retryable failure: %+v", v)
	}
	steps := jobSteps(t, admin, id)
	if len(steps) != 2 || steps[1].Status != "failed" || len(steps[1].Errors) != 4 || steps[1].Errors[3].Error != "card declined" {
		t.Fatalf("JOB.STEPS: %+v", steps)
	}
}

// A step begun again after the delivery that began its last attempt was
// lost fails the job.
func TestAStepBegunPastItsAttemptsFailsTheJob(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "loser", "l")
	id := submit(t, admin, map[string]any{"type": "l", "queue": "lost"})
	j := popStep(t, w, "lost")
	j.text("STEP.BEGIN", "once", `{"max_attempts":1}`)
	if err := w.c.Do(ctxT(t), "WORKER.UNREGISTER", "loser").Err(); err != nil {
		t.Fatal(err)
	}
	j = popStep(t, registerWorker(t, a, "finder", "l"), "lost")
	err := j.call("STEP.BEGIN", "once").Err()
	if want := "ERR step once used its 1 attempts: the job failed"; err == nil || err.Error() != want {
		t.Fatalf("STEP.BEGIN past its attempts: %v, want %s", err, want)
	}
	if v := getStepsJob(t, admin, id); v.Status != "failed" {
		t.Fatalf("the job: %+v", v)
	}
	if steps := jobSteps(t, admin, id); steps[0].Status != "interrupted" {
		t.Fatalf("the step left open: %+v", steps)
	}
}

// STEP.SLEEP puts the job to sleep until its wake time; the delivery after
// it answers OK and carries on.
func TestASleepingJobWakesOnTime(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "napper", "n")
	id := submit(t, admin, map[string]any{"type": "n", "queue": "naps"})
	j := popStep(t, w, "naps")
	first := j.text("STEP.SLEEP", "nap", "1")
	wake, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(first, "SLEEPING "))
	if !strings.HasPrefix(first, "SLEEPING ") || err != nil || wake.Sub(time.Now()) > time.Second+100*time.Millisecond {
		t.Fatalf("STEP.SLEEP: %q", first)
	}
	if again := j.text("STEP.SLEEP", "nap", "1"); again != first {
		t.Fatalf("re-sent: %q, first %q", again, first)
	}
	if v := getStepsJob(t, admin, id); v.Status != "scheduled" || v.Attempt != 0 || v.Steps != 1 {
		t.Fatalf("asleep: %+v", v)
	}
	if _, _, ok := w.pop(t, "0.3", "naps"); ok {
		t.Fatal("delivered while asleep")
	}
	j = popStep(t, w, "naps")
	if time.Now().Before(wake.Add(-10 * time.Millisecond)) {
		t.Fatalf("woke before %v", wake)
	}
	if j.d.Attempt != 1 {
		t.Fatalf("the sleep counted an attempt: %d", j.d.Attempt)
	}
	if got := j.text("STEP.SLEEP", "nap", "1"); got != "OK" {
		t.Fatalf("STEP.SLEEP after waking: %q", got)
	}
	steps := jobSteps(t, admin, id)
	if len(steps) != 1 || steps[0].Kind != "sleep" || steps[0].Status != "completed" || steps[0].WakeAt == nil {
		t.Fatalf("JOB.STEPS: %+v", steps)
	}
}

// The refusals of step calls, word for word.
func TestStepCallsRefuseClearly(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "holder", "r")
	other := registerWorker(t, a, "other", "r")
	waiting := submit(t, admin, map[string]any{"type": "r", "queue": "held-later"})
	id := submit(t, admin, map[string]any{"type": "r", "queue": "refusals"})
	j := popStep(t, w, "refusals")
	stale := "00000000-0000-4000-8000-000000000000"
	for _, tc := range []struct {
		c    *redis.Client
		args []any
		want string
	}{
		{w.c, []any{"STEP.BEGIN", id, "bad id"}, "ERR step_id must be 1-128 letters, digits, '_', '-', '.' or ':'"},
		{w.c, []any{"STEP.BEGIN", id, strings.Repeat("s", 129)}, "ERR step_id must be 1-128 letters, digits, '_', '-', '.' or ':'"},
		{w.c, []any{"STEP.BEGIN", waiting, "a"}, "ERR job " + waiting + " is not running"},
		{w.c, []any{"STEP.BEGIN", "no-such-job", "a"}, "ERR no such job no-such-job"},
		{w.c, []any{"STEP.BEGIN", id, "a", "DELIVERY", stale}, "ERR job " + id + " is not running for this delivery token (its current attempt is 1): it was delivered again since, or never with this token"},
		{other.c, []any{"STEP.BEGIN", id, "a"}, "ERR job " + id + " is owned by holder"},
		{other.c, []any{"JOB.STEPS", id}, "NOPERM only the worker holding job " + id + " reads its steps"},
		{w.c, []any{"STEP.COMPLETE", id, "never"}, "ERR step never was not begun"},
		{w.c, []any{"STEP.BEGIN", id, "a", `{"inputs":1}`}, `ERR invalid step: unknown field "inputs"`},
		{w.c, []any{"STEP.BEGIN", id, "a", `[]`}, "ERR invalid step: must be a JSON object"},
		{w.c, []any{"STEP.FAIL", id, "a", `{"message":"x","retry_after_seconds":2592001}`}, "ERR invalid step error: retry_after_seconds must be between 0 and 2592000 (30 days)"},
		{w.c, []any{"STEP.SLEEP", id, "a", "0"}, "ERR seconds must be more than 0 and at most 2592000 (30 days)"},
		{w.c, []any{"STEP.COMPLETE", id, "a", "{not json"}, "ERR invalid step output: must be JSON"},
		{w.c, []any{"STEP.BEGIN", id}, "ERR wrong number of arguments for 'step.begin' command"},
		// Unknown options are a syntax error, as in Redis.
		{w.c, []any{"STEP.BEGIN", id, "a", "{}", "FOO", "bar"}, "ERR syntax error"},
		{w.c, []any{"STEP.BEGIN", id, "a", "{}", "FOO"}, "ERR syntax error"},
		{w.c, []any{"STEP.BEGIN", id, "a", "{}", "DELIVERY", j.d.Delivery, "FOO"}, "ERR syntax error"},
		{w.c, []any{"STEP.BEGIN", id, "a", "DELIVERY", j.d.Delivery, "{}"}, "ERR syntax error"},
		{w.c, []any{"STEP.COMPLETE", id, "a", "1", "FOO", "bar"}, "ERR syntax error"},
		{w.c, []any{"STEP.FAIL", id, "a", `{"message":"x"}`, "FOO", "bar"}, "ERR syntax error"},
		{w.c, []any{"STEP.SLEEP", id, "a", "5", "FOO", "bar"}, "ERR syntax error"},
		{w.c, []any{"STEP.FAIL", id, "a", "DELIVERY", j.d.Delivery}, "ERR wrong number of arguments for 'step.fail' command"},
	} {
		err := tc.c.Do(ctx, tc.args...).Err()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %s", tc.args, err, tc.want)
		}
	}
	j.text("STEP.SLEEP", "pause", "60")
	if err := j.call("STEP.BEGIN", "other").Err(); err == nil || err.Error() != "ERR job "+id+" is not running" {
		t.Errorf("a step of a sleeping job: %v", err)
	}

	// A cancelled job's holder is told.
	cancelled := submit(t, admin, map[string]any{"type": "r", "queue": "cancels"})
	j = popStep(t, w, "cancels")
	if err := admin.Do(ctx, "JOB.CANCEL", cancelled).Err(); err != nil {
		t.Fatal(err)
	}
	if err := j.call("STEP.BEGIN", "a").Err(); err == nil || err.Error() != "CANCELLED job "+cancelled+" was cancelled" {
		t.Errorf("a step of a job being cancelled: %v", err)
	}
	if v := getStepsJob(t, admin, cancelled); v.Status != "cancelled" {
		t.Errorf("the job its holder was told of: %+v", v)
	}
}
