package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// A job offered to a waiting worker is inserted running for it, exactly as
// a claim leaves a job: attempt 1, a delivery token, its deadlines, its
// documents as the database keeps them; its holder completes it as any
// claimed job, and nobody else can claim it.
func TestAHandedJobIsDeliveredAsAClaimWouldDeliverIt(t *testing.T) {
	ctx, st := handoffStore(t)
	job := handoffJob("handed-1", "h", []string{"t"}, "w")
	job.Payload = json.RawMessage(`{"b": 1,   "a": [2, 3]}`)
	res, errs, notes := st.JobsSubmitEach(ctx, []records.NewJob{job})
	if errs[0] != nil || !res[0].Created || res[0].Delivered == nil {
		t.Fatalf("submission: %+v, %v", res[0], errs[0])
	}
	if len(notes) != 0 {
		t.Fatalf("wake-up notes %+v for a job handed over", notes)
	}
	d := res[0].Delivered
	stored, err := st.JobGet(ctx, "handed-1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Status != records.StatusRunning || stored.Attempt != 1 || stored.WorkerID == nil || *stored.WorkerID != "w" ||
		stored.Delivery == nil || stored.AckDeadline == nil || stored.LeaseExpiresAt == nil || stored.DeadlineAt == nil ||
		stored.StartedAt == nil {
		t.Fatalf("stored: %+v", stored)
	}
	if d.Status != stored.Status || d.Attempt != 1 || *d.Delivery != *stored.Delivery || *d.WorkerID != "w" ||
		d.Seq != stored.Seq || !d.RunAt.Equal(stored.RunAt) || string(d.Payload) != string(stored.Payload) ||
		d.Queue != "h" || d.Type != "t" || d.MaxAttempts != 3 || d.TimeoutSeconds != 60 || len(d.Requires) != 1 {
		t.Fatalf("delivered %+v, stored %+v", d, stored)
	}
	if deadline := stored.AckDeadline.Sub(*stored.StartedAt); deadline != 30*time.Second {
		t.Fatalf("acknowledgement deadline %v after the start, want 30s", deadline)
	}
	out, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "h", Workers: []string{"v"}, Capabilities: []string{"t"},
		AckTimeout: time.Minute, Lease: time.Minute})
	if err != nil || len(out.Claimed) != 0 {
		t.Fatalf("another claim of the queue: %+v, %v", out, err)
	}
	ferrs, _ := st.JobsFinish(ctx, []records.Report{{ID: "handed-1", WorkerID: "w", Status: "completed",
		Attempt: 1, Delivery: *d.Delivery, Raw: json.RawMessage(`{"status":"completed"}`)}})
	if ferrs[0] != nil {
		t.Fatalf("completing the handed job: %v", ferrs[0])
	}
}

// A job is handed over only where a claim would give it to that worker at
// once; otherwise it is inserted as usual, announced, and the waiting
// worker claims what it may.
func TestAJobIsHandedOverOnlyWhereAClaimWouldTakeIt(t *testing.T) {
	ctx, st := handoffStore(t)
	if err := st.WorkerDrain(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	// q-fifo holds a claimable job "w" can run: a new one may not pass it.
	if _, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{handoffJob("older", "q-fifo", []string{"t"}, "")}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if err := st.QueueSetPaused(ctx, "q-paused", true); err != nil {
		t.Fatal(err)
	}
	one := 1
	if _, err := st.QueueConfigure(ctx, "q-limited", records.LimitsChange{MaxRunning: &one}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		job  records.NewJob
	}{
		{"capabilities that do not cover it", handoffJob("caps", "q-caps", []string{"x"}, "w")},
		{"a job the worker could claim before it", handoffJob("fifo", "q-fifo", []string{"t"}, "w")},
		{"a draining worker", handoffJob("draining", "q-draining", []string{"t"}, "d")},
		{"an unregistered worker", handoffJob("nobody", "q-nobody", []string{"t"}, "nobody")},
		{"a paused queue", handoffJob("paused", "q-paused", []string{"t"}, "w")},
		{"a queue with limits", handoffJob("limited", "q-limited", []string{"t"}, "w")},
	}
	for _, c := range cases {
		res, errs, notes := st.JobsSubmitEach(ctx, []records.NewJob{c.job})
		if errs[0] != nil || !res[0].Created || res[0].Delivered != nil {
			t.Fatalf("%s: %+v, %v", c.name, res[0], errs[0])
		}
		if len(notes) != 1 || notes[0].Queue != c.job.Queue || notes[0].N != 1 {
			t.Fatalf("%s: notes %+v", c.name, notes)
		}
		if j, err := st.JobGet(ctx, c.job.ID); err != nil || j.Status != records.StatusQueued || j.Attempt != 0 || j.Delivery != nil {
			t.Fatalf("%s: stored %+v, %v", c.name, j, err)
		}
	}
	// 64 jobs scheduled for later fill the bounded look at q-busy.
	later := make([]records.NewJob, 64)
	for i := range later {
		later[i] = handoffJob(fmt.Sprintf("later-%d", i), "q-busy", []string{"x"}, "")
		later[i].RunAt = time.Now().Add(time.Hour)
	}
	if _, errs, _ := st.JobsSubmitEach(ctx, later); errs[0] != nil {
		t.Fatal(errs[0])
	}
	res, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{handoffJob("busy", "q-busy", []string{"t"}, "w")})
	if errs[0] != nil || res[0].Delivered != nil {
		t.Fatalf("past 64 jobs scheduled for later: %+v, %v", res[0], errs[0])
	}
	// Limits on another job type leave the hand-off alone; limits on the
	// job's own type stop it, the job waiting for a claim that counts them.
	if _, err := st.TypeConfigure(ctx, "other", records.LimitsChange{MaxRunning: &one}); err != nil {
		t.Fatal(err)
	}
	res, errs, _ = st.JobsSubmitEach(ctx, []records.NewJob{handoffJob("other-typed", "q-typed", []string{"t"}, "w")})
	if errs[0] != nil || res[0].Delivered == nil {
		t.Fatalf("with another type limited: %+v, %v", res[0], errs[0])
	}
	if _, err := st.TypeConfigure(ctx, "t", records.LimitsChange{MaxRunning: &one}); err != nil {
		t.Fatal(err)
	}
	res, errs, _ = st.JobsSubmitEach(ctx, []records.NewJob{handoffJob("typed", "q-typed2", []string{"t"}, "w")})
	if errs[0] != nil || res[0].Delivered != nil {
		t.Fatalf("with its own type limited: %+v, %v", res[0], errs[0])
	}
	if j, err := st.JobGet(ctx, "typed"); err != nil || j.Status != records.StatusQueued {
		t.Fatalf("with its own type limited: stored %+v, %v", j, err)
	}
}

