package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agq/agq/internal/agqtest"
)

// STEP.WAIT JOBS refuses what it cannot wait for, word for word.
func TestStepWaitJobsRefusals(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "jobs-refusals", "jr")
	submit(t, admin, map[string]any{"job_id": "other", "type": "never", "queue": "never"})
	submit(t, admin, map[string]any{"job_id": "jr", "type": "jr", "queue": "jr"})
	j := popStep(t, w, "jr")
	many := []any{"JOBS"}
	for i := range 10001 {
		many = append(many, fmt.Sprint("j-", i))
	}
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"JOBS", "TIMEOUT", "5"}, "ERR syntax error"},
		{[]any{"JOBS", "other", "missing"}, "ERR job missing named in JOBS does not exist"},
		{[]any{"JOBS", "jr"}, "ERR job jr cannot wait for itself"},
		{many, "ERR JOBS names at most 10000 jobs"},
	} {
		if err := j.call("STEP.WAIT", "s", tc.args...).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("STEP.WAIT %.60v = %v, want %q", tc.args, err, tc.want)
		}
	}
	// A refused wait left nothing behind: the job still runs.
	if st := getStepsJob(t, admin, "jr").Status; st != "running" {
		t.Fatalf("after the refusals the job is %s", st)
	}
}

// A parent submits its children in one step (a worker key may submit)
// and awaits them in the next: it wakes after the last one ends, however
// each ended, with their statuses and results.
func TestAParentSpawnsAndAwaitsItsChildren(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "spawner", "parent", "child")
	id := submit(t, admin, map[string]any{"job_id": "fan", "type": "parent", "queue": "parents"})
	events := followStatus(t, admin, id)
	j := popStep(t, w, "parents")
	kids := j.runStep("spawn", nil, func() any {
		var ids []string
		for i := range 3 {
			doc := fmt.Sprintf(`{"job_id":"%s-child-%d","type":"child","queue":"children","payload":%d}`, id, i, i)
			kid, err := w.c.Do(ctx, "JOB.SUBMIT", doc).Text()
			if err != nil {
				t.Fatalf("a worker's JOB.SUBMIT: %v", err)
			}
			ids = append(ids, kid)
		}
		return ids
	})
	var ids []string
	if err := json.Unmarshal(kids, &ids); err != nil || len(ids) != 3 {
		t.Fatalf("spawned %s", kids)
	}
	args := []any{"JOBS"}
	for _, k := range ids {
		args = append(args, k)
	}
	if got := j.text("STEP.WAIT", "children", args...); got != "AWAITING never" {
		t.Fatalf("STEP.WAIT JOBS = %q", got)
	}
	expectInOrder(t, events, "awaiting children")
	for i := range 3 {
		_, d, ok := w.pop(t, "5", "children")
		if !ok {
			t.Fatal("no child delivered")
		}
		doc := map[string]any{"status": "completed", "result": map[string]any{"n": i}}
		if i == 1 {
			doc = map[string]any{"status": "failed", "error": "boom", "retryable": false}
		}
		if err := w.update(ctx, d.JobID, doc); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if st := getStepsJob(t, admin, id).Status; st != "awaiting" {
				t.Fatalf("after child %d ended the parent is %s", i, st)
			}
		}
	}
	j2 := popStep(t, w, "parents")
	expectInOrder(t, events, "woken")
	if j2.d.Attempt != 1 {
		t.Fatalf("the wait counted an attempt: %d", j2.d.Attempt)
	}
	var out struct {
		Jobs map[string]struct {
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
		} `json:"jobs"`
		Truncated bool `json:"jobs_truncated"`
	}
	got := j2.text("STEP.WAIT", "children", args...)
	if err := json.Unmarshal([]byte(got), &out); err != nil || len(out.Jobs) != 3 || out.Truncated {
		t.Fatalf("STEP.WAIT JOBS after the wake = %s", got)
	}
	// A result is the job's result as JOB.GET shows it.
	if c := out.Jobs["fan-child-0"]; c.Status != "completed" || !strings.Contains(string(c.Result), `{"n":0}`) {
		t.Fatalf("child 0 = %+v", c)
	}
	if c := out.Jobs["fan-child-1"]; c.Status != "failed" {
		t.Fatalf("child 1 = %+v", c)
	}
	if again := j2.text("STEP.WAIT", "children", args...); again != got {
		t.Fatalf("the completed wait answers %s, then %s", got, again)
	}
	// A wait on jobs that have all ended completes at once.
	if now := j2.text("STEP.WAIT", "again", args...); now != got {
		t.Fatalf("a wait on ended jobs = %s, want %s", now, got)
	}
}

