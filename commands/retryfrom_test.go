package commands_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agq/agq/internal/agqtest"
)

// stepsSummary is JOB.STEPS as step:status:attempts, in order.
func stepsSummary(t *testing.T, steps []stepView) string {
	t.Helper()
	var out []string
	for _, s := range steps {
		out = append(out, fmt.Sprintf("%s:%s:%d", s.StepID, s.Status, s.Attempts))
	}
	return strings.Join(out, " ")
}

// A completed three-step job retried from its second step runs again: the
// first step answers its output without running, the second and third run
// anew; their old rows stay in JOB.STEPS as replaced, with their history.
// RETRY FROM is refused for a job not ended — the same call sent again
// finds it queued — and for a step the job never began.
func TestAJobRetriedFromAStepRunsAgainFromIt(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "rerunner", "three")
	id := submit(t, admin, map[string]any{"job_id": "three-steps", "type": "three", "queue": "reruns"})

	runs := map[string]int{}
	run := func(j stepJob) {
		t.Helper()
		for _, step := range []string{"fetch", "transform", "load"} {
			j.runStep(step, step+"-in", func() any { runs[step]++; return fmt.Sprintf("%s-%d", step, runs[step]) })
		}
		if err := j.w.update(ctx, id, map[string]any{"status": "completed", "delivery": j.d.Delivery}); err != nil {
			t.Fatal(err)
		}
	}
	j := popStep(t, w, "reruns")
	// Not ended yet: refused, the job untouched.
	if err := admin.Do(ctx, "JOB.RETRY", id, "FROM", "fetch").Err(); err == nil || err.Error() != "ERR job three-steps is running" {
		t.Fatalf("RETRY FROM of a running job: %v", err)
	}
	run(j)
	if err := admin.Do(ctx, "JOB.RETRY", id, "FROM", "nope").Err(); err == nil || err.Error() != "ERR step nope was not begun" {
		t.Fatalf("RETRY FROM a step never begun: %v", err)
	}
	if err := admin.Do(ctx, "JOB.RETRY", id, "FROM").Err(); err == nil || !strings.Contains(err.Error(), "syntax") {
		t.Fatalf("RETRY FROM without a step: %v", err)
	}
	if got, err := admin.Do(ctx, "JOB.RETRY", id, "FROM", "transform").Text(); err != nil || got != "OK" {
		t.Fatalf("RETRY FROM transform: %q, %v", got, err)
	}
	if err := admin.Do(ctx, "JOB.RETRY", id, "FROM", "transform").Err(); err == nil || err.Error() != "ERR job three-steps is queued" {
		t.Fatalf("RETRY FROM sent again: %v", err)
	}
	if v := getStepsJob(t, admin, id); v.Status != "queued" {
		t.Fatalf("after RETRY FROM: %+v", v)
	}
	if got, want := stepsSummary(t, jobSteps(t, admin, id)), "fetch:completed:1 transform:replaced:1 load:replaced:1"; got != want {
		t.Fatalf("JOB.STEPS after RETRY FROM: %s, want %s", got, want)
	}

	run(popStep(t, w, "reruns"))
	if runs["fetch"] != 1 || runs["transform"] != 2 || runs["load"] != 2 {
		t.Fatalf("steps run: %v", runs)
	}
	steps := jobSteps(t, admin, id)
	want := "fetch:completed:1 transform:replaced:1 load:replaced:1 transform:completed:1 load:completed:1"
	if got := stepsSummary(t, steps); got != want {
		t.Fatalf("JOB.STEPS after the run: %s, want %s", got, want)
	}
	if string(steps[1].Output) != `"transform-1"` || string(steps[3].Output) != `"transform-2"` {
		t.Fatalf("outputs: the replaced %s, the new %s", steps[1].Output, steps[3].Output)
	}
	raw, _ := admin.Do(ctx, "JOB.STEPS", id).Text()
	if !strings.Contains(raw, `"step_id":"transform","kind":"step","status":"replaced"`) ||
		strings.Count(raw, `"outcome":"completed"`) != 5 {
		t.Fatalf("the replaced steps' history: %s", raw)
	}
	if page := jobSteps(t, admin, id, "CURSOR", 3, "LIMIT", 1); len(page) != 1 || page[0].StepID != "transform" || page[0].Status != "completed" {
		t.Fatalf("the fourth step, paged: %+v", page)
	}
}