// Jobs that the worker's claim would not take before the offered one do
// not hold it back: jobs scheduled for later, jobs due now of a lower
// priority, and jobs it cannot run.
func TestJobsAfterTheOfferedOneDoNotHoldItBack(t *testing.T) {
	ctx, st := handoffStore(t)
	later := handoffJob("later", "q", []string{"t"}, "")
	later.RunAt = time.Now().Add(time.Hour)
	lower := handoffJob("lower", "q", []string{"x"}, "")
	alsoLater := handoffJob("also-later", "q2", []string{"t"}, "")
	alsoLater.RunAt = later.RunAt
	if _, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{later, lower, alsoLater}); errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatal(errs)
	}
	if res, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{handoffJob("now", "q2", []string{"t"}, "w")}); errs[0] != nil || res[0].Delivered == nil {
		t.Fatalf("offered before a job scheduled for later: %+v, %v", res[0], errs[0])
	}
	offered := handoffJob("offered", "q", []string{"t"}, "w")
	offered.Priority = 5
	res, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{offered})
	if errs[0] != nil || res[0].Delivered == nil {
		t.Fatalf("offered past later and lower jobs: %+v, %v", res[0], errs[0])
	}
	// Nor does a job due now that the worker cannot run: its claim would
	// pass it by too.
	same := handoffJob("same", "q", []string{"t"}, "w")
	if res, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{same}); errs[0] != nil || res[0].Delivered == nil {
		t.Fatalf("offered behind a job the worker cannot run: %+v, %v", res[0], errs[0])
	}
	// A job due now that it can run comes first.
	if _, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{handoffJob("runnable", "q", []string{"t"}, "")}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if res, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{handoffJob("behind", "q", []string{"t"}, "w")}); errs[0] != nil || res[0].Delivered != nil {
		t.Fatalf("offered behind a job due now: %+v, %v", res[0], errs[0])
	}
}

// In a group, each offered job is handed over on its own: two to one
// worker's two pops, the one re-sent and the one not offered inserted as
// usual; the re-sent job keeps its first outcome.
func TestAGroupHandsOverEachOfferedJob(t *testing.T) {
	ctx, st := handoffStore(t)
	if _, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{handoffJob("again", "g2", []string{"t"}, "")}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	group := []records.NewJob{
		handoffJob("g-1", "g", []string{"t"}, "w"),
		handoffJob("g-2", "g", []string{"t"}, ""),
		handoffJob("g-3", "g", nil, "w"),
		handoffJob("again", "g2", []string{"t"}, "w"),
	}
	res, errs, notes := st.JobsSubmitEach(ctx, group)
	for i, e := range errs {
		if e != nil {
			t.Fatalf("job %d: %v", i, e)
		}
	}
	if res[0].Delivered == nil || res[2].Delivered == nil || res[1].Delivered != nil || res[3].Delivered != nil || res[3].Created {
		t.Fatalf("outcomes %+v", res)
	}
	if *res[0].Delivered.Delivery == *res[2].Delivered.Delivery {
		t.Fatal("two hand-offs share a delivery token")
	}
	if len(notes) != 1 || notes[0].Queue != "g" || notes[0].N != 1 {
		t.Fatalf("notes %+v, want one for g-2", notes)
	}
	if j, err := st.JobGet(ctx, "again"); err != nil || j.Status != records.StatusQueued {
		t.Fatalf("the re-sent job: %+v, %v", j, err)
	}
}

// handoffStore has the workers the hand-off tests offer jobs to.
func handoffStore(t *testing.T) (context.Context, *store.Store) {
	t.Helper()
	return storeWithWorkers(t, "w", "d")
}

// handoffJob is a job due now, offered to worker unless worker is "".
func handoffJob(id, queue string, requires []string, worker string) records.NewJob {
	j := records.NewJob{ID: id, Queue: queue, Type: "t", Requires: requires, MaxAttempts: 3, TimeoutSeconds: 60,
		RetryBackoffSeconds: 1, Payload: json.RawMessage(fmt.Sprintf(`{"id":%q}`, id))}
	if worker != "" {
		j.Hand = &records.Handoff{Worker: worker, AckTimeout: 30 * time.Second, Lease: time.Minute}
	}
	return j
}
