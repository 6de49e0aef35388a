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
	"github.com/agq/agq/internal/config"
)

type childView struct {
	Status          string            `json:"status"`
	After           []string          `json:"after"`
	PendingParents  int               `json:"pending_parents"`
	OnParentFailure string            `json:"on_parent_failure"`
	Errors          []json.RawMessage `json:"errors"`
}

func getChild(t *testing.T, c *redis.Client, id string) childView {
	t.Helper()
	raw, err := c.Do(context.Background(), "JOB.GET", id).Text()
	if err != nil {
		t.Fatalf("JOB.GET %s: %v", id, err)
	}
	var v childView
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// finish pops the job named from queue and reports it with status.
func (w *testWorker) finish(t *testing.T, queue, want, status string) {
	t.Helper()
	_, d, ok := w.pop(t, "2", queue)
	if !ok || d.JobID != want {
		t.Fatalf("popped %+v (ok=%v), want %s", d, ok, want)
	}
	doc := map[string]any{"status": status, "delivery": d.Delivery}
	if status == "failed" {
		doc["error"], doc["retryable"] = "boom", false
	} else {
		doc["output"] = "out of " + want
	}
	if err := w.update(context.Background(), d.JobID, doc); err != nil {
		t.Fatalf("JOB.UPDATE %s: %v", d.JobID, err)
	}
}

func waitStatus(t *testing.T, c *redis.Client, id, want string) {
	t.Helper()
	agqtest.Eventually(t, 5*time.Second, func() error {
		if got := getChild(t, c, id).Status; got != want {
			return fmt.Errorf("job %s is %s, want %s", id, got, want)
		}
		return nil
	})
}

func TestAfterRefusals(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	submit(t, admin, map[string]any{"job_id": "p1", "queue": "refusals"})
	for _, tc := range []struct{ doc, want string }{
		{`{"job_id":"c1","after":["nope"]}`, "ERR job nope named in after does not exist"},
		{`{"job_id":"c1","after":["c1"]}`, "ERR job c1 named in after does not exist"},
		{`[{"job_id":"c1","after":["p1"]},{"job_id":"c2","after":["nope"]}]`, "ERR job 1: job nope named in after does not exist"},
		{`[{"job_id":"c1","after":["c2"]},{"job_id":"c2"}]`, "ERR job 0: job c2 named in after does not exist"},
		{`{"job_id":"c1","after":[]}`, "ERR invalid job: after must name 1 to 10000 jobs"},
		{`{"job_id":"c1","after":["p1","p1"]}`, "ERR invalid job: after names job p1 twice"},
		{`{"job_id":"c1","after":["p1"],"on_parent_failure":"ignore"}`, `ERR invalid job: on_parent_failure must be "cancel" or "run"`},
	} {
		err := admin.Do(ctx, "JOB.SUBMIT", tc.doc).Err()
		if err == nil || err.Error() != tc.want {
			t.Errorf("JOB.SUBMIT %s: %v, want %s", tc.doc, err, tc.want)
		}
	}
	many := make([]string, 10001)
	for i := range many {
		many[i] = fmt.Sprintf("p%d", i)
	}
	doc, _ := json.Marshal(map[string]any{"after": many})
	if err := admin.Do(ctx, "JOB.SUBMIT", string(doc)).Err(); err == nil || !strings.Contains(err.Error(), "after must name 1 to 10000 jobs") {
		t.Errorf("10,001 parents: %v", err)
	}
	for _, id := range []string{"c1", "c2"} {
		if err := admin.Do(ctx, "JOB.GET", id).Err(); err != redis.Nil {
			t.Errorf("JOB.GET %s after the refusals: %v, want nil", id, err)
		}
	}
}

func TestChildWaitsForItsParents(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w := registerWorker(t, a, "deps-w", "t")
	ids, err := admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"a","queue":"g","type":"t"},{"job_id":"b","queue":"g","type":"t"},
		{"job_id":"c","queue":"g","type":"t","after":["a","b"],"unique_key":"k"}]`).StringSlice()
	if err != nil || len(ids) != 3 {
		t.Fatalf("JOB.SUBMIT graph: %v %v", ids, err)
	}
	v := getChild(t, admin, "c")
	if v.Status != "pending" || v.PendingParents != 2 || strings.Join(v.After, ",") != "a,b" || v.OnParentFailure != "cancel" {
		t.Fatalf("child: %+v", v)
	}
	// It holds its unique_key.
	if err := admin.Do(ctx, "JOB.SUBMIT", `{"job_id":"c-again","queue":"g","unique_key":"k"}`).Val(); err != "c" {
		t.Fatalf("unique_key held by the pending job: %v", err)
	}
	n, err := admin.Do(ctx, "JOB.LIST", "STATUS", "pending").Slice()
	if err != nil || len(n[1].([]any)) != 1 {
		t.Fatalf("JOB.LIST STATUS pending: %v %v", n, err)
	}
	w.finish(t, "g", "a", "completed")
	if v := getChild(t, admin, "c"); v.Status != "pending" || v.PendingParents != 1 {
		t.Fatalf("child after one parent: %+v", v)
	}
	if _, d, ok := w.pop(t, "0.2", "g"); !ok || d.JobID != "b" {
		t.Fatalf("popped %+v, want b (never the pending child)", d)
	} else if err := w.update(ctx, "b", map[string]any{"status": "completed", "delivery": d.Delivery}); err != nil {
		t.Fatal(err)
	}
	w.finish(t, "g", "c", "completed")
	// LPUSH counts a pending job among those it pushed.
	if n, err := admin.Do(ctx, "LPUSH", "queue:lp", `{"job_id":"lp-1","queue":"lp"}`, `{"job_id":"lp-2","queue":"lp","after":["lp-1"]}`).Int(); err != nil || n != 2 {
		t.Fatalf("LPUSH of a parent and its child: %d, %v", n, err)
	}
	if n, err := admin.Do(ctx, "LLEN", "queue:lp").Int(); err != nil || n != 1 {
		t.Fatalf("LLEN with a pending job: %d, %v", n, err)
	}
	// A child of ended parents is not pending at all.
	if _, err := admin.Do(ctx, "JOB.SUBMIT", `{"job_id":"d","queue":"g","type":"t","after":["a","c"]}`).Result(); err != nil {
		t.Fatal(err)
	}
	if v := getChild(t, admin, "d"); v.Status != "queued" || v.PendingParents != 0 {
		t.Fatalf("child of ended parents: %+v", v)
	}
}

type parentsView struct {
	JobID            string `json:"job_id"`
	Delivery         string `json:"delivery"`
	ParentsTruncated bool   `json:"parents_truncated"`
	Parents          map[string]struct {
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
	} `json:"parents"`
}

func (w *testWorker) popParents(t *testing.T, queue string) parentsView {
	t.Helper()
	res, err := w.c.Do(context.Background(), "BRPOP", "queue:"+queue, "2").StringSlice()
	if err != nil {
		t.Fatalf("BRPOP: %v", err)
	}
	var v parentsView
	if err := json.Unmarshal([]byte(res[1]), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPoppedChildCarriesItsParents(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) { c.MaxPayload = 4096 })
	admin := a.Admin(t)
	ctx := context.Background()
	w := registerWorker(t, a, "parents-w", "t")
	big := strings.Repeat("x", 3000)
	if _, err := admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"p1","queue":"pq","type":"t"},{"job_id":"p2","queue":"pq","type":"t"},
		{"job_id":"small","queue":"pq","type":"t","after":["p1"]},{"job_id":"both","queue":"pq","type":"t","after":["p1","p2"]}]`).Result(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"p1", "p2"} {
		_, d, _ := w.pop(t, "2", "pq")
		if d.JobID != p {
			t.Fatalf("popped %s, want %s", d.JobID, p)
		}
		if err := w.update(ctx, p, map[string]any{"status": "completed", "delivery": d.Delivery, "out": big}); err != nil {
			t.Fatal(err)
		}
	}
	// Each child is released when its last parent's report commits; the
	// two releases may commit in either order.
	popped := map[string]parentsView{}
	for range 2 {
		v := w.popParents(t, "pq")
		popped[v.JobID] = v
	}
	v := popped["small"]
	if v.JobID != "small" || v.ParentsTruncated || v.Parents["p1"].Status != "completed" || !strings.Contains(string(v.Parents["p1"].Result), big) {
		t.Fatalf("small: %+v", v)
	}
	v = popped["both"]
	if v.JobID != "both" || !v.ParentsTruncated || v.Parents["p2"].Status != "completed" || v.Parents["p2"].Result != nil && string(v.Parents["p2"].Result) != "null" {
		t.Fatalf("both: %+v", v)
	}
	// Its holder reads them page by page, each within the limit.
	seen := map[string]bool{}
	cursor := "0"
	for {
		page, err := w.c.Do(ctx, "JOB.PARENTS", "both", "CURSOR", cursor).Slice()
		if err != nil {
			t.Fatalf("JOB.PARENTS: %v", err)
		}
		var m map[string]struct {
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(page[1].(string)), &m); err != nil {
			t.Fatal(err)
		}
		for id, p := range m {
			if p.Status != "completed" || !strings.Contains(string(p.Result), big) {
				t.Fatalf("JOB.PARENTS %s: %+v", id, p)
			}
			seen[id] = true
		}
		if cursor = page[0].(string); cursor == "0" {
			break
		}
	}
	if len(seen) != 2 {
		t.Fatalf("JOB.PARENTS gave %v", seen)
	}
	other := registerWorker(t, a, "other-w", "t")
	if err := other.c.Do(ctx, "JOB.PARENTS", "both").Err(); err == nil || err.Error() != "ERR job both is owned by parents-w" {
		t.Fatalf("JOB.PARENTS by another worker: %v", err)
	}
}

