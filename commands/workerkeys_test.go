package commands_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// A worker's key does everything a parent that spawns and awaits children
// needs: it submits them (one by one and as a batch; sent again, the same
// jobs), reads them, waits for them, follows their status, lists a job's
// children, signals one, and awaits them all in a step. It reads only the
// jobs its key submitted.
func TestAWorkerKeyRunsAParentThatSpawnsAndAwaitsChildren(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	spawner := registerWorker(t, a, "spawner-1", "parent")
	runner := registerWorker(t, a, "runner-1", "child")
	parent := submit(t, admin, map[string]any{"job_id": "order-9", "type": "parent", "queue": "parents"})
	do := func(c *redis.Client, args ...any) string {
		t.Helper()
		v, err := c.Do(ctx, args...).Text()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	refused := func(c *redis.Client, want string, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err == nil || err.Error() != want {
			t.Errorf("%v = %v, want %q", args, err, want)
		}
	}

	j := popStep(t, spawner, "parents")
	spawn := func() {
		do(spawner.c, "JOB.SUBMIT", `{"job_id":"order-9-pack","type":"child","queue":"children"}`)
		err := spawner.c.Do(ctx, "JOB.SUBMIT", `[{"job_id":"order-9-bill","type":"child","queue":"children"},`+
			`{"job_id":"order-9-ship","type":"child","queue":"children","after":["order-9-pack"]}]`).Err()
		if err != nil {
			t.Fatalf("a worker's JOB.SUBMIT of a batch: %v", err)
		}
	}
	j.runStep("spawn", nil, func() any { spawn(); return nil })
	spawn() // a parent run again sends its children again: the same jobs
	kids := []string{"order-9-pack", "order-9-bill", "order-9-ship"}

	// It reads them, lists a job's children and follows their status.
	for _, id := range kids {
		var got struct {
			ID     string `json:"job_id"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal([]byte(do(spawner.c, "JOB.GET", id)), &got); err != nil || got.ID != id {
			t.Fatalf("JOB.GET %s by the worker's key: %+v, %v", id, got, err)
		}
	}
	if got, err := spawner.c.Do(ctx, "JOB.CHILDREN", "order-9-pack").StringSlice(); err != nil || len(got) != 2 ||
		!strings.Contains(got[1], "order-9-ship") {
		t.Fatalf("JOB.CHILDREN order-9-pack = %q, %v", got, err)
	}
	events := followStatus(t, spawner.c, "order-9-bill")
	if v, err := spawner.c.Do(ctx, "JOB.GET", "nothing-here").Result(); err != redis.Nil {
		t.Fatalf("JOB.GET of an unknown job by the worker's key = %v, %v; want nil", v, err)
	}

	args := []any{"JOBS"}
	for _, id := range kids {
		args = append(args, id)
	}
	if got := j.text("STEP.WAIT", "children", args...); got != "AWAITING never" {
		t.Fatalf("STEP.WAIT JOBS = %q", got)
	}

	// Another worker's key runs the children but reads none of them, nor
	// the parent; the spawner's key does not read the parent either (an
	// admin submitted it), nor a job it sent again that a producer had
	// submitted first.
	notOne := func(id string) string {
		return "NOPERM a worker's key reads only the jobs it submitted, and job " + id + " is not one"
	}
	refused(runner.c, notOne("order-9-pack"), "JOB.GET", "order-9-pack")
	refused(runner.c, notOne("order-9-pack"), "JOB.WAIT", "order-9-pack", "1")
	refused(runner.c, notOne("order-9-pack"), "JOB.CHILDREN", "order-9-pack")
	refused(spawner.c, notOne(parent), "JOB.GET", parent)
	refused(spawner.c, notOne(parent), "JOB.WAIT", parent, "1")
	submit(t, admin, map[string]any{"job_id": "shared-1", "type": "never", "queue": "never"})
	do(spawner.c, "JOB.SUBMIT", `{"job_id":"shared-1","type":"never","queue":"never"}`)
	refused(spawner.c, notOne("shared-1"), "JOB.GET", "shared-1")
	sub := runner.c.Subscribe(ctx, "job.order-9-bill.status")
	if _, err := sub.Receive(ctx); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("another worker's SUBSCRIBE job.order-9-bill.status = %v", err)
	}
	sub.Close()

	// The bill waits for a signal, which the spawner's key sends.
	for range 3 {
		_, d, ok := runner.pop(t, "5", "children")
		if !ok {
			t.Fatal("no child delivered")
		}
		c := stepJob{t: t, w: runner, id: d.JobID, d: d}
		if d.JobID == "order-9-bill" {
			if got := c.text("STEP.WAIT", "approval", "SIGNAL", "approve"); got != "AWAITING never" {
				t.Fatalf("the bill's STEP.WAIT SIGNAL = %q", got)
			}
			do(spawner.c, "JOB.SIGNAL", "order-9-bill", "approve", `{"by":"spawner"}`, "ID", "approve-1")
			do(spawner.c, "JOB.SIGNAL", "order-9-bill", "approve", `{"by":"spawner"}`, "ID", "approve-1")
			continue
		}
		if err := runner.update(ctx, d.JobID, map[string]any{"status": "completed", "result": d.JobID}); err != nil {
			t.Fatal(err)
		}
	}
	bill := popStep(t, runner, "children")
	if bill.id != "order-9-bill" {
		t.Fatalf("delivered %s, want the woken bill", bill.id)
	}
	if got := bill.text("STEP.WAIT", "approval", "SIGNAL", "approve"); got != `{"signal":"approve","payload":{"by":"spawner"}}` {
		t.Fatalf("the woken bill's STEP.WAIT = %s", got)
	}
	if err := runner.update(ctx, "order-9-bill", map[string]any{"status": "completed", "result": "billed"}); err != nil {
		t.Fatal(err)
	}
	expectInOrder(t, events, "awaiting approval", "signal approve", "woken approval", "completed")
	// It reads the steps of the child it submitted, as its producer;
	// another worker, which neither submitted nor ran it, does not.
	var billSteps []struct {
		StepID string `json:"step_id"`
		Kind   string `json:"kind"`
	}
	if err := json.Unmarshal([]byte(do(spawner.c, "JOB.STEPS", "order-9-bill")), &billSteps); err != nil ||
		len(billSteps) != 1 || billSteps[0].StepID != "approval" || billSteps[0].Kind != "wait" {
		t.Fatalf("JOB.STEPS order-9-bill by the worker's key that submitted it: %+v, %v", billSteps, err)
	}
	other := registerWorker(t, a, "other-1", "child")
	refused(other.c, "NOPERM only the worker holding job order-9-bill reads its steps", "JOB.STEPS", "order-9-bill")

	// It waits for a child, and the parent wakes with all three.
	var waited struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(do(spawner.c, "JOB.WAIT", "order-9-bill", "5")), &waited); err != nil || waited.Status != "completed" {
		t.Fatalf("JOB.WAIT order-9-bill by the worker's key: %+v, %v", waited, err)
	}
	again := popStep(t, spawner, "parents")
	var out struct {
		Jobs map[string]struct {
			Status string `json:"status"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(again.text("STEP.WAIT", "children", args...)), &out); err != nil || len(out.Jobs) != 3 {
		t.Fatalf("the woken parent's wait: %+v, %v", out, err)
	}
	for _, id := range kids {
		if out.Jobs[id].Status != "completed" {
			t.Errorf("child %s: %+v", id, out.Jobs[id])
		}
	}
	if err := spawner.update(context.Background(), parent, map[string]any{"status": "completed"}); err != nil {
		t.Fatal(err)
	}
}
