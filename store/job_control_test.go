package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// JOB.CANCEL ends a waiting job at once and asks a running one's holder
// to stop; a finished job cannot be cancelled, a cancelled one stays so.
func TestJobCancel(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	requested := outcome{to: "requested"}
	tests := []struct {
		from fromState
		want outcome
	}{
		{fromQueued, moves(records.StatusCancelled)},
		{fromScheduled, moves(records.StatusCancelled)},
		{fromRetrying, moves(records.StatusCancelled)},
		{fromRunning, requested},
		{fromRunningLastAttempt, requested},
		{fromCancelRequested, requested},
		{fromCompleted, refused(errState)},
		{fromFailed, refused(errState)},
		{fromCancelled, unchanged},
		{fromCancelledByHolder, unchanged},
		{fromCancelledOnRequest, unchanged},
		{fromCancelledOnRelease, unchanged},
	}
	for _, tc := range tests {
		t.Run("From"+tc.from.name, func(t *testing.T) {
			t.Parallel()
			id := "cancel-" + tc.from.name
			tc.from.build(t, b, id)
			before := b.get(t, id)
			start := time.Now()
			_, err := b.st.JobCancel(b.ctx, id)
			end := time.Now()
			after := b.get(t, id)
			checkReply(t, tc.want.reply, err, before)
			switch tc.want.to {
			case "":
				checkUntouched(t, before, after)
			case "requested":
				// Running, its holder to be told (asked again: as it was).
				want := before
				want.CancelRequested, want.UpdatedAt = true, after.UpdatedAt
				checkUntouched(t, want, after)
			default:
				if after.Status != records.StatusCancelled || after.FinishedAt == nil || !within(*after.FinishedAt, start, end) ||
					after.WorkerID != nil || after.Attempt != before.Attempt || string(after.Errors) != string(before.Errors) {
					t.Fatalf("cancelled: %+v", after)
				}
			}
		})
	}
	t.Run("TheHolderIsToldThroughItsHeartbeat", func(t *testing.T) {
		t.Parallel()
		b := newTrBundle(t)
		d := fromRunning.build(t, b, "told")
		fromRunning.build(t, b, "not-told")
		if _, err := b.st.JobCancel(b.ctx, "told"); err != nil {
			t.Fatal(err)
		}
		hb, err := b.st.WorkerHeartbeat(b.ctx, holder, nil, time.Minute)
		if err != nil || !slices.Equal(hb.Cancels, []string{"told"}) {
			t.Fatalf("heartbeat: %+v, %v; want told to cancel job told", hb, err)
		}
		// And through its next report, which ends the job.
		if _, err := b.st.JobUpdate(b.ctx, reportProgress.params("told", holder, d)); !errors.Is(err, records.ErrJobCancelled) {
			t.Fatalf("the holder's report: %v, want ErrJobCancelled", err)
		}
		if j := b.get(t, "told"); j.Status != records.StatusCancelled {
			t.Fatalf("told: %s, want cancelled", j.Status)
		}
	})
	t.Run("AMissingJob", func(t *testing.T) {
		t.Parallel()
		if _, err := b.st.JobCancel(b.ctx, "missing"); !errors.Is(err, records.ErrNotFound) {
			t.Fatalf("%v, want ErrNotFound", err)
		}
	})
}

// JOB.RETRY puts a failed or cancelled job back in its queue with its
// attempts afresh and its error history kept; a completed job is refused;
// a job waiting or running is left as it is.
func TestJobRetry(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	tests := []struct {
		from fromState
		want outcome
	}{
		{fromFailed, moves(records.StatusQueued)},
		{fromCancelled, moves(records.StatusQueued)},
		{fromCancelledByHolder, moves(records.StatusQueued)},
		{fromCancelledOnRequest, moves(records.StatusQueued)},
		{fromCancelledOnRelease, moves(records.StatusQueued)},
		{fromCompleted, refused(errState)},
		{fromQueued, unchanged},
		{fromScheduled, unchanged},
		{fromRetrying, unchanged},
		{fromRunning, unchanged},
		{fromRunningLastAttempt, unchanged},
		{fromCancelRequested, unchanged},
	}
	for _, tc := range tests {
		t.Run("From"+tc.from.name, func(t *testing.T) {
			t.Parallel()
			id := "retry-" + tc.from.name
			tc.from.build(t, b, id)
			before := b.get(t, id)
			end := time.Now()
			_, err := b.st.JobRetry(b.ctx, id)
			after := b.get(t, id)
			checkReply(t, tc.want.reply, err, before)
			if tc.want.to == "" {
				checkUntouched(t, before, after)
				return
			}
			if after.Status != records.StatusQueued || after.Attempt != 0 || after.WorkerID != nil ||
				after.CancelRequested || after.FinishedAt != nil || after.RunAt.After(end.Add(trSlack)) ||
				!slices.Equal(errorHistory(t, after), errorHistory(t, before)) {
				t.Fatalf("retried: %+v", after)
			}
			// Claimable again, as its first attempt, by a new delivery.
			j := b.claim(t, id, holder)
			if j.Attempt != 1 || j.Delivery == nil || str(j.Delivery) == str(before.Delivery) {
				t.Fatalf("claimed again at attempt %d, delivery %s (was %s)", j.Attempt, str(j.Delivery), str(before.Delivery))
			}
		})
	}
}