func TestParentFailureCascades(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w := registerWorker(t, a, "cascade-w", "t")
	// root → l1 → l2 → l3 (cancel), and root → runner (run).
	if _, err := admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"root","queue":"cq","type":"t"},
		{"job_id":"l1","queue":"cq","type":"t","after":["root"]},
		{"job_id":"l2","queue":"cq","type":"t","after":["l1"]},
		{"job_id":"l3","queue":"cq","type":"t","after":["l2"]},
		{"job_id":"runner","queue":"cq","type":"t","after":["root"],"on_parent_failure":"run"}]`).Result(); err != nil {
		t.Fatal(err)
	}
	w.finish(t, "cq", "root", "failed")
	for _, id := range []string{"l1", "l2", "l3"} {
		waitStatus(t, admin, id, "cancelled")
	}
	if v := getChild(t, admin, "l1"); len(v.Errors) != 1 || !strings.Contains(string(v.Errors[0]), "parent root failed") {
		t.Fatalf("l1's errors: %s", v.Errors)
	}
	if v := getChild(t, admin, "l2"); !strings.Contains(string(v.Errors[0]), "parent l1 cancelled") {
		t.Fatalf("l2's errors: %s", v.Errors)
	}
	v := w.popParents(t, "cq")
	if v.JobID != "runner" || v.Parents["root"].Status != "failed" {
		t.Fatalf("runner: %+v", v)
	}
	if err := w.update(ctx, "runner", map[string]any{"status": "completed", "delivery": v.Delivery}); err != nil {
		t.Fatal(err)
	}
	// Retrying the parent restores the jobs its failure cancelled, and
	// the graph runs to its end.
	if err := admin.Do(ctx, "JOB.RETRY", "root").Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"l1", "l2", "l3"} {
		if v := getChild(t, admin, id); v.Status != "pending" || v.PendingParents != 1 {
			t.Fatalf("%s after the retry: %+v", id, v)
		}
	}
	if got := getChild(t, admin, "runner").Status; got != "completed" {
		t.Fatalf("runner after the retry: %s", got)
	}
	for _, id := range []string{"root", "l1", "l2", "l3"} {
		w.finish(t, "cq", id, "completed")
	}
	waitStatus(t, admin, "l3", "completed")
	// A child retried while its parent runs waits again.
	if _, err := admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"rp","queue":"cq3","type":"t"},{"job_id":"rc","queue":"cq3","type":"t","after":["rp"]}]`).Result(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "JOB.CANCEL", "rc").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "JOB.RETRY", "rc").Err(); err != nil {
		t.Fatal(err)
	}
	if v := getChild(t, admin, "rc"); v.Status != "pending" || v.PendingParents != 1 {
		t.Fatalf("a child retried while its parent waits: %+v", v)
	}
	w.finish(t, "cq3", "rp", "completed")
	w.finish(t, "cq3", "rc", "completed")

	// JOB.CANCEL of a pending job cancels it and its cancel children.
	if _, err := admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"top","queue":"cq2","type":"t","delay_seconds":3600},
		{"job_id":"mid","queue":"cq2","type":"t","after":["top"]},
		{"job_id":"low","queue":"cq2","type":"t","after":["mid"]}]`).Result(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "JOB.CANCEL", "mid").Err(); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, admin, "mid", "cancelled")
	waitStatus(t, admin, "low", "cancelled")
	if got := getChild(t, admin, "top").Status; got != "scheduled" {
		t.Fatalf("the parent of the cancelled job: %s", got)
	}
}

func TestLeadersSweepReleasesWhatNoReportSettled(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w := registerWorker(t, a, "sweep-w", "t")
	if _, err := admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"sp","queue":"sq","type":"t"},
		{"job_id":"sc","queue":"sq","type":"t","after":["sp"],"on_parent_failure":"run"}]`).Result(); err != nil {
		t.Fatal(err)
	}
	_, d, _ := w.pop(t, "2", "sq")
	// A cancellation asked of the running parent ends it through the
	// worker's report on the locked path, which leaves the settling to
	// the leader's sweep.
	if err := admin.Do(ctx, "JOB.CANCEL", "sp").Err(); err != nil {
		t.Fatal(err)
	}
	_ = w.update(ctx, "sp", map[string]any{"status": "cancelled", "delivery": d.Delivery})
	waitStatus(t, admin, "sp", "cancelled")
	waitStatus(t, admin, "sc", "queued")
}

