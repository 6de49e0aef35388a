package store_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// Two namespaces hold jobs of the same ids: steps, signals, waits,
// parents and walks of one never reach the other's.

// nsBundle is a transitions bundle with namespaces a and b.
type nsBundle struct {
	*trBundle
	a, b *store.Store
}

func newNSBundle(t *testing.T) *nsBundle {
	t.Helper()
	b := newTrBundle(t)
	if _, err := b.st.Pool.Exec(b.ctx, `INSERT INTO namespaces (name) VALUES ('a'), ('b') ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	return &nsBundle{trBundle: b, a: b.st.In("a"), b: b.st.In("b")}
}

// nsRow is a job as the test lays it down in a namespace, by SQL: the
// submission and claim paths are not what these tests are about.
type nsRow struct {
	ns, id, status string
	after          []string
	hasChildren    bool
	cancelledBy    string
}

func (b *nsBundle) put(t *testing.T, rows ...nsRow) {
	t.Helper()
	for _, r := range rows {
		var worker, cancelledBy *string
		if r.status == records.StatusRunning {
			w := holder
			worker = &w
		}
		if r.cancelledBy != "" {
			cancelledBy = &r.cancelledBy
		}
		if _, err := b.st.Pool.Exec(b.ctx, `
			INSERT INTO jobs (namespace, id, queue, type, requires, status, attempt, max_attempts, timeout_seconds,
				worker_id, delivery, after, has_children, cancelled_by, finished_at)
			VALUES ($1, $2, $2, 'typ', '{t}', $3, CASE WHEN $3 = 'running' THEN 1 ELSE 0 END, 3, 600,
				$4, CASE WHEN $3 = 'running' THEN gen_random_uuid() END, $5, $6, $7,
				CASE WHEN $3 IN ('completed', 'failed', 'cancelled') THEN now() END)`,
			r.ns, r.id, r.status, worker, r.after, r.hasChildren, cancelledBy); err != nil {
			t.Fatal(err)
		}
	}
}

// status is job id's status in namespace ns ("" when it has none there).
func (b *nsBundle) status(t *testing.T, ns, id string) string {
	t.Helper()
	var st string
	err := b.st.Pool.QueryRow(b.ctx, `SELECT status FROM jobs WHERE namespace = $1 AND id = $2`, ns, id).Scan(&st)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return st
}

// count counts rows of a table for a job of namespace ns.
func (b *nsBundle) count(t *testing.T, table, column, ns, id string) int {
	t.Helper()
	var n int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM `+table+` WHERE namespace = $1 AND `+column+` = $2`,
		ns, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func heldStep(id, step string) records.StepParams {
	return records.StepParams{JobID: id, StepID: step, WorkerID: holder}
}

func TestNamespacesKeepStepsApart(t *testing.T) {
	t.Parallel()
	nb := newNSBundle(t)
	nb.put(t, nsRow{ns: "a", id: "j", status: records.StatusRunning}, nsRow{ns: "b", id: "j", status: records.StatusRunning})

	t.Run("TheSameJobIDHoldsIndependentSteps", func(t *testing.T) {
		r, _, err := nb.a.StepBegin(nb.ctx, records.StepBeginParams{StepParams: heldStep("j", "s1"), Input: json.RawMessage(`1`)})
		if err != nil || !r.Execute || r.Attempt != 1 {
			t.Fatalf("begin in a: %+v, %v; want attempt 1", r, err)
		}
		if _, err := nb.a.StepComplete(nb.ctx, heldStep("j", "s1"), json.RawMessage(`"from a"`)); err != nil {
			t.Fatal(err)
		}
		// b's job has begun nothing: the same step, the same input, runs.
		r, _, err = nb.b.StepBegin(nb.ctx, records.StepBeginParams{StepParams: heldStep("j", "s1"), Input: json.RawMessage(`1`)})
		if err != nil || !r.Execute || r.Attempt != 1 || r.Output != nil {
			t.Fatalf("begin in b: %+v, %v; want attempt 1, not a's output", r, err)
		}
		as, err := nb.a.JobSteps(nb.ctx, records.JobStepsParams{JobID: "j", Limit: 10})
		if err != nil || len(as) != 1 || as[0].Status != records.StepCompleted {
			t.Fatalf("a's steps: %+v, %v", as, err)
		}
		bs, err := nb.b.JobSteps(nb.ctx, records.JobStepsParams{JobID: "j", Limit: 10})
		if err != nil || len(bs) != 1 || bs[0].Status != "running" {
			t.Fatalf("b's steps: %+v, %v", bs, err)
		}
		if n := nb.count(t, "job_steps", "job_id", "b", "j"); n != 1 {
			t.Fatalf("b's job has %d step rows, want 1", n)
		}
	})

	t.Run("AGroupOfCallsOfTwoNamespacesServesEachInItsOwn", func(t *testing.T) {
		// The default store's group, each call naming its namespace.
		call := func(ns string) records.StepParams {
			p := heldStep("j", "s2")
			p.Namespace = ns
			return p
		}
		out, _ := nb.st.StepsBegin(nb.ctx, []records.StepBeginParams{{StepParams: call("a")}, {StepParams: call("b")}})
		for i, o := range out {
			if o.Err != nil || !o.Result.Execute || o.Result.Attempt != 1 {
				t.Fatalf("begin %d: %+v", i, o)
			}
		}
		done, _ := nb.st.StepsComplete(nb.ctx, []store.StepCompletion{
			{StepParams: call("a"), Output: json.RawMessage(`"a"`)}, {StepParams: call("b"), Output: json.RawMessage(`"b"`)}})
		for i, d := range done {
			if d.Err != nil || !d.Changed {
				t.Fatalf("completion %d: %+v", i, d)
			}
		}
		for _, ns := range []string{"a", "b"} {
			steps, err := nb.st.In(ns).JobSteps(nb.ctx, records.JobStepsParams{JobID: "j", After: 1, Limit: 10})
			if err != nil || len(steps) != 1 || string(steps[0].Output) != `"`+ns+`"` {
				t.Fatalf("%s's step s2: %+v, %v; want its own output", ns, steps, err)
			}
		}
	})

	t.Run("AnotherNamespacesJobIsNotFound", func(t *testing.T) {
		nb.put(t, nsRow{ns: "a", id: "only-a", status: records.StatusRunning})
		if _, _, err := nb.b.StepBegin(nb.ctx, records.StepBeginParams{StepParams: heldStep("only-a", "s1")}); !errors.Is(err, records.ErrNotFound) {
			t.Fatalf("begin from b: %v; want ErrNotFound", err)
		}
		if _, err := nb.b.JobSteps(nb.ctx, records.JobStepsParams{JobID: "only-a", Limit: 10}); !errors.Is(err, records.ErrNotFound) {
			t.Fatalf("steps from b: %v; want ErrNotFound", err)
		}
		if _, err := nb.b.JobRetryFrom(nb.ctx, "only-a", "s1"); !errors.Is(err, records.ErrNotFound) {
			t.Fatalf("retry from b: %v; want ErrNotFound", err)
		}
	})
}

func TestNamespacesKeepSignalsApart(t *testing.T) {
	t.Parallel()
	nb := newNSBundle(t)
	nb.put(t, nsRow{ns: "a", id: "w", status: records.StatusRunning}, nsRow{ns: "b", id: "w", status: records.StatusRunning})
	for _, st := range []*store.Store{nb.a, nb.b} {
		res, _, _, err := st.StepWait(nb.ctx, records.StepWaitParams{StepParams: heldStep("w", "await"), Signal: "go"})
		if err != nil || !res.Awaiting {
			t.Fatalf("wait in %s: %+v, %v", st.Namespace(), res, err)
		}
	}
	res, _, err := nb.a.JobSignal(nb.ctx, records.SignalParams{JobID: "w", Name: "go", Payload: json.RawMessage(`1`)})
	if err != nil || !res.Stored || res.Woke != "await" {
		t.Fatalf("signal in a: %+v, %v; want stored and a's wait woken", res, err)
	}
	if st := nb.status(t, "a", "w"); st != records.StatusQueued {
		t.Errorf("a's job is %s, want queued", st)
	}
	if st := nb.status(t, "b", "w"); st != records.StatusAwaiting {
		t.Errorf("b's job is %s, want still awaiting", st)
	}
	if n := nb.count(t, "job_signals", "job_id", "b", "w"); n != 0 {
		t.Errorf("b's job holds %d signals, want none", n)
	}
	sigs, err := nb.b.JobSignals(nb.ctx, "w", 10)
	if err != nil || len(sigs) != 0 {
		t.Errorf("b's signals: %+v, %v; want none", sigs, err)
	}
	nb.put(t, nsRow{ns: "b", id: "only-b", status: records.StatusRunning})
	if _, _, err := nb.a.JobSignal(nb.ctx, records.SignalParams{JobID: "only-b", Name: "go", Payload: json.RawMessage(`1`)}); !errors.Is(err, records.ErrNotFound) {
		t.Errorf("signal from a to b's job: %v; want ErrNotFound", err)
	}
}

func TestNamespacesKeepParentsApart(t *testing.T) {
	t.Parallel()
	nb := newNSBundle(t)
	// b's child waits for b's p; a holds a job p of its own.
	nb.put(t,
		nsRow{ns: "a", id: "p", status: records.StatusRunning, hasChildren: true},
		nsRow{ns: "a", id: "a-kid", status: records.StatusPending, after: []string{"p"}},
		nsRow{ns: "b", id: "p", status: records.StatusRunning, hasChildren: true},
		nsRow{ns: "b", id: "c", status: records.StatusPending, after: []string{"p"}})
	if _, err := nb.st.Pool.Exec(nb.ctx, `INSERT INTO job_waits (namespace, parent_id, child_id) VALUES ('a', 'p', 'a-kid'), ('b', 'p', 'c')`); err != nil {
		t.Fatal(err)
	}
	kids, err := nb.b.JobChildren(nb.ctx, "p", "", 10)
	if err != nil || len(kids) != 1 || kids[0].ID != "c" {
		t.Fatalf("b's p's children: %+v, %v; want c alone", kids, err)
	}
	parents, err := nb.a.JobParentsPage(nb.ctx, "c", "", 10)
	if err != nil || len(parents) != 0 {
		t.Fatalf("c's parents read from a: %+v, %v; want none", parents, err)
	}

	// a's p ends: the trigger marks it in a; settling there, and the
	// leader's sweep, release a's child and leave b's waiting.
	if _, err := nb.st.Pool.Exec(nb.ctx, `UPDATE jobs SET status = 'completed', finished_at = now() WHERE namespace = 'a' AND id = 'p'`); err != nil {
		t.Fatal(err)
	}
	if n := nb.count(t, "dependency_checks", "job_id", "a", "p"); n != 1 {
		t.Fatalf("a's p has %d marks in a, want 1", n)
	}
	if _, err := nb.a.DependenciesSettle(nb.ctx, []string{"p"}, 100); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := nb.st.DependenciesSettle(nb.ctx, nil, 100); err != nil {
			t.Fatal(err)
		}
	}
	if st := nb.status(t, "a", "a-kid"); st != records.StatusQueued {
		t.Errorf("a's child is %s, want queued", st)
	}
	if st := nb.status(t, "b", "c"); st != records.StatusPending {
		t.Fatalf("b's child is %s after a's p ended, want pending", st)
	}
	if n := nb.count(t, "job_waits", "child_id", "b", "c"); n != 1 {
		t.Fatalf("b's child has %d waits left, want 1", n)
	}

	// b's own p failing cancels it, in b.
	if _, err := nb.st.Pool.Exec(nb.ctx, `UPDATE jobs SET status = 'failed', finished_at = now() WHERE namespace = 'b' AND id = 'p'`); err != nil {
		t.Fatal(err)
	}
	st, err := nb.st.DependenciesSettle(nb.ctx, nil, 100)
	if err != nil || st.Namespace != "b" || len(st.Cancelled) != 1 || st.Cancelled[0].ID != "c" {
		t.Fatalf("the sweep settled %+v, %v; want b's c cancelled", st, err)
	}
	if s := nb.status(t, "a", "a-kid"); s != records.StatusQueued {
		t.Errorf("a's child is %s, want still queued", s)
	}
}

func TestNamespacesKeepWalksApart(t *testing.T) {
	t.Parallel()
	nb := newNSBundle(t)
	// The same graph p → c → g in both namespaces.
	for _, ns := range []string{"a", "b"} {
		nb.put(t,
			nsRow{ns: ns, id: "p", status: records.StatusQueued, hasChildren: true},
			nsRow{ns: ns, id: "c", status: records.StatusPending, after: []string{"p"}, hasChildren: true},
			nsRow{ns: ns, id: "g", status: records.StatusPending, after: []string{"c"}})
	}
	if _, err := nb.st.Pool.Exec(nb.ctx, `
		INSERT INTO job_waits (namespace, parent_id, child_id) VALUES ('a', 'p', 'c'), ('a', 'c', 'g'), ('b', 'p', 'c'), ('b', 'c', 'g')`); err != nil {
		t.Fatal(err)
	}

	t.Run("ACascadeCancelsInItsNamespaceOnly", func(t *testing.T) {
		_, w, err := nb.a.JobCancelCascade(nb.ctx, "p", 1000)
		if err != nil {
			t.Fatal(err)
		}
		if w.Namespace != "a" || len(w.Cancelled) != 2 {
			t.Fatalf("the cascade's batch: %+v; want c and g cancelled in a", w)
		}
		for _, id := range []string{"p", "c", "g"} {
			if st := nb.status(t, "a", id); st != records.StatusCancelled {
				t.Errorf("a's %s is %s, want cancelled", id, st)
			}
		}
		for id, want := range map[string]string{"p": records.StatusQueued, "c": records.StatusPending, "g": records.StatusPending} {
			if st := nb.status(t, "b", id); st != want {
				t.Errorf("b's %s is %s after a's cascade, want %s", id, st, want)
			}
		}
		if n := nb.count(t, "job_waits", "child_id", "b", "g"); n != 1 {
			t.Errorf("b's g has %d waits, want 1", n)
		}
	})

	t.Run("ARetryRestoresInItsNamespaceOnly", func(t *testing.T) {
		// b's p fails and its end cancels c and g, in b; a's jobs stay
		// cancelled by the cascade.
		if _, err := nb.st.Pool.Exec(nb.ctx, `UPDATE jobs SET status = 'failed', finished_at = now() WHERE namespace = 'b' AND id = 'p'`); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := nb.b.DependenciesSettle(nb.ctx, []string{"p", "c"}, 100); err != nil {
				t.Fatal(err)
			}
		}
		if st := nb.status(t, "b", "g"); st != records.StatusCancelled {
			t.Fatalf("b's g is %s, want cancelled by its parent", st)
		}
		// a's c, cancelled by the cascade, names no cancelling parent; one
		// that did, of the same id, must not be restored by b's retry.
		if _, err := nb.st.Pool.Exec(nb.ctx, `UPDATE jobs SET cancelled_by = 'p' WHERE namespace = 'a' AND id = 'c'`); err != nil {
			t.Fatal(err)
		}
		if _, err := nb.b.JobRetry(nb.ctx, "p"); err != nil {
			t.Fatal(err)
		}
		for {
			w, err := nb.b.GraphWalk(nb.ctx, store.WalkRestore, []string{"p"}, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(w.Next) == 0 && !w.More {
				break
			}
		}
		if st := nb.status(t, "b", "c"); st != records.StatusPending {
			t.Errorf("b's c is %s after b's retry, want pending", st)
		}
		if st := nb.status(t, "a", "c"); st != records.StatusCancelled {
			t.Errorf("a's c is %s after b's retry, want still cancelled", st)
		}
		// The leader's sweep finds no mark of a to walk.
		w, err := nb.st.GraphWalk(nb.ctx, store.WalkRestore, nil, 100)
		if err != nil || len(w.Restored) != 0 {
			t.Fatalf("the sweep restored %+v, %v; want nothing", w, err)
		}
		if st := nb.status(t, "a", "c"); st != records.StatusCancelled {
			t.Errorf("a's c is %s after the sweep, want still cancelled", st)
		}
	})

	t.Run("AnotherNamespacesJobCannotBeCancelledOrRetried", func(t *testing.T) {
		nb.put(t, nsRow{ns: "a", id: "only-a", status: records.StatusFailed})
		if _, err := nb.b.JobCancel(nb.ctx, "only-a"); !errors.Is(err, records.ErrNotFound) {
			t.Errorf("cancel from b: %v; want ErrNotFound", err)
		}
		if _, _, err := nb.b.JobCancelCascade(nb.ctx, "only-a", 100); !errors.Is(err, records.ErrNotFound) {
			t.Errorf("cascade from b: %v; want ErrNotFound", err)
		}
		if _, err := nb.b.JobRetry(nb.ctx, "only-a"); !errors.Is(err, records.ErrNotFound) {
			t.Errorf("retry from b: %v; want ErrNotFound", err)
		}
		if st := nb.status(t, "a", "only-a"); st != records.StatusFailed {
			t.Errorf("a's job is %s, want failed still", st)
		}
	})
}

func TestExpiringWaitsWakeEachInItsNamespace(t *testing.T) {
	t.Parallel()
	nb := newNSBundle(t)
	nb.put(t, nsRow{ns: "a", id: "w", status: records.StatusRunning}, nsRow{ns: "b", id: "w", status: records.StatusRunning})
	if _, _, _, err := nb.a.StepWait(nb.ctx, records.StepWaitParams{StepParams: heldStep("w", "await"), Signal: "go", Timeout: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := nb.b.StepWait(nb.ctx, records.StepWaitParams{StepParams: heldStep("w", "await"), Signal: "go"}); err != nil {
		t.Fatal(err)
	}
	var woken map[string]records.Effects
	for len(woken) == 0 {
		var err error
		if woken, err = nb.st.WaitsExpire(nb.ctx, 100); err != nil {
			t.Fatal(err)
		}
	}
	if len(woken) != 1 || len(woken["a"].Moved) != 1 || woken["a"].Moved[0] != "w" {
		t.Fatalf("woken %+v; want a's w alone", woken)
	}
	if st := nb.status(t, "a", "w"); st != records.StatusQueued {
		t.Errorf("a's job is %s, want queued", st)
	}
	if st := nb.status(t, "b", "w"); st != records.StatusAwaiting {
		t.Errorf("b's job is %s, want awaiting (its wait has no deadline)", st)
	}
}
