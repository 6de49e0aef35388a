package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// mpop runs LMPOP or BLMPOP and decodes [queue:<name>, [job, …]]; nil is
// no jobs.
func (w *testWorker) mpop(t *testing.T, args ...any) (string, []delivered) {
	t.Helper()
	res, err := w.c.Do(context.Background(), args...).Slice()
	if err == redis.Nil {
		return "", nil
	}
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if len(res) != 2 {
		t.Fatalf("%v answered %v, want [key, [jobs]]", args, res)
	}
	var jobs []delivered
	for _, raw := range res[1].([]any) {
		var d delivered
		if err := json.Unmarshal([]byte(raw.(string)), &d); err != nil {
			t.Fatalf("job json %q: %v", raw, err)
		}
		jobs = append(jobs, d)
	}
	return res[0].(string), jobs
}

func ids(jobs []delivered) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.JobID
	}
	return out
}

// BLMPOP and LMPOP take several jobs in the order BRPOP hands them out,
// only those the worker can run, and wait as BRPOP does.
func TestMultiPopTakesSeveralJobsInDeliveryOrder(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "mp-t", "t")
	other := registerWorker(t, a, "mp-u", "u")

	for i, job := range []map[string]any{
		{"job_id": "old-1", "type": "t"},
		{"job_id": "needs-u", "type": "u"},
		{"job_id": "old-2", "type": "t"},
		{"job_id": "urgent", "type": "t", "priority": 5},
		{"job_id": "old-3", "type": "t"},
		{"job_id": "old-4", "type": "t"},
	} {
		job["queue"] = "mp"
		if id := submit(t, admin, job); id != job["job_id"] {
			t.Fatalf("job %d: id %q", i, id)
		}
	}
	key, jobs := w.mpop(t, "BLMPOP", "1", "1", "queue:mp", "RIGHT", "COUNT", "3")
	if want := []string{"urgent", "old-1", "old-2"}; key != "queue:mp" || !slices.Equal(ids(jobs), want) {
		t.Fatalf("BLMPOP COUNT 3 = %s %v, want queue:mp %v", key, ids(jobs), want)
	}
	for _, j := range jobs {
		if j.Attempt != 1 {
			t.Fatalf("%s delivered as attempt %d", j.JobID, j.Attempt)
		}
	}
	// Queues are tried in order; the one with jobs answers.
	key, jobs = w.mpop(t, "LMPOP", "2", "queue:empty", "queue:mp", "RIGHT", "COUNT", "10")
	if want := []string{"old-3", "old-4"}; key != "queue:mp" || !slices.Equal(ids(jobs), want) {
		t.Fatalf("LMPOP COUNT 10 = %s %v, want queue:mp %v", key, ids(jobs), want)
	}
	if key, jobs = w.mpop(t, "LMPOP", "1", "queue:mp", "RIGHT"); jobs != nil {
		t.Fatalf("LMPOP of a queue holding only a job for others = %s %v", key, ids(jobs))
	}
	if _, d, ok := other.pop(t, "1", "mp"); !ok || d.JobID != "needs-u" {
		t.Fatalf("the u worker got %v %v", d.JobID, ok)
	}

	// A blocked BLMPOP is woken by a batch and takes from it.
	got := make(chan []delivered, 1)
	go func() {
		_, jobs := w.mpop(t, "BLMPOP", "10", "1", "queue:mp", "RIGHT", "COUNT", "10")
		got <- jobs
	}()
	time.Sleep(200 * time.Millisecond)
	if err := admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"late-1","queue":"mp","type":"t"},{"job_id":"late-2","queue":"mp","type":"t"}]`).Err(); err != nil {
		t.Fatal(err)
	}
	var woken []delivered
	select {
	case woken = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("a blocked BLMPOP was not woken by a submission")
	}
	if len(woken) == 1 {
		_, rest := w.mpop(t, "LMPOP", "1", "queue:mp", "RIGHT", "COUNT", "10")
		woken = append(woken, rest...)
	}
	if want := []string{"late-1", "late-2"}; !slices.Equal(ids(woken), want) {
		t.Fatalf("after the wake-up: %v, want %v", ids(woken), want)
	}

	// go-redis's own BLMPop (lower-case direction and count) reads the
	// reply as Redis's.
	submit(t, admin, map[string]any{"job_id": "typed", "queue": "mp", "type": "t"})
	key, vals, err := w.c.BLMPop(ctx, time.Second, "right", 10, "queue:mp").Result()
	if err != nil || key != "queue:mp" || len(vals) != 1 || !strings.Contains(vals[0], `"job_id":"typed"`) {
		t.Fatalf("go-redis BLMPop = %q %v, %v", key, vals, err)
	}

	start := time.Now()
	if key, jobs = w.mpop(t, "BLMPOP", "0.2", "1", "queue:mp", "RIGHT", "COUNT", "5"); jobs != nil {
		t.Fatalf("BLMPOP of an empty queue = %s %v", key, ids(jobs))
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("BLMPOP 0.2 answered nil after %v", waited)
	}

	for _, bad := range []struct {
		args []any
		want string
	}{
		{[]any{"BLMPOP", "1", "1", "queue:mp", "LEFT"}, "ERR agq queues hand out their oldest job first: pop with RIGHT"},
		{[]any{"LMPOP", "0", "queue:mp", "RIGHT"}, "ERR numkeys should be greater than 0"},
		{[]any{"LMPOP", "2", "queue:mp", "RIGHT"}, "ERR syntax error"},
		{[]any{"LMPOP", "1", "queue:mp", "RIGHT", "COUNT", "0"}, "ERR count should be between 1 and 1000"},
		{[]any{"LMPOP", "1", "mp", "RIGHT"}, "ERR keys must be queue:<name> (got 'mp')"},
		{[]any{"BLMPOP", "-1", "1", "queue:mp", "RIGHT"}, "ERR timeout is negative"},
	} {
		err := w.c.Do(ctx, bad.args...).Err()
		if err == nil || err.Error() != bad.want {
			t.Errorf("%v: %v, want %q", bad.args, err, bad.want)
		}
	}
}

// Final reports a worker pipelines are served together: they share a
// group, each gets its own reply in order, and one refused in their midst
// (a job of another worker) is that report's reply alone.
func TestPipelinedReportsShareAGroup(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "pipe-w", "t")
	other := registerWorker(t, a, "pipe-other", "t")

	const n = 40
	var batch []string
	for i := range n {
		batch = append(batch, fmt.Sprintf(`{"job_id":"p-%d","queue":"pipe","type":"t"}`, i))
	}
	if err := admin.Do(ctx, "JOB.SUBMIT", "["+strings.Join(batch, ",")+"]").Err(); err != nil {
		t.Fatal(err)
	}
	submit(t, admin, map[string]any{"job_id": "theirs", "queue": "elsewhere", "type": "t"})
	if _, d, ok := other.pop(t, "1", "elsewhere"); !ok || d.JobID != "theirs" {
		t.Fatalf("the other worker got %v %v", d.JobID, ok)
	}
	_, held := w.mpop(t, "BLMPOP", "1", "1", "queue:pipe", "RIGHT", "COUNT", fmt.Sprint(n))
	if len(held) != n {
		t.Fatalf("BLMPOP COUNT %d took %d jobs", n, len(held))
	}

	sumBefore, countBefore := groupSizes(t, a, "final_report")
	pipe := w.c.Pipeline()
	var cmds []*redis.Cmd
	for i, j := range held {
		if i == n/4 {
			cmds = append(cmds, pipe.Do(ctx, "JOB.UPDATE", "nope", `not json`))
		}
		if i == n/2 {
			cmds = append(cmds, pipe.Do(ctx, "JOB.UPDATE", "theirs", `{"status":"completed"}`))
		}
		cmds = append(cmds, pipe.Do(ctx, "JOB.UPDATE", j.JobID, `{"status":"completed"}`))
	}
	pipe.Exec(ctx)
	for i, c := range cmds {
		err := c.Err()
		if i == n/4 {
			if err == nil || err.Error() != "ERR invalid update: must be a JSON object" {
				t.Fatalf("reply %d, a report that is not JSON: %v", i, err)
			}
			continue
		}
		if i == n/2+1 {
			if err == nil || err.Error() != "ERR job theirs is owned by pipe-other" {
				t.Fatalf("reply %d, the report on another worker's job: %v", i, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	for _, j := range held {
		if raw, _ := admin.Do(ctx, "JOB.GET", j.JobID).Text(); !strings.Contains(raw, `"status":"completed"`) {
			t.Fatalf("%s after its report: %s", j.JobID, raw)
		}
	}
	if raw, _ := admin.Do(ctx, "JOB.GET", "theirs").Text(); !strings.Contains(raw, `"status":"running"`) {
		t.Fatalf("the other worker's job after the refused report: %s", raw)
	}
	sum, count := groupSizes(t, a, "final_report")
	if sum-sumBefore != n+1 || count-countBefore > (n+1)/4 {
		t.Fatalf("%d pipelined reports took %v groups serving %v reports, want a few groups", n+1, count-countBefore, sum-sumBefore)
	}
}

// A pipeline that is not only reports about different jobs runs one
// command after another: two reports about one job apply in order.
func TestPipelinedReportsAboutOneJobApplyInOrder(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "seq-w", "t")
	id := submit(t, admin, map[string]any{"queue": "seq", "type": "t"})
	if _, d, ok := w.pop(t, "1", "seq"); !ok || d.JobID != id {
		t.Fatalf("pop: %v %v", d.JobID, ok)
	}
	pipe := w.c.Pipeline()
	running := pipe.Do(ctx, "JOB.UPDATE", id, `{"status":"running"}`)
	progress := pipe.Do(ctx, "JOB.UPDATE", id, `{"current_task":1,"progress_percent":50}`)
	done := pipe.Do(ctx, "JOB.UPDATE", id, `{"status":"completed","output":"x"}`)
	late := pipe.Do(ctx, "JOB.UPDATE", id, `{"status":"failed","error":"late"}`)
	ping := pipe.Ping(ctx)
	pipe.Exec(ctx)
	for i, c := range []redis.Cmder{running, progress, done, ping} {
		if c.Err() != nil {
			t.Fatalf("command %d: %v", i, c.Err())
		}
	}
	if err := late.Err(); err == nil || err.Error() != "ERR job "+id+" is completed" {
		t.Fatalf("a failure after the completion in the same pipeline: %v", err)
	}
	if raw, _ := admin.Do(ctx, "JOB.GET", id).Text(); !strings.Contains(raw, `"status":"completed"`) {
		t.Fatalf("after the pipeline: %s", raw)
	}
}
