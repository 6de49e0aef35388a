package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// hotBundle is a store with namespaces a and b, worker wa of a and worker wb
// of b, each able to run jobs needing "t".
func hotBundle(t *testing.T) (context.Context, *store.Store) {
	t.Helper()
	ctx, st := storeWithWorkers(t, "wa", "wb")
	for _, sql := range []string{
		`INSERT INTO namespaces (name) VALUES ('a'), ('b') ON CONFLICT DO NOTHING`,
		`UPDATE workers SET namespace = 'a' WHERE worker_id = 'wa'`,
		`UPDATE workers SET namespace = 'b' WHERE worker_id = 'wb'`,
	} {
		if _, err := st.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, st
}

func nsJob(id, payload string) records.NewJob {
	return records.NewJob{ID: id, Queue: "q", Type: "t", Requires: []string{"t"}, Payload: json.RawMessage(payload),
		MaxAttempts: 2, RetryBackoffSeconds: 1, TimeoutSeconds: 60}
}

// claimIn claims up to n jobs of queue q in st's namespace for worker.
func claimIn(ctx context.Context, t *testing.T, st *store.Store, worker string, n int) store.ClaimOutcome {
	t.Helper()
	workers := make([]string, n)
	for i := range workers {
		workers[i] = worker
	}
	out, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "q", Workers: workers, Capabilities: []string{"t"},
		AckTimeout: time.Minute, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rowOf is the status and payload of job id of namespace ns, as stored.
func rowOf(ctx context.Context, t *testing.T, st *store.Store, ns, id string) (status, payload string) {
	t.Helper()
	err := st.Pool.QueryRow(ctx, `SELECT status, coalesce(payload::text, '') FROM jobs WHERE namespace = $1 AND id = $2`, ns, id).
		Scan(&status, &payload)
	if err != nil {
		t.Fatalf("job %s of %s: %v", id, ns, err)
	}
	return status, payload
}

func TestNamespacesOfTheHotPath(t *testing.T) {
	t.Run("TwoNamespacesHoldTheSameIdAndRunItIndependently", func(t *testing.T) {
		ctx, st := hotBundle(t)
		a, b := st.In("a"), st.In("b")
		// One id, other contents: each namespace creates its own job, by
		// the batch statement, the lean group statement and COPY alike.
		if res, _, err := a.JobsSubmit(ctx, []records.NewJob{nsJob("j1", `{"in":"a"}`)}); err != nil || !res[0].Created {
			t.Fatalf("a: %+v %v", res, err)
		}
		res, errs, notes := b.JobsSubmitEach(ctx, []records.NewJob{nsJob("j1", `{"in":"b"}`)})
		if errs[0] != nil || !res[0].Created {
			t.Fatalf("b's j1, whose id a holds: %+v %v", res, errs)
		}
		if len(notes) != 1 || notes[0].Namespace != "b" {
			t.Fatalf("wake-up notes %+v, want one of namespace b", notes)
		}
		many := make([]records.NewJob, 60)
		for i := range many {
			many[i] = nsJob("m"+string(rune('A'+i)), `{}`)
		}
		if _, _, err := a.JobsSubmit(ctx, many); err != nil {
			t.Fatal(err)
		}
		if res, errs, _ := b.JobsSubmitEach(ctx, many); errs[0] != nil || !res[0].Created || !res[59].Created {
			t.Fatalf("b's copy of a's 60 ids: %+v %v", res[0], errs[0])
		}
		// Sent again in its own namespace, a job is the existing one.
		if res, _, err := b.JobsSubmit(ctx, []records.NewJob{nsJob("j1", `{"in":"b"}`)}); err != nil || res[0].Created {
			t.Fatalf("b's j1 sent again: %+v %v", res, err)
		}
		var exists *records.JobExistsError
		if _, _, err := b.JobsSubmit(ctx, []records.NewJob{nsJob("j1", `{"in":"a"}`)}); !errors.As(err, &exists) {
			t.Fatalf("b's j1 with a's contents: %v, want JobExistsError", err)
		}

		got := map[string]records.Job{}
		for _, c := range claimIn(ctx, t, a, "wa", 100).Claimed {
			if c.Job.Namespace != "a" {
				t.Fatalf("a's claim delivered %+v", c.Job)
			}
			got[c.Job.ID] = c.Job
		}
		if len(got) != 61 || string(got["j1"].Payload) != `{"in": "a"}` && string(got["j1"].Payload) != `{"in":"a"}` {
			t.Fatalf("a claimed %d jobs, j1 %s; want its own 61", len(got), got["j1"].Payload)
		}
		if st, _ := rowOf(ctx, t, st, "b", "j1"); st != records.StatusQueued {
			t.Fatalf("b's j1 is %s after a's claim", st)
		}
		ja := got["j1"]
		jb := claimIn(ctx, t, b, "wb", 1).Claimed[0].Job

		// a's worker completes a's j1; b's stays running until its own
		// worker acknowledges and fails it.
		errs, fx := a.JobsFinish(ctx, []records.Report{{ID: "j1", WorkerID: "wa", Status: records.StatusCompleted,
			Attempt: ja.Attempt, Delivery: *ja.Delivery, Raw: json.RawMessage(`{"status":"completed"}`)}})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		if q := fx.Freed.Queues["a\x00q"]; q != 1 {
			t.Fatalf("room freed %+v, want 1 in a's queue q", fx.Freed)
		}
		if s, _ := rowOf(ctx, t, st, "a", "j1"); s != records.StatusCompleted {
			t.Fatalf("a's j1 is %s", s)
		}
		if s, _ := rowOf(ctx, t, st, "b", "j1"); s != records.StatusRunning {
			t.Fatalf("b's j1 is %s after a's report", s)
		}
		if errs, _ := b.JobsAck(ctx, []records.Report{{ID: "j1", WorkerID: "wb", Status: records.StatusRunning,
			Attempt: jb.Attempt, Delivery: *jb.Delivery}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		errs, fx = b.JobsFinish(ctx, []records.Report{{ID: "j1", WorkerID: "wb", Status: records.StatusFailed, Error: "boom",
			Retryable: true, Attempt: jb.Attempt, Delivery: *jb.Delivery}})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		if s, _ := rowOf(ctx, t, st, "b", "j1"); s != records.StatusRetrying {
			t.Fatalf("b's j1 is %s after its failure, want retrying", s)
		}
		if len(fx.Ready) != 1 || fx.Ready[0].Namespace != "b" {
			t.Fatalf("the retry's wake-up %+v, want one of namespace b", fx.Ready)
		}
		if s, _ := rowOf(ctx, t, st, "a", "j1"); s != records.StatusCompleted {
			t.Fatalf("a's j1 is %s after b's report", s)
		}
	})

	t.Run("AGroupOfSeveralNamespacesKeepsEachJobInItsOwn", func(t *testing.T) {
		ctx, st := hotBundle(t)
		ja, jb := nsJob("same", `{"in":"a"}`), nsJob("same", `{"in":"b"}`)
		ja.Namespace, jb.Namespace = "a", "b"
		res, errs, notes := st.JobsSubmitEach(ctx, []records.NewJob{ja, jb})
		if errs[0] != nil || errs[1] != nil || !res[0].Created || !res[1].Created {
			t.Fatalf("%+v %v", res, errs)
		}
		if len(notes) != 2 {
			t.Fatalf("wake-up notes %+v, want one a namespace", notes)
		}
		for ns, want := range map[string]string{"a": `{"in": "a"}`, "b": `{"in": "b"}`} {
			if _, p := rowOf(ctx, t, st, ns, "same"); p != want {
				t.Fatalf("%s's job holds %s", ns, p)
			}
		}
		ca, cb := claimIn(ctx, t, st.In("a"), "wa", 1).Claimed[0].Job, claimIn(ctx, t, st.In("b"), "wb", 1).Claimed[0].Job
		reports := []records.Report{
			{Namespace: "a", ID: "same", WorkerID: "wa", Status: records.StatusCompleted, Attempt: 1, Delivery: *ca.Delivery},
			{Namespace: "b", ID: "same", WorkerID: "wb", Status: records.StatusCancelled, Attempt: 1, Delivery: *cb.Delivery},
		}
		if errs, _ := st.JobsFinish(ctx, reports); errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		if s, _ := rowOf(ctx, t, st, "a", "same"); s != records.StatusCompleted {
			t.Fatalf("a's job is %s", s)
		}
		if s, _ := rowOf(ctx, t, st, "b", "same"); s != records.StatusCancelled {
			t.Fatalf("b's job is %s", s)
		}
	})

	t.Run("AClaimNeverTakesAnotherNamespacesJob", func(t *testing.T) {
		ctx, st := hotBundle(t)
		a, b := st.In("a"), st.In("b")
		if _, _, err := b.JobsSubmit(ctx, []records.NewJob{nsJob("only-b", `{}`)}); err != nil {
			t.Fatal(err)
		}
		if out := claimIn(ctx, t, a, "wa", 5); len(out.Claimed) != 0 || len(out.Refused) != 0 {
			t.Fatalf("a's claim of its empty queue q: %+v", out)
		}
		// b's worker named in a claim of a is not registered there.
		var inactive *store.WorkerNotActiveError
		if out := claimIn(ctx, t, a, "wb", 1); len(out.Claimed) != 0 || !errors.As(out.Refused["wb"], &inactive) {
			t.Fatalf("b's worker claiming in a: %+v", out)
		}
		if n, err := a.QueueDepth(ctx, "q"); err != nil || n != 0 {
			t.Fatalf("a's depth of q: %d %v", n, err)
		}
		if n, err := b.QueueDepth(ctx, "q"); err != nil || n != 1 {
			t.Fatalf("b's depth of q: %d %v", n, err)
		}
		if peek, err := a.QueuePeek(ctx, "q", 0, 10); err != nil || len(peek) != 0 {
			t.Fatalf("a's peek of q: %+v %v", peek, err)
		}
		if qs, err := a.QueueStats(ctx, ""); err != nil || len(qs) != 0 {
			t.Fatalf("a's queues: %+v %v", qs, err)
		}
		if list, err := a.JobList(ctx, records.JobListParams{Limit: 10}); err != nil || len(list) != 0 {
			t.Fatalf("a's jobs: %+v %v", list, err)
		}
		// A report from a's side finds no such job.
		if _, err := a.JobUpdate(ctx, records.Report{ID: "only-b", Admin: true, Status: records.StatusCompleted}); !errors.Is(err, records.ErrNotFound) {
			t.Fatalf("a's report on b's job: %v, want not found", err)
		}
		if _, err := a.JobCancel(ctx, "only-b"); !errors.Is(err, records.ErrNotFound) {
			t.Fatalf("a's cancel of b's job: %v, want not found", err)
		}
		if out := claimIn(ctx, t, b, "wb", 5); len(out.Claimed) != 1 {
			t.Fatalf("b's claim: %+v", out)
		}
	})

	t.Run("UniqueKeysArePerNamespace", func(t *testing.T) {
		ctx, st := hotBundle(t)
		a, b := st.In("a"), st.In("b")
		ka, kb, again := nsJob("ka", `{}`), nsJob("kb", `{}`), nsJob("ka2", `{}`)
		ka.UniqueKey, kb.UniqueKey, again.UniqueKey = "k", "k", "k"
		if res, _, err := a.JobsSubmit(ctx, []records.NewJob{ka}); err != nil || !res[0].Created {
			t.Fatalf("a: %+v %v", res, err)
		}
		if res, errs, _ := b.JobsSubmitEach(ctx, []records.NewJob{kb}); errs[0] != nil || !res[0].Created || res[0].ID != "kb" {
			t.Fatalf("b, the key a holds: %+v %v", res, errs)
		}
		if res, errs, _ := a.JobsSubmitEach(ctx, []records.NewJob{again}); errs[0] != nil || res[0].Created || res[0].ID != "ka" {
			t.Fatalf("a's key again: %+v %v, want a's job ka", res, errs)
		}
	})

	t.Run("ANamespacesCapOfRunningJobsHoldsItsClaimsOnly", func(t *testing.T) {
		ctx, st := hotBundle(t)
		a, b := st.In("a"), st.In("b")
		for _, s := range []*store.Store{a, b} {
			if _, _, err := s.JobsSubmit(ctx, []records.NewJob{nsJob("1", `{}`), nsJob("2", `{}`), nsJob("3", `{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Pool.Exec(ctx, `UPDATE namespaces SET max_running = 2 WHERE name = 'a'`); err != nil {
			t.Fatal(err)
		}
		if out := claimIn(ctx, t, a, "wa", 1); len(out.Claimed) != 1 || !out.Limited {
			t.Fatalf("a's first claim under its cap of 2: %+v", out)
		}
		if out := claimIn(ctx, t, a, "wa", 3); len(out.Claimed) != 1 {
			t.Fatalf("a's claim of 3 with room for 1: %+v", out)
		}
		if out := claimIn(ctx, t, a, "wa", 1); len(out.Claimed) != 0 {
			t.Fatalf("a's claim past its cap: %+v", out)
		}
		if out := claimIn(ctx, t, b, "wb", 3); len(out.Claimed) != 3 || out.Limited {
			t.Fatalf("b's claim, without a cap: %+v", out)
		}
		// Hand-offs wait for the cap as claims do.
		j := nsJob("4", `{}`)
		j.Hand = &records.Handoff{Worker: "wa", AckTimeout: time.Minute, Lease: time.Minute}
		if res, errs, _ := a.JobsSubmitEach(ctx, []records.NewJob{j}); errs[0] != nil || res[0].Delivered != nil {
			t.Fatalf("a job offered past a's cap: %+v %v", res[0], errs[0])
		}
	})

	t.Run("LimitsAndPausesArePerNamespace", func(t *testing.T) {
		ctx, st := hotBundle(t)
		a, b := st.In("a"), st.In("b")
		for _, s := range []*store.Store{a, b} {
			if _, _, err := s.JobsSubmit(ctx, []records.NewJob{nsJob("1", `{}`), nsJob("2", `{}`), nsJob("3", `{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		one := 1
		if _, err := a.QueueConfigure(ctx, "q", records.LimitsChange{MaxRunning: &one}); err != nil {
			t.Fatal(err)
		}
		if l, err := b.QueueLimitsGet(ctx, "q"); err != nil || l.MaxRunning != 0 {
			t.Fatalf("b's limits of q: %+v %v", l, err)
		}
		if out := claimIn(ctx, t, a, "wa", 3); len(out.Claimed) != 1 || !out.Limited {
			t.Fatalf("a's claim under its limit of 1: %+v", out)
		}
		if out := claimIn(ctx, t, b, "wb", 2); len(out.Claimed) != 2 || out.Limited {
			t.Fatalf("b's claim, unlimited: %+v", out)
		}
		// A type limit of b holds b's jobs of that type only.
		if _, err := b.TypeConfigure(ctx, "t", records.LimitsChange{MaxRunning: &one}); err != nil {
			t.Fatal(err)
		}
		if l, err := a.TypeLimitsGet(ctx, "t"); err != nil || l.MaxRunning != 0 {
			t.Fatalf("a's limits of type t: %+v %v", l, err)
		}
		if out := claimIn(ctx, t, b, "wb", 1); len(out.Claimed) != 0 {
			t.Fatalf("b's claim past its type's limit: %+v", out)
		}
		// A pause of a's queue leaves b's queue of the same name going.
		if _, err := a.QueueConfigure(ctx, "q", records.LimitsChange{MaxRunning: new(int)}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.TypeConfigure(ctx, "t", records.LimitsChange{MaxRunning: new(int)}); err != nil {
			t.Fatal(err)
		}
		if err := a.QueueSetPaused(ctx, "q", true); err != nil {
			t.Fatal(err)
		}
		if out := claimIn(ctx, t, a, "wa", 2); len(out.Claimed) != 0 {
			t.Fatalf("a's claim of its paused queue: %+v", out)
		}
		if out := claimIn(ctx, t, b, "wb", 2); len(out.Claimed) != 1 {
			t.Fatalf("b's claim while a's q is paused: %+v", out)
		}
		qa, err := a.QueueStats(ctx, "q")
		if err != nil || len(qa) != 1 || !qa[0].Paused || qa[0].Counts[records.StatusQueued] != 2 {
			t.Fatalf("a's stats of q: %+v %v", qa, err)
		}
		qb, err := b.QueueStats(ctx, "q")
		if err != nil || len(qb) != 1 || qb[0].Paused || qb[0].Counts[records.StatusRunning] != 3 {
			t.Fatalf("b's stats of q: %+v %v", qb, err)
		}
	})
}