// A parent the watchdog ends — its timeout passed on its last attempt —
// releases its child at once, not at a later sweep: the child is popped
// soon after the parent's end.
func TestAParentTheWatchdogEndsReleasesItsChildPromptly(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) { c.HeartbeatInterval = time.Second })
	admin := a.Admin(t)
	ctx := context.Background()
	holder, waiter := registerWorker(t, a, "wd-holder", "t"), registerWorker(t, a, "wd-waiter", "t")
	if _, err := admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"wdp","queue":"wdq","type":"t","max_attempts":1,"timeout_seconds":1},
		{"job_id":"wdc","queue":"wdc","type":"t","after":["wdp"],"on_parent_failure":"run"}]`).Result(); err != nil {
		t.Fatal(err)
	}
	if _, d, ok := holder.pop(t, "2", "wdq"); !ok || d.JobID != "wdp" {
		t.Fatalf("popped %+v", d)
	}
	// The holder heartbeats but never reports: the watchdog fails the
	// parent once its timeout and a heartbeat interval's grace passed.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
				holder.c.Do(ctx, "WORKER.HEARTBEAT", "wd-holder")
				// The waiter too, on another connection of its pool than
				// its blocked pop's: alive however long the sweep takes.
				waiter.c.Do(ctx, "WORKER.HEARTBEAT", "wd-waiter")
			}
		}
	}()
	_, d, ok := waiter.pop(t, "15", "wdc")
	popped := time.Now()
	if !ok || d.JobID != "wdc" {
		t.Fatalf("the child was not popped: %+v", d)
	}
	raw, err := admin.Do(ctx, "JOB.GET", "wdp").Text()
	if err != nil {
		t.Fatal(err)
	}
	var parent struct {
		Status     string    `json:"status"`
		FinishedAt time.Time `json:"finished_at"`
	}
	if err := json.Unmarshal([]byte(raw), &parent); err != nil || parent.Status != "failed" {
		t.Fatalf("the parent: %s (%v)", raw, err)
	}
	t.Logf("the child was popped %v after its parent failed", popped.Sub(parent.FinishedAt))
	if gap := popped.Sub(parent.FinishedAt); gap > 500*time.Millisecond {
		t.Fatalf("the child was popped %v after its parent failed", gap)
	}
}

// A parent failed by its step (STEP.FAIL on its last attempt) releases its
// child at once, as a failed report does, not at the leader's next sweep
// (every second): each of eight children is popped soon after its parent
// failed.
func TestAParentAStepFailsReleasesItsChildPromptly(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	holder, waiter := registerWorker(t, a, "sf-holder", "t"), registerWorker(t, a, "sf-waiter", "t")
	var slowest time.Duration
	for i := range 8 {
		parent, child := fmt.Sprintf("sfp-%d", i), fmt.Sprintf("sfc-%d", i)
		graph := fmt.Sprintf(`[{"job_id":%q,"queue":"sfq","type":"t","max_attempts":1},
			{"job_id":%q,"queue":"sfc","type":"t","after":[%q],"on_parent_failure":"run"}]`, parent, child, parent)
		if err := admin.Do(ctx, "JOB.SUBMIT", graph).Err(); err != nil {
			t.Fatal(err)
		}
		_, d, ok := holder.pop(t, "2", "sfq")
		if !ok || d.JobID != parent {
			t.Fatalf("popped %+v", d)
		}
		if err := holder.c.Do(ctx, "STEP.BEGIN", parent, "charge", "DELIVERY", d.Delivery).Err(); err != nil {
			t.Fatal(err)
		}
		reply, err := holder.c.Do(ctx, "STEP.FAIL", parent, "charge", `{"message":"declined"}`, "DELIVERY", d.Delivery).Text()
		failed := time.Now()
		if err != nil || reply != `{"retry":false}` {
			t.Fatalf("STEP.FAIL: %q, %v", reply, err)
		}
		_, d, ok = waiter.pop(t, "5", "sfc")
		if !ok || d.JobID != child {
			t.Fatalf("the child was not popped: %+v", d)
		}
		slowest = max(slowest, time.Since(failed))
		if err := waiter.update(ctx, child, map[string]any{"status": "completed", "delivery": d.Delivery}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the slowest child was popped %v after its parent failed", slowest)
	if slowest > 500*time.Millisecond {
		t.Fatalf("a child was popped %v after its parent failed", slowest)
	}
}

// A parent ended by its worker's WORKER.UNREGISTER — its cancellation was
// asked while the worker held it — releases its child at once, not at the
// leader's next sweep (every second): each of eight children is popped
// soon after its parent's worker left.
func TestAParentItsWorkerLeavesCancelledReleasesItsChildPromptly(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	waiter := registerWorker(t, a, "ul-waiter", "t")
	var slowest time.Duration
	for i := range 8 {
		parent, child := fmt.Sprintf("ulp-%d", i), fmt.Sprintf("ulc-%d", i)
		holder := registerWorker(t, a, fmt.Sprintf("ul-holder-%d", i), "t")
		graph := fmt.Sprintf(`[{"job_id":%q,"queue":"ulq","type":"t"},
			{"job_id":%q,"queue":"ulc","type":"t","after":[%q],"on_parent_failure":"run"}]`, parent, child, parent)
		if err := admin.Do(ctx, "JOB.SUBMIT", graph).Err(); err != nil {
			t.Fatal(err)
		}
		if _, d, ok := holder.pop(t, "2", "ulq"); !ok || d.JobID != parent {
			t.Fatalf("popped %+v", d)
		}
		if err := admin.Do(ctx, "JOB.CANCEL", parent).Err(); err != nil {
			t.Fatal(err)
		}
		if err := holder.c.Do(ctx, "WORKER.UNREGISTER", fmt.Sprintf("ul-holder-%d", i)).Err(); err != nil {
			t.Fatal(err)
		}
		left := time.Now()
		waitStatus(t, admin, parent, "cancelled")
		_, d, ok := waiter.pop(t, "5", "ulc")
		if !ok || d.JobID != child {
			t.Fatalf("the child was not popped: %+v", d)
		}
		slowest = max(slowest, time.Since(left))
		if err := waiter.update(ctx, child, map[string]any{"status": "completed", "delivery": d.Delivery}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the slowest child was popped %v after its parent's worker left", slowest)
	if slowest > 500*time.Millisecond {
		t.Fatalf("a child was popped %v after its parent's worker left", slowest)
	}
}

// A parent its worker's WORKER.REGISTER ends — the worker restarted
// without it, on its last attempt — releases its child at once, not at
// the leader's next sweep: each of eight children is popped soon after.
func TestAParentItsWorkerRestartedWithoutReleasesItsChildPromptly(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	holder, waiter := registerWorker(t, a, "rs-holder", "t"), registerWorker(t, a, "rs-waiter", "t")
	again := `{"worker_id":"rs-holder","hostname":"test-host","agw_version":"0.1.0","capabilities":{"tools":["t"]},"running_jobs":[]}`
	var slowest time.Duration
	for i := range 8 {
		parent, child := fmt.Sprintf("rsp-%d", i), fmt.Sprintf("rsc-%d", i)
		graph := fmt.Sprintf(`[{"job_id":%q,"queue":"rsq","type":"t","max_attempts":1},
			{"job_id":%q,"queue":"rsc","type":"t","after":[%q],"on_parent_failure":"run"}]`, parent, child, parent)
		if err := admin.Do(ctx, "JOB.SUBMIT", graph).Err(); err != nil {
			t.Fatal(err)
		}
		_, d, ok := holder.pop(t, "2", "rsq")
		if !ok || d.JobID != parent {
			t.Fatalf("popped %+v", d)
		}
		// Acknowledged: a registration that does not list it ends it.
		if err := holder.update(ctx, parent, map[string]any{"status": "running", "delivery": d.Delivery}); err != nil {
			t.Fatal(err)
		}
		if err := holder.c.Do(ctx, "WORKER.REGISTER", again).Err(); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		waitStatus(t, admin, parent, "failed")
		_, d, ok = waiter.pop(t, "5", "rsc")
		if !ok || d.JobID != child {
			t.Fatalf("the child was not popped: %+v", d)
		}
		slowest = max(slowest, time.Since(restarted))
		if err := waiter.update(ctx, child, map[string]any{"status": "completed", "delivery": d.Delivery}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the slowest child was popped %v after its parent's worker restarted", slowest)
	if slowest > 500*time.Millisecond {
		t.Fatalf("a child was popped %v after its parent's worker restarted", slowest)
	}
}

// A running job JOB.CANCEL marked ends cancelled at its holder's next call,
// whichever it is — an acknowledgement, a snooze, a step's sleep — and each
// path tells the same: job.<id>.status hears "cancelled", and the child
// waiting for the job is settled right after the commit, not at the
// leader's sweep. Each case runs four times; the median time from the call
// to the child's pop is what the leader's sweep (every 0.5–1 s) could not
// give.
func TestACancelledJobItsHolderReportsOnAnnouncesItAndSettlesItsChild(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := ctxT(t)
	holder, waiter := registerWorker(t, a, "cr-holder", "t"), registerWorker(t, a, "cr-waiter", "t")
	calls := map[string]func(id, delivery string) error{
		"acknowledgement": func(id, delivery string) error {
			return holder.update(ctx, id, map[string]any{"status": "running", "delivery": delivery})
		},
		"snooze": func(id, delivery string) error {
			return holder.update(ctx, id, map[string]any{"status": "snoozed", "seconds": 60, "delivery": delivery})
		},
		"sleep": func(id, delivery string) error {
			return holder.c.Do(ctx, "STEP.SLEEP", id, "nap", "60", "DELIVERY", delivery).Err()
		},
	}
	for name, call := range calls {
		var took []time.Duration
		for i := range 4 {
			parent, child := fmt.Sprintf("cr-%s-%d", name, i), fmt.Sprintf("cr-%s-%d-child", name, i)
			graph := fmt.Sprintf(`[{"job_id":%q,"queue":"crq","type":"t"},
				{"job_id":%q,"queue":"crc","type":"t","after":[%q],"on_parent_failure":"run"}]`, parent, child, parent)
			if err := admin.Do(ctx, "JOB.SUBMIT", graph).Err(); err != nil {
				t.Fatal(err)
			}
			status := admin.Subscribe(ctx, "job."+parent+".status")
			if _, err := status.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			_, d, ok := holder.pop(t, "2", "crq")
			if !ok || d.JobID != parent {
				t.Fatalf("popped %+v", d)
			}
			if err := admin.Do(ctx, "JOB.CANCEL", parent).Err(); err != nil {
				t.Fatal(err)
			}
			popped := make(chan delivered, 1)
			go func() {
				_, d, _ := waiter.pop(t, "10", "crc")
				popped <- d
			}()
			time.Sleep(50 * time.Millisecond) // the waiter's BRPOP parked
			sent := time.Now()
			if err := call(parent, d.Delivery); err == nil || !strings.Contains(err.Error(), "cancelled") {
				t.Fatalf("%s of a job cancelled: %v, want its cancellation", name, err)
			}
			if c := <-popped; c.JobID != child {
				t.Fatalf("%s: the child was not popped: %+v", name, c)
			}
			took = append(took, time.Since(sent))
			if err := waiter.update(ctx, child, map[string]any{"status": "completed"}); err != nil {
				t.Fatal(err)
			}
			var events []string
			for !slices.Contains(events, "cancelled/cancelled") {
				select {
				case m := <-status.Channel():
					var s statusMsg
					if err := json.Unmarshal([]byte(m.Payload), &s); err != nil {
						t.Fatal(err)
					}
					events = append(events, s.Event+"/"+s.Status)
				case <-time.After(5 * time.Second):
					t.Fatalf("%s: job.%s.status heard %v, not its cancellation", name, parent, events)
				}
			}
			status.Close()
		}
		slices.Sort(took)
		t.Logf("%s: the child was popped %v after the call", name, took)
		if median := took[len(took)/2]; median > 300*time.Millisecond {
			t.Errorf("%s: the child was popped %v after the call, at the median", name, median)
		}
	}
}

func TestResubmittingAChildWithOtherParentsIsRefused(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "JOB.SUBMIT", `[{"job_id":"p1","queue":"rs","delay_seconds":3600},{"job_id":"p2","queue":"rs","delay_seconds":3600},
		{"job_id":"kid","queue":"rs","after":["p1","p2"]},{"job_id":"plain","queue":"rs"}]`).Err(); err != nil {
		t.Fatal(err)
	}
	const refused = "ERR job %s already exists with different contents"
	for _, tc := range []struct{ doc, want string }{
		// The same job, its parents in another order: the same set.
		{`{"job_id":"kid","queue":"rs","after":["p1","p2"]}`, ""},
		{`{"job_id":"kid","queue":"rs","after":["p2","p1"],"on_parent_failure":"cancel"}`, ""},
		{`[{"job_id":"kid","queue":"rs","after":["p2","p1"]}]`, ""},
		{`{"job_id":"plain","queue":"rs"}`, ""},
		{`{"job_id":"plain","queue":"rs","on_parent_failure":"run"}`, ""},
		{`{"job_id":"kid","queue":"rs","after":["p1"]}`, fmt.Sprintf(refused, "kid")},
		{`{"job_id":"kid","queue":"rs","after":["p1","p2","plain"]}`, fmt.Sprintf(refused, "kid")},
		{`{"job_id":"kid","queue":"rs"}`, fmt.Sprintf(refused, "kid")},
		{`{"job_id":"kid","queue":"rs","after":["p1","p2"],"on_parent_failure":"run"}`, fmt.Sprintf(refused, "kid")},
		{`{"job_id":"plain","queue":"rs","after":["p1"]}`, fmt.Sprintf(refused, "plain")},
		{`[{"job_id":"p3","queue":"rs"},{"job_id":"kid","queue":"rs","after":["p1","p3"]}]`, "ERR job 1: " + fmt.Sprintf(refused, "kid")[4:]},
		{`[{"job_id":"p3","queue":"rs"},{"job_id":"plain","queue":"rs","after":["p3"]}]`, "ERR job 1: " + fmt.Sprintf(refused, "plain")[4:]},
		// Twice in one batch, with other parents the second time.
		{`[{"job_id":"twin","queue":"rs","after":["p1"]},{"job_id":"twin","queue":"rs","after":["p2"]}]`, "ERR job 1: " + fmt.Sprintf(refused, "twin")[4:]},
	} {
		err := admin.Do(ctx, "JOB.SUBMIT", tc.doc).Err()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("JOB.SUBMIT %s: %v, want %q", tc.doc, err, tc.want)
		}
	}
	// Pipelined, each on its own: the other parents are refused too.
	pipe := admin.Pipeline()
	same := pipe.Do(ctx, "JOB.SUBMIT", `{"job_id":"kid","queue":"rs","after":["p2","p1"]}`)
	other := pipe.Do(ctx, "JOB.SUBMIT", `{"job_id":"kid","queue":"rs","after":["p2"]}`)
	_, _ = pipe.Exec(ctx)
	if id, err := same.Text(); err != nil || id != "kid" {
		t.Errorf("pipelined re-send: %q, %v", id, err)
	}
	if err := other.Err(); err == nil || err.Error() != fmt.Sprintf(refused, "kid") {
		t.Errorf("pipelined re-send with other parents: %v", err)
	}
	v := getChild(t, admin, "kid")
	if strings.Join(v.After, ",") != "p1,p2" || v.OnParentFailure != "cancel" || v.PendingParents != 2 {
		t.Fatalf("kid after the refusals: %+v", v)
	}
	for _, id := range []string{"p3", "twin"} {
		if err := admin.Do(ctx, "JOB.GET", id).Err(); err != redis.Nil {
			t.Errorf("JOB.GET %s of a refused batch: %v", id, err)
		}
	}
}