// Results past AGQ_MAX_PAYLOAD leave statuses only, and say so.
func TestAJobsWaitTruncatesLargeResults(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "big-results", "big", "parent")
	big := strings.Repeat("x", 1500*1024)
	for i := range 2 {
		submit(t, admin, map[string]any{"job_id": fmt.Sprint("big-", i), "type": "big", "queue": "big"})
		_, d, ok := w.pop(t, "5", "big")
		if !ok {
			t.Fatal("no job delivered")
		}
		if err := w.update(ctx, d.JobID, map[string]any{"status": "completed", "result": big}); err != nil {
			t.Fatal(err)
		}
	}
	submit(t, admin, map[string]any{"job_id": "big-parent", "type": "parent", "queue": "big-parent"})
	j := popStep(t, w, "big-parent")
	got := j.text("STEP.WAIT", "both", "JOBS", "big-0", "big-1")
	if got != `{"jobs":{"big-0":{"status":"completed"},"big-1":{"status":"completed"}},"jobs_truncated":true}` {
		t.Fatalf("STEP.WAIT JOBS = %.200s", got)
	}
}

// A JOBS wait with a deadline ends with the jobs not yet ended.
func TestAJobsWaitTimesOutNamingThePending(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "jobs-timeout", "jt")
	submit(t, admin, map[string]any{"job_id": "slow-a", "type": "never", "queue": "never"})
	submit(t, admin, map[string]any{"job_id": "slow-b", "type": "never", "queue": "never"})
	if err := admin.Do(context.Background(), "JOB.CANCEL", "slow-b").Err(); err != nil {
		t.Fatal(err)
	}
	submit(t, admin, map[string]any{"job_id": "jt", "type": "jt", "queue": "jt"})
	j := popStep(t, w, "jt")
	if got := j.text("STEP.WAIT", "both", "JOBS", "slow-a", "slow-b", "TIMEOUT", "1"); !strings.HasPrefix(got, "AWAITING ") {
		t.Fatalf("STEP.WAIT = %q", got)
	}
	j2 := popStep(t, w, "jt")
	if got := j2.text("STEP.WAIT", "both", "JOBS", "slow-a", "slow-b", "TIMEOUT", "1"); got != `{"pending":["slow-a"],"timeout":true}` {
		t.Fatalf("STEP.WAIT after the deadline = %s", got)
	}
	// The awaited job's end later wakes nothing: the wait is over.
	if err := admin.Do(context.Background(), "JOB.CANCEL", "slow-a").Err(); err != nil {
		t.Fatal(err)
	}
	if st := getStepsJob(t, admin, "jt").Status; st != "running" {
		t.Fatalf("the waiter is %s", st)
	}
}

// A job cancelled while it awaited a job that never ends, then retried
// (from its wait, or whole), awaits another job in its new run: the old
// wait holds nothing back, and it wakes when that job ends.
func TestARetriedWaitForgetsTheJobsItAwaitedBefore(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "re-awaiter", "parent", "child")
	submit(t, admin, map[string]any{"job_id": "never", "type": "child", "queue": "later", "delay_seconds": 3600})
	for _, from := range []bool{true, false} {
		id, queue := "re-wait-whole", "re-whole"
		retry := []any{"JOB.RETRY", id}
		if from {
			id, queue = "re-wait-from", "re-from"
			retry = []any{"JOB.RETRY", id, "FROM", "kids"}
		}
		submit(t, admin, map[string]any{"job_id": id, "type": "parent", "queue": queue})
		if got := popStep(t, w, queue).text("STEP.WAIT", "kids", "JOBS", "never"); got != "AWAITING never" {
			t.Fatalf("%s: STEP.WAIT JOBS never = %q", id, got)
		}
		if err := admin.Do(ctx, "JOB.CANCEL", id).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.Do(ctx, retry...).Err(); err != nil {
			t.Fatalf("%v: %v", retry, err)
		}
		child := submit(t, admin, map[string]any{"job_id": id + "-child", "type": "child", "queue": queue + "-children"})
		if got := popStep(t, w, queue).text("STEP.WAIT", "kids", "JOBS", child); got != "AWAITING never" {
			t.Fatalf("%s run again: STEP.WAIT JOBS %s = %q", id, child, got)
		}
		popStep(t, w, queue+"-children")
		if err := w.update(ctx, child, map[string]any{"status": "completed", "result": 1}); err != nil {
			t.Fatal(err)
		}
		got := popStep(t, w, queue).text("STEP.WAIT", "kids", "JOBS", child)
		var out struct {
			Jobs map[string]struct {
				Status string `json:"status"`
			} `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(got), &out); err != nil || len(out.Jobs) != 1 || out.Jobs[child].Status != "completed" {
			t.Fatalf("%s woken: STEP.WAIT JOBS %s = %s", id, child, got)
		}
	}
}