// claimIDs claims from queue for each named worker, one claim statement,
// with the capabilities the workers registered.
func (b *trBundle) claimIDs(t *testing.T, queue string, caps []string, workers ...string) ([]string, map[string]error) {
	t.Helper()
	out, err := b.st.JobsClaim(b.ctx, store.JobsClaimParams{Queue: queue, Workers: workers, Capabilities: caps,
		AckTimeout: time.Minute, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range out.Claimed {
		ids = append(ids, c.Job.ID)
	}
	return ids, out.Refused
}

func TestJobsClaim(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	// Submitted in this order; claimed by priority, then age.
	queueOf := func(queue string) []records.NewJob {
		var jobs []records.NewJob
		for i, prio := range []int{0, 5, 0, 5, -1} {
			j := trJob(fmt.Sprintf("%s-%d", queue, i), 2, trBackoff)
			j.Queue, j.Priority = queue, prio
			jobs = append(jobs, j)
		}
		later := trJob(queue+"-later", 2, trBackoff)
		later.Queue, later.Priority, later.RunAt = queue, 10, time.Now().Add(time.Hour)
		return append(jobs, later)
	}
	order := []int{1, 3, 0, 2, 4}

	t.Run("ByPriorityThenAgeOneAtATime", func(t *testing.T) {
		t.Parallel()
		b.submit(t, queueOf("single")...)
		for _, i := range order {
			ids, refused := b.claimIDs(t, "single", []string{"t"}, holder)
			if want := fmt.Sprintf("single-%d", i); len(ids) != 1 || ids[0] != want || len(refused) > 0 {
				t.Fatalf("claimed %q (refused %v), want %s", ids, refused, want)
			}
		}
		if ids, _ := b.claimIDs(t, "single", []string{"t"}, holder); len(ids) != 0 {
			t.Fatalf("claimed %q of a queue whose only job is not due", ids)
		}
	})
	t.Run("ByPriorityThenAgeInOneClaim", func(t *testing.T) {
		t.Parallel()
		b.submit(t, queueOf("many")...)
		out, err := b.st.JobsClaim(b.ctx, store.JobsClaimParams{Queue: "many", Workers: []string{holder, another, holder, another, holder, another},
			Capabilities: []string{"t"}, AckTimeout: time.Minute, Lease: time.Minute})
		if err != nil || len(out.Claimed) != len(order) {
			t.Fatalf("claimed %d jobs: %v", len(out.Claimed), err)
		}
		tokens := map[string]bool{}
		for n, c := range out.Claimed {
			j := b.get(t, c.Job.ID)
			if want := fmt.Sprintf("many-%d", order[n]); c.Job.ID != want || c.Job.Attempt != 1 || j.Status != records.StatusRunning ||
				str(j.WorkerID) != c.Worker || j.Attempt != 1 || j.AckDeadline == nil || str(j.Delivery) != str(c.Job.Delivery) {
				t.Fatalf("claim %d: %+v, job %+v; want %s running for its worker at attempt 1", n, c, j, want)
			}
			tokens[str(c.Job.Delivery)] = true
		}
		if len(tokens) != len(order) {
			t.Fatalf("deliveries share tokens: %v", tokens)
		}
	})
	t.Run("OnlyJobsTheWorkerCanRun", func(t *testing.T) {
		t.Parallel()
		b := newTrBundle(t)
		b.register(t, "w-tu", "t", "u")
		jobs := []records.NewJob{trJob("needs-t-u", 2, trBackoff), trJob("needs-t", 2, trBackoff), trJob("needs-nothing", 2, trBackoff)}
		for i := range jobs {
			jobs[i].Queue = "caps"
		}
		jobs[0].Requires, jobs[2].Requires = []string{"t", "u"}, []string{}
		b.submit(t, jobs...)
		// The oldest job needs what w-a lacks: it does not hold back the others.
		ids, _ := b.claimIDs(t, "caps", []string{"t"}, holder, holder, holder)
		if !slices.Equal(ids, []string{"needs-t", "needs-nothing"}) {
			t.Fatalf("w-a claimed %q", ids)
		}
		if ids, _ := b.claimIDs(t, "caps", []string{"t", "u"}, "w-tu"); !slices.Equal(ids, []string{"needs-t-u"}) {
			t.Fatalf("w-tu claimed %q", ids)
		}
	})

	notActive := []struct {
		name, worker, state string
		become              func(t *testing.T, b *trBundle, worker string)
	}{
		{"Draining", holder, records.WorkerDraining, func(t *testing.T, b *trBundle, w string) {
			if err := b.st.WorkerDrain(b.ctx, w); err != nil {
				t.Fatal(err)
			}
		}},
		{"Unregistered", holder, records.WorkerUnregistered, func(t *testing.T, b *trBundle, w string) {
			if _, err := b.st.WorkerUnregister(b.ctx, w); err != nil {
				t.Fatal(err)
			}
		}},
		{"Dead", holder, records.WorkerDead, func(t *testing.T, b *trBundle, w string) {
			// Every worker of the bundle's database stopped heartbeating.
			if _, err := b.st.WorkersMarkDead(b.ctx, 0, 100); err != nil {
				t.Fatal(err)
			}
		}},
		{"NeverRegistered", "w-nobody", records.WorkerUnregistered, func(*testing.T, *trBundle, string) {}},
	}
	for _, tc := range notActive {
		t.Run("RefusedToA"+tc.name+"Worker", func(t *testing.T) {
			t.Parallel()
			b := newTrBundle(t)
			worker := tc.worker
			tc.become(t, b, worker)
			b.submit(t, trJob("waiting", 2, trBackoff))
			before := b.get(t, "waiting")
			ids, refused := b.claimIDs(t, "waiting", []string{"t"}, worker)
			var notActive *store.WorkerNotActiveError
			if len(ids) != 0 || !errors.As(refused[worker], &notActive) || notActive.State != tc.state {
				t.Fatalf("claimed %q, refused %v; want %s refused", ids, refused, tc.state)
			}
			checkUntouched(t, before, b.get(t, "waiting"))
		})
	}
	t.Run("ADrainingWorkerKeepsWhatItHolds", func(t *testing.T) {
		t.Parallel()
		b := newTrBundle(t)
		d := fromRunning.build(t, b, "held")
		b.submit(t, trJob("next", 2, trBackoff))
		if err := b.st.WorkerDrain(b.ctx, holder); err != nil {
			t.Fatal(err)
		}
		if ids, refused := b.claimIDs(t, "next", []string{"t"}, holder); len(ids) != 0 || refused[holder] == nil {
			t.Fatalf("a draining worker claimed %q (refused %v)", ids, refused)
		}
		if _, err := b.st.JobUpdate(b.ctx, reportCompleted.params("held", holder, d)); err != nil {
			t.Fatalf("completing what it holds: %v", err)
		}
		if s := b.get(t, "held").Status; s != records.StatusCompleted {
			t.Fatalf("held: %s", s)
		}
	})
}

// JobRelease gives back a delivery that never reached its worker: queued
// again, the attempt not counted; only that delivery, only unacknowledged.
func TestJobRelease(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	claimed := func(t *testing.T, id string) records.Job {
		b.submit(t, trJob(id, 2, trBackoff))
		return b.claim(t, id, holder)
	}
	t.Run("GivesBackAnUnacknowledgedDelivery", func(t *testing.T) {
		t.Parallel()
		j := claimed(t, "release")
		notes, err := b.st.JobRelease(b.ctx, j, holder)
		if err != nil || len(notes) != 1 || notes[0].Queue != j.Queue || notes[0].N != 1 || !slices.Equal(notes[0].Requires, []string{"t"}) {
			t.Fatalf("release: %+v, %v", notes, err)
		}
		after := b.get(t, j.ID)
		if after.Status != records.StatusQueued || after.Attempt != 0 || after.WorkerID != nil ||
			after.AckDeadline != nil || after.LeaseExpiresAt != nil || after.DeadlineAt != nil || after.StartedAt != nil {
			t.Fatalf("released: %+v", after)
		}
		if again := b.claim(t, j.ID, holder); again.Attempt != 1 {
			t.Fatalf("claimed again at attempt %d, want 1", again.Attempt)
		}
	})
	t.Run("KeepsItsPlaceAmongTheFairKeys", func(t *testing.T) {
		t.Parallel()
		var jobs []records.NewJob
		for _, id := range []string{"keep-a1", "keep-a2", "keep-b1", "keep-b2"} {
			j := trJob(id, 2, trBackoff)
			j.Queue, j.FairKey = "keep-place", id[5:6]
			jobs = append(jobs, j)
		}
		b.submit(t, jobs...)
		j := b.claim(t, "keep-place", holder)
		if j.ID != "keep-a1" {
			t.Fatalf("claimed %s first", j.ID)
		}
		if _, err := b.st.JobRelease(b.ctx, j, holder); err != nil {
			t.Fatal(err)
		}
		var order []string
		for range 4 {
			order = append(order, b.claim(t, "keep-place", holder).ID)
		}
		// One batch: both keys start level, and take turns. (Placed
		// again, a1 would come last.)
		if want := "keep-a1 keep-b1 keep-a2 keep-b2"; strings.Join(order, " ") != want {
			t.Fatalf("claimed after the release: %v, want %s", order, want)
		}
	})
	t.Run("EndsAJobAskedToCancelCancelled", func(t *testing.T) {
		t.Parallel()
		j := claimed(t, "release-cancelled")
		if _, err := b.st.JobCancel(b.ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		listener := connect(b.ctx, t, b.url)
		for _, ch := range []string{store.ChannelDone, store.ChannelMoved, store.ChannelJobs} {
			if _, err := listener.Exec(b.ctx, "LISTEN "+ch); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		notes, err := b.st.JobRelease(b.ctx, j, holder)
		end := time.Now()
		if err != nil || len(notes) != 0 {
			t.Fatalf("release: %+v, %v; want no note: the job is not ready", notes, err)
		}
		after := b.get(t, j.ID)
		if after.Status != records.StatusCancelled || after.FinishedAt == nil || !within(*after.FinishedAt, start, end) ||
			!after.CancelRequested || str(after.WorkerID) != holder || after.Attempt != 1 ||
			after.AckDeadline != nil || after.LeaseExpiresAt != nil || after.DeadlineAt != nil || after.StartedAt != nil {
			t.Fatalf("released: %+v", after)
		}
		// JOB.WAIT waiters are told it ended, and every node that it left
		// running, cancelled; nobody that it is ready.
		var got []string
		for len(got) < 2 {
			ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
			n, err := listener.WaitForNotification(ctx)
			cancel()
			if err != nil {
				t.Fatalf("notifications %q, then %v", got, err)
			}
			got = append(got, n.Channel+" "+n.Payload)
		}
		moved, _ := json.Marshal(records.Moved{Namespace: records.DefaultNamespace, ID: j.ID, Status: records.StatusCancelled, Queue: j.Queue,
			Type: j.Type, Attempt: 1})
		if want := []string{store.ChannelDone + " " + j.ID, store.ChannelMoved + " " + string(moved)}; !slices.Equal(got, want) {
			t.Fatalf("notifications %q, want %q", got, want)
		}
		if ids, _ := b.claimIDs(t, j.Queue, []string{"t"}, holder); len(ids) != 0 {
			t.Fatalf("claimed %q, a cancelled job", ids)
		}
	})
	tests := []struct {
		name string
		// prepare answers the delivery to release and who releases it.
		prepare func(t *testing.T, j records.Job) (records.Job, string)
	}{
		{"AReleasedDeliveryAgain", func(t *testing.T, j records.Job) (records.Job, string) {
			if _, err := b.st.JobRelease(b.ctx, j, holder); err != nil {
				t.Fatal(err)
			}
			return j, holder
		}},
		{"AnAcknowledgedDelivery", func(t *testing.T, j records.Job) (records.Job, string) {
			b.mustUpdate(t, reportRunning.params(j.ID, holder, deliveryOf(j)))
			return j, holder
		}},
		{"AnEarlierDeliveryOfAJobDeliveredAgain", func(t *testing.T, j records.Job) (records.Job, string) {
			if _, err := b.st.JobRelease(b.ctx, j, holder); err != nil {
				t.Fatal(err)
			}
			b.claim(t, j.ID, holder)
			return j, holder
		}},
		{"AnotherWorkersDelivery", func(t *testing.T, j records.Job) (records.Job, string) { return j, another }},
		{"AFinishedJob", func(t *testing.T, j records.Job) (records.Job, string) {
			b.mustUpdate(t, reportCompleted.params(j.ID, holder, deliveryOf(j)))
			return j, holder
		}},
	}
	for _, tc := range tests {
		t.Run("Keeps"+tc.name, func(t *testing.T) {
			t.Parallel()
			j, worker := tc.prepare(t, claimed(t, "keeps-"+tc.name))
			before := b.get(t, j.ID)
			notes, err := b.st.JobRelease(b.ctx, j, worker)
			if err != nil || len(notes) != 0 {
				t.Fatalf("release: %+v, %v; want nothing released", notes, err)
			}
			checkUntouched(t, before, b.get(t, j.ID))
		})
	}
}
