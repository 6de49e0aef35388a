package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// groupBundle is a store with two registered workers.
func groupBundle(t *testing.T) (context.Context, *store.Store) {
	t.Helper()
	return storeWithWorkers(t, "w-a", "w-b")
}

// storeWithWorkers is a store of a fresh database with ACTIVE workers
// able to run jobs needing "t", retrying by agq's policy.
func storeWithWorkers(t *testing.T, ids ...string) (context.Context, *store.Store) {
	t.Helper()
	return storeWithPolicy(t, engine.Decisions{}, ids...)
}

// storeWithPolicy is storeWithWorkers with the given retry policy (nil:
// none).
func storeWithPolicy(t *testing.T, policy records.Rules, ids ...string) (context.Context, *store.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := store.Open(ctx, store.Config{URL: agqtest.NewDatabase(t), Rules: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	for _, id := range ids {
		w := records.Worker{ID: id, Principal: id, Hostname: "h", AgwVersion: "1", Capabilities: []string{"t"},
			Metadata: json.RawMessage(`{}`), MaxConcurrentJobs: 10}
		if _, err := st.WorkerRegister(ctx, w, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, st
}

// submitAndClaim submits n jobs and claims them all for worker.
func submitAndClaim(ctx context.Context, t *testing.T, st *store.Store, prefix string, n int, worker string) []records.Job {
	t.Helper()
	var jobs []records.NewJob
	for i := range n {
		jobs = append(jobs, records.NewJob{ID: fmt.Sprintf("%s-%d", prefix, i), Queue: "q", Requires: []string{"t"},
			MaxAttempts: 2, RetryBackoffSeconds: 1, TimeoutSeconds: 60})
	}
	if _, _, err := st.JobsSubmit(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	workers := make([]string, n)
	for i := range workers {
		workers[i] = worker
	}
	res, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "q", Workers: workers,
		Capabilities: []string{"t"}, AckTimeout: time.Minute, Lease: time.Minute})
	claimed, refused := res.Claimed, res.Refused
	if err != nil || len(refused) > 0 || len(claimed) != n {
		t.Fatalf("claimed %d of %d: %v %v", len(claimed), n, refused, err)
	}
	out := make([]records.Job, n)
	for i, c := range claimed {
		out[i] = c.Job
	}
	return out
}

func status(ctx context.Context, t *testing.T, st *store.Store, id string) string {
	t.Helper()
	j, err := st.JobGet(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return j.Status
}

func TestJobsFinish(t *testing.T) {
	t.Run("ARefusedMemberFailsAloneAndTheOthersCommit", func(t *testing.T) {
		ctx, st := groupBundle(t)
		jobs := submitAndClaim(ctx, t, st, "g", 5, "w-a")
		var reports []records.Report
		for i, j := range jobs {
			p := records.Report{ID: j.ID, WorkerID: "w-a", Status: records.StatusCompleted, Attempt: j.Attempt,
				Delivery: *j.Delivery, Raw: json.RawMessage(`{"status":"completed"}`)}
			switch i {
			case 1:
				p.WorkerID = "w-b" // not the holder
			case 3:
				p.Status, p.Error, p.Retryable = records.StatusFailed, "boom", true
			}
			reports = append(reports, p)
		}
		errs, fx := st.JobsFinish(ctx, reports)
		var owner *records.NotOwnerError
		if !errors.As(errs[1], &owner) || owner.Owner != "w-a" {
			t.Fatalf("the other worker's report: %v, want owned by w-a", errs[1])
		}
		for i, want := range []string{"completed", "running", "completed", "queued", "completed"} {
			if i != 1 && errs[i] != nil {
				t.Errorf("member %d: %v", i, errs[i])
			}
			// A retry due in about a second reads as retrying until then.
			if got := status(ctx, t, st, jobs[i].ID); got != want && !(want == "queued" && got == "retrying") {
				t.Errorf("job %d is %s, want %s", i, got, want)
			}
		}
		if len(fx.Done) != 3 || len(fx.Ready) != 1 || fx.Ready[0].At == 0 {
			t.Errorf("effects: %d done, ready %+v; want 3 done and one timed retry", len(fx.Done), fx.Ready)
		}
	})

	t.Run("RepeatsAndStaleDeliveriesAreTheirOwnReplies", func(t *testing.T) {
		ctx, st := groupBundle(t)
		jobs := submitAndClaim(ctx, t, st, "r", 2, "w-a")
		done := records.Report{ID: jobs[0].ID, WorkerID: "w-a", Status: records.StatusCompleted,
			Attempt: jobs[0].Attempt, Delivery: *jobs[0].Delivery}
		stale := records.Report{ID: jobs[1].ID, WorkerID: "w-a", Status: records.StatusCompleted,
			Attempt: jobs[1].Attempt, Delivery: "00000000-0000-4000-8000-000000000000"}
		// The same report twice in one group, and a report naming a
		// delivery that is not the job's latest.
		errs, _ := st.JobsFinish(ctx, []records.Report{done, done, stale})
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("a report sent twice: %v, %v; want both OK", errs[0], errs[1])
		}
		var staleErr *records.StaleDeliveryError
		if !errors.As(errs[2], &staleErr) {
			t.Fatalf("a stale delivery's report: %v", errs[2])
		}
		if got := status(ctx, t, st, jobs[1].ID); got != records.StatusRunning {
			t.Fatalf("the stale report moved its job to %s", got)
		}
		// Re-sent after a timeout, in a later group: still OK, once.
		if errs, _ := st.JobsFinish(ctx, []records.Report{done}); errs[0] != nil {
			t.Fatalf("re-sent final report: %v", errs[0])
		}
	})
}

func TestJobsSubmitEach(t *testing.T) {
	ctx, st := groupBundle(t)
	if _, _, err := st.JobsSubmit(ctx, []records.NewJob{{ID: "old", Queue: "q", MaxAttempts: 1, TimeoutSeconds: 1}}); err != nil {
		t.Fatal(err)
	}
	jobs := []records.NewJob{
		{ID: "new-1", Queue: "q", MaxAttempts: 1, TimeoutSeconds: 1, UniqueKey: "k"},
		{ID: "old", Queue: "q", MaxAttempts: 1, TimeoutSeconds: 1},
		// PostgreSQL cannot store a NUL in text: this one fails alone.
		{ID: "bad", Queue: "q", Type: "a\x00b", MaxAttempts: 1, TimeoutSeconds: 1},
		{ID: "new-2", Queue: "q", MaxAttempts: 1, TimeoutSeconds: 1, UniqueKey: "k"},
		{ID: "new-1", Queue: "q", MaxAttempts: 1, TimeoutSeconds: 1, UniqueKey: "k"},
		// An existing id with other contents, in the database and in the group.
		{ID: "old", Queue: "other", MaxAttempts: 1, TimeoutSeconds: 1},
		{ID: "new-1", Queue: "q", MaxAttempts: 2, TimeoutSeconds: 1, UniqueKey: "k"},
	}
	res, errs, notes := st.JobsSubmitEach(ctx, jobs)
	if !errors.Is(errs[2], records.ErrInvalidInput) {
		t.Errorf("the bad job: %v, want invalid input", errs[2])
	}
	want := []records.SubmitResult{{ID: "new-1", Created: true, Queue: "q", Same: true}, {ID: "old", Queue: "q", Same: true}, {},
		{ID: "new-1", Queue: "q", Same: true}, {ID: "new-1", Queue: "q", Same: true}}
	for i, w := range want {
		if i != 2 && (errs[i] != nil || res[i] != w) {
			t.Errorf("job %d: %+v, %v; want %+v", i, res[i], errs[i], w)
		}
	}
	for _, i := range []int{5, 6} {
		var exists *records.JobExistsError
		if !errors.As(errs[i], &exists) {
			t.Errorf("job %d, an id taken by other contents: %v", i, errs[i])
		}
	}
	if len(notes) != 1 || notes[0].N != 1 {
		t.Errorf("notes %+v, want one for the one created job", notes)
	}
}

// One claim statement serves the workers that may claim and says, for
// each that may not, why: drained, unregistered, never registered, or
// registered again with other capabilities.
func TestJobsClaimSaysWhyAWorkerMayNotClaim(t *testing.T) {
	ctx, st := groupBundle(t) // w-a and w-b, capabilities [t]
	for _, id := range []string{"w-drained", "w-gone", "w-other"} {
		caps := []string{"t"}
		if id == "w-other" {
			caps = []string{"t", "u"}
		}
		w := records.Worker{ID: id, Principal: id, Hostname: "h", AgwVersion: "1", Capabilities: caps,
			Metadata: json.RawMessage(`{}`), MaxConcurrentJobs: 10}
		if _, err := st.WorkerRegister(ctx, w, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.WorkerDrain(ctx, "w-drained"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.WorkerUnregister(ctx, "w-gone"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.JobsSubmit(ctx, []records.NewJob{{ID: "only", Queue: "q", Requires: []string{"t"}, MaxAttempts: 1, TimeoutSeconds: 60}}); err != nil {
		t.Fatal(err)
	}
	out, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "q",
		Workers:      []string{"w-drained", "w-gone", "w-nobody", "w-other", "w-a", "w-b"},
		Capabilities: []string{"t"}, AckTimeout: time.Minute, Lease: time.Minute})
	claimed, refused := out.Claimed, out.Refused
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || claimed[0].Worker != "w-a" || claimed[0].Job.ID != "only" || claimed[0].Job.Delivery == nil {
		t.Fatalf("claimed %+v, want the one job for w-a, the longest waiting that may claim", claimed)
	}
	want := map[string]string{
		"w-drained": "worker is DRAINING",
		"w-gone":    "worker is UNREGISTERED",
		"w-nobody":  "worker is UNREGISTERED",
		"w-other":   records.ErrCapabilitiesChanged.Error(),
	}
	if len(refused) != len(want) {
		t.Fatalf("refused %v, want %v", refused, want)
	}
	for id, msg := range want {
		if refused[id] == nil || refused[id].Error() != msg {
			t.Errorf("%s: %v, want %s", id, refused[id], msg)
		}
	}
}