// A job that failed in a step, retried from that step, runs it again from
// its first attempt and completes; the failed attempt stays in the
// replaced row's history.
func TestAFailedJobRetriedFromItsFailingStep(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "refailer", "fails")
	id := submit(t, admin, map[string]any{"job_id": "fails-once", "type": "fails", "queue": "refails"})

	j := popStep(t, w, "refails")
	j.runStep("prepare", nil, func() any { return "ready" })
	if got := j.text("STEP.BEGIN", "charge"); got != `{"execute":true,"attempt":1}` {
		t.Fatal(got)
	}
	if got := j.text("STEP.FAIL", "charge", `{"message":"card declined","non_retryable":true}`); got != `{"retry":false}` {
		t.Fatal(got)
	}
	if v := getStepsJob(t, admin, id); v.Status != "failed" {
		t.Fatalf("after the failure: %+v", v)
	}
	if err := admin.Do(ctx, "JOB.RETRY", id, "FROM", "charge").Err(); err != nil {
		t.Fatal(err)
	}
	j = popStep(t, w, "refails")
	if got := j.runStep("prepare", nil, func() any { t.Fatal("prepare ran again"); return nil }); string(got) != `"ready"` {
		t.Fatalf("prepare answered %s", got)
	}
	if got := j.text("STEP.BEGIN", "charge"); got != `{"execute":true,"attempt":1}` {
		t.Fatalf("the failing step begun again: %s", got)
	}
	if s := j.text("STEP.COMPLETE", "charge", `"paid"`); s != "OK" {
		t.Fatal(s)
	}
	if err := w.update(ctx, id, map[string]any{"status": "completed", "delivery": j.d.Delivery}); err != nil {
		t.Fatal(err)
	}
	if got, want := stepsSummary(t, jobSteps(t, admin, id)), "prepare:completed:1 charge:replaced:1 charge:completed:1"; got != want {
		t.Fatalf("JOB.STEPS: %s, want %s", got, want)
	}
	raw, _ := admin.Do(ctx, "JOB.STEPS", id).Text()
	if !strings.Contains(raw, `"outcome":"failed","error":"card declined"`) {
		t.Fatalf("the failed attempt's history: %s", raw)
	}
}

// A parent retried from a step runs again; its child, which ran after its
// first end, is left as it is.
func TestAParentRetriedFromAStepLeavesItsChildrenThatRan(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "graph-rerunner", "g")
	if err := admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"rf-parent","type":"g","queue":"rf"},
		{"job_id":"rf-child","type":"g","queue":"rf","after":["rf-parent"]}]`).Err(); err != nil {
		t.Fatal(err)
	}
	j := popStep(t, w, "rf")
	j.runStep("only", nil, func() any { return 1 })
	if err := w.update(ctx, "rf-parent", map[string]any{"status": "completed", "delivery": j.d.Delivery}); err != nil {
		t.Fatal(err)
	}
	c := popStep(t, w, "rf")
	if c.id != "rf-child" {
		t.Fatalf("popped %s, want the child", c.id)
	}
	if err := w.update(ctx, "rf-child", map[string]any{"status": "completed", "delivery": c.d.Delivery}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "JOB.RETRY", "rf-parent", "FROM", "only").Err(); err != nil {
		t.Fatal(err)
	}
	j = popStep(t, w, "rf")
	if j.id != "rf-parent" {
		t.Fatalf("popped %s, want the parent", j.id)
	}
	if got := j.text("STEP.BEGIN", "only"); got != `{"execute":true,"attempt":1}` {
		t.Fatalf("the step begun again: %s", got)
	}
	if v := getStepsJob(t, admin, "rf-child"); v.Status != "completed" {
		t.Fatalf("the child after its parent's RETRY FROM: %+v", v)
	}
}
