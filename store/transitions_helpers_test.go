package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// The workers of a transitions bundle, and the times its jobs wait.
const (
	holder  = "w-a" // the worker that claims every job
	another = "w-b" // a registered worker that holds none of them

	// trBackoff keeps a retry in the future for the whole test: a retrying
	// job reads as queued once its run_at has come.
	trBackoff = 1000
	trSnooze  = time.Hour
	// trSlack allows for the database's clock and the test's own time.
	trSlack = 2 * time.Second
	// trType is the type of every job, counted in what a report frees.
	trType = "typ"
)

// trBundle is a store of a fresh database with ACTIVE workers able to run
// jobs needing "t". Each job has a queue of its own (named as the job),
// so that cases share the database without claiming each other's jobs.
type trBundle struct {
	ctx context.Context
	st  *store.Store
	url string
}

func newTrBundle(t *testing.T, workers ...string) *trBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	url := agqtest.NewDatabase(t)
	st, err := store.Open(ctx, store.Config{URL: url, Rules: engine.Decisions{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	b := &trBundle{ctx: ctx, st: st, url: url}
	for _, w := range append([]string{holder, another}, workers...) {
		b.register(t, w, "t")
	}
	return b
}

func (b *trBundle) register(t *testing.T, id string, caps ...string) {
	t.Helper()
	w := records.Worker{ID: id, Principal: id, Hostname: "h", AgwVersion: "1", Capabilities: caps,
		Metadata: json.RawMessage(`{}`), MaxConcurrentJobs: 10}
	if _, err := b.st.WorkerRegister(b.ctx, w, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
}

// trJob is a submission to the queue named as the job.
func trJob(id string, maxAttempts int, backoff float64) records.NewJob {
	return records.NewJob{ID: id, Queue: id, Type: trType, Requires: []string{"t"}, MaxAttempts: maxAttempts,
		RetryBackoffSeconds: backoff, TimeoutSeconds: 600}
}

func (b *trBundle) submit(t *testing.T, jobs ...records.NewJob) {
	t.Helper()
	if _, _, err := b.st.JobsSubmit(b.ctx, jobs); err != nil {
		t.Fatal(err)
	}
}

// claim claims the next job of queue for worker, polling while it is not
// yet due (a retry or snooze of a few milliseconds).
func (b *trBundle) claim(t *testing.T, queue, worker string) records.Job {
	t.Helper()
	var job records.Job
	agqtest.Eventually(t, 10*time.Second, func() error {
		out, err := b.st.JobsClaim(b.ctx, store.JobsClaimParams{Queue: queue, Workers: []string{worker},
			Capabilities: []string{"t"}, AckTimeout: time.Minute, Lease: time.Minute})
		if err != nil {
			return err
		}
		if len(out.Refused) > 0 {
			t.Fatalf("claim refused: %v", out.Refused)
		}
		if len(out.Claimed) != 1 {
			return fmt.Errorf("claimed %d jobs of %s", len(out.Claimed), queue)
		}
		job = out.Claimed[0].Job
		return nil
	})
	return job
}

func (b *trBundle) get(t *testing.T, id string) records.Job {
	t.Helper()
	j, err := b.st.JobGet(b.ctx, id)
	if err != nil {
		t.Fatalf("getting %s: %v", id, err)
	}
	return j
}

func (b *trBundle) mustUpdate(t *testing.T, p records.Report) {
	t.Helper()
	if _, err := b.st.JobUpdate(b.ctx, p); err != nil {
		t.Fatalf("%s report on %s: %v", reportName(p.Status), p.ID, err)
	}
}

func reportName(s string) string {
	if s == "" {
		return "progress"
	}
	return s
}

// delivery is what a holder's reports name: the attempt and token of the
// job's latest delivery (zero when it was never delivered).
type delivery struct {
	attempt int
	token   string
}

func deliveryOf(j records.Job) delivery {
	d := delivery{attempt: j.Attempt}
	if j.Delivery != nil {
		d.token = *j.Delivery
	}
	return d
}

// reportKind is one kind of JOB.UPDATE.
type reportKind struct {
	name      string
	status    string
	retryable bool
	raw       string
}

var (
	reportProgress      = reportKind{"Progress", "", false, `{"current_task":2,"progress_percent":40}`}
	reportRunning       = reportKind{"Running", records.StatusRunning, false, `{"status":"running"}`}
	reportCompleted     = reportKind{"Completed", records.StatusCompleted, false, `{"status":"completed","output":"ok"}`}
	reportFailed        = reportKind{"FailedRetryable", records.StatusFailed, true, `{"status":"failed","error":"boom","retryable":true}`}
	reportFailedForGood = reportKind{"FailedNotRetryable", records.StatusFailed, false, `{"status":"failed","error":"boom","retryable":false}`}
	reportCancelled     = reportKind{"Cancelled", records.StatusCancelled, false, `{"status":"cancelled"}`}
	reportSnoozed       = reportKind{"Snoozed", records.StatusSnoozed, false, `{"status":"snoozed","seconds":3600}`}

	reportKinds = []reportKind{reportProgress, reportRunning, reportCompleted, reportFailed, reportFailedForGood,
		reportCancelled, reportSnoozed}
)

// grouped reports whether a report of this kind goes in a group (JobsAck
// or JobsFinish); a snooze takes the locked path only.
func (k reportKind) grouped() bool { return k.status != records.StatusSnoozed }

// params is the report sent about job id by worker about delivery d.
func (k reportKind) params(id, worker string, d delivery) records.Report {
	p := records.Report{ID: id, WorkerID: worker, Status: k.status, Retryable: k.retryable,
		Attempt: d.attempt, Delivery: d.token, Raw: json.RawMessage(k.raw), SnoozeFor: trSnooze, MaxSnoozes: 100}
	if k.status == records.StatusFailed {
		p.Error = "boom"
	}
	return p
}

// actor is who sends a report.
type actor struct {
	name   string
	params func(k reportKind, id string, d delivery) records.Report
}

var (
	byHolder = actor{"ByItsHolder", func(k reportKind, id string, d delivery) records.Report {
		return k.params(id, holder, d)
	}}
	byAnother = actor{"ByAnotherWorker", func(k reportKind, id string, _ delivery) records.Report {
		return k.params(id, another, delivery{})
	}}
	byAdmin = actor{"ByAnAdmin", func(k reportKind, id string, _ delivery) records.Report {
		p := k.params(id, "", delivery{})
		p.Admin = true
		return p
	}}
)

// fromState builds a job in one state and answers its latest delivery.
type fromState struct {
	name  string
	build func(t *testing.T, b *trBundle, id string) delivery
}

func (b *trBundle) claimed(t *testing.T, id string) delivery {
	b.submit(t, trJob(id, 2, trBackoff))
	return deliveryOf(b.claim(t, id, holder))
}

var (
	fromQueued = fromState{"Queued", func(t *testing.T, b *trBundle, id string) delivery {
		b.submit(t, trJob(id, 2, trBackoff))
		return delivery{}
	}}
	fromScheduled = fromState{"Scheduled", func(t *testing.T, b *trBundle, id string) delivery {
		j := trJob(id, 2, trBackoff)
		j.RunAt = time.Now().Add(time.Hour)
		b.submit(t, j)
		return delivery{}
	}}
	fromRunning = fromState{"Running", func(t *testing.T, b *trBundle, id string) delivery {
		return b.claimed(t, id)
	}}
	// The second of two attempts: the first failed and was retried at once.
	fromRunningLastAttempt = fromState{"RunningItsLastAttempt", func(t *testing.T, b *trBundle, id string) delivery {
		b.submit(t, trJob(id, 2, 0))
		b.mustUpdate(t, reportFailed.params(id, holder, deliveryOf(b.claim(t, id, holder))))
		return deliveryOf(b.claim(t, id, holder))
	}}
	fromRetrying = fromState{"Retrying", func(t *testing.T, b *trBundle, id string) delivery {
		d := b.claimed(t, id)
		b.mustUpdate(t, reportFailed.params(id, holder, d))
		return d
	}}
	fromCompleted = fromState{"Completed", func(t *testing.T, b *trBundle, id string) delivery {
		d := b.claimed(t, id)
		b.mustUpdate(t, reportCompleted.params(id, holder, d))
		return d
	}}
	fromFailed = fromState{"Failed", func(t *testing.T, b *trBundle, id string) delivery {
		d := b.claimed(t, id)
		b.mustUpdate(t, reportFailedForGood.params(id, holder, d))
		return d
	}}
	fromCancelled = fromState{"CancelledWhileQueued", func(t *testing.T, b *trBundle, id string) delivery {
		b.submit(t, trJob(id, 2, trBackoff))
		if _, err := b.st.JobCancel(b.ctx, id); err != nil {
			t.Fatal(err)
		}
		return delivery{}
	}}
	fromCancelledByHolder = fromState{"CancelledByItsHolder", func(t *testing.T, b *trBundle, id string) delivery {
		d := b.claimed(t, id)
		b.mustUpdate(t, reportCancelled.params(id, holder, d))
		return d
	}}
	fromCancelRequested = fromState{"RunningWithCancelRequested", func(t *testing.T, b *trBundle, id string) delivery {
		d := b.claimed(t, id)
		if _, err := b.st.JobCancel(b.ctx, id); err != nil {
			t.Fatal(err)
		}
		return d
	}}
	// Asked to cancel between its claim and its delivery, which the pop's
	// client left: given back, it ends cancelled.
	fromCancelledOnRelease = fromState{"CancelledOnRelease", func(t *testing.T, b *trBundle, id string) delivery {
		b.submit(t, trJob(id, 2, trBackoff))
		j := b.claim(t, id, holder)
		if _, err := b.st.JobCancel(b.ctx, id); err != nil {
			t.Fatal(err)
		}
		if notes, err := b.st.JobRelease(b.ctx, j, holder); err != nil || len(notes) != 0 {
			t.Fatalf("releasing a job asked to cancel: %+v, %v", notes, err)
		}
		return deliveryOf(j)
	}}
	// Cancelled while running: the holder learnt it from its next report.
	fromCancelledOnRequest = fromState{"CancelledOnRequest", func(t *testing.T, b *trBundle, id string) delivery {
		d := fromCancelRequested.build(t, b, id)
		if _, err := b.st.JobUpdate(b.ctx, reportProgress.params(id, holder, d)); !errors.Is(err, records.ErrJobCancelled) {
			t.Fatalf("the holder's report after a cancel request: %v", err)
		}
		return d
	}}
)

// errKind is a kind of reply to a report.
type errKind int

const (
	replyOK errKind = iota
	errNotOwner
	errState
	errCancelled
	errStale
	errSnoozeLimit
)

func (k errKind) String() string {
	return [...]string{"OK", "NotOwnerError", "StateError", "ErrJobCancelled", "StaleDeliveryError", "SnoozeLimitError"}[k]
}

// checkReply checks err is of kind want; before is the job the report found.
func checkReply(t *testing.T, want errKind, err error, before records.Job) {
	t.Helper()
	var owner *records.NotOwnerError
	var state *records.StateError
	var stale *records.StaleDeliveryError
	var snoozes *records.SnoozeLimitError
	ok := false
	switch want {
	case replyOK:
		ok = err == nil
	case errNotOwner:
		ok = errors.As(err, &owner) && owner.Owner == holder
	case errState:
		ok = errors.As(err, &state)
	case errCancelled:
		ok = errors.Is(err, records.ErrJobCancelled)
	case errStale:
		ok = errors.As(err, &stale) && stale.Attempt == before.Attempt
	case errSnoozeLimit:
		ok = errors.As(err, &snoozes) && snoozes.Snoozes == before.Snoozes
	}
	if !ok {
		t.Fatalf("reply %v, want %s", err, want)
	}
}

// errorEntry is one element of a job's error history, without its time.
type errorEntry struct {
	Attempt  int    `json:"attempt"`
	WorkerID string `json:"worker_id"`
	Error    string `json:"error"`
}

func errorHistory(t *testing.T, j records.Job) []errorEntry {
	t.Helper()
	var out []errorEntry
	if len(j.Errors) > 0 {
		if err := json.Unmarshal(j.Errors, &out); err != nil {
			t.Fatalf("errors of %s: %v", j.ID, err)
		}
	}
	return out
}

func jsonEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func within(t time.Time, from, to time.Time) bool {
	return !t.Before(from.Add(-trSlack)) && !t.After(to.Add(trSlack))
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// checkUntouched fails unless the job's row is what it was.
func checkUntouched(t *testing.T, before, after records.Job) {
	t.Helper()
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the job changed:\nbefore %+v\nafter  %+v", before, after)
	}
}

// checkFreed fails unless freed counts the job once when left, else nothing.
func checkFreed(t *testing.T, freed records.Room, j records.Job, left bool) {
	t.Helper()
	want := records.Room{}
	if left {
		want.Add(j.Queue, j.Type, 1)
	}
	if !reflect.DeepEqual(freed, want) && !(freed.Empty() && want.Empty()) {
		t.Fatalf("freed %+v, want %+v", freed, want)
	}
}

// checkMoved checks the row of a job a report k moved from before to
// status to, the report sent between start and end.
func checkMoved(t *testing.T, k reportKind, to string, before, after records.Job, start, end time.Time) {
	t.Helper()
	if after.Status != to {
		t.Fatalf("status %s, want %s", after.Status, to)
	}
	history, was := errorHistory(t, after), errorHistory(t, before)
	failure := errorEntry{Attempt: before.Attempt, WorkerID: str(before.WorkerID), Error: "boom"}
	wantHistory := was
	if to == records.StatusRetrying || to == records.StatusFailed && k.status == records.StatusFailed {
		wantHistory = append(slices.Clone(was), failure)
	}
	if !slices.Equal(history, wantHistory) {
		t.Fatalf("errors %+v, want %+v", history, wantHistory)
	}
	if after.CancelRequested != before.CancelRequested {
		t.Fatalf("cancel_requested %v, want %v", after.CancelRequested, before.CancelRequested)
	}
	wantAttempt, wantWorker, wantSnoozes := before.Attempt, str(before.WorkerID), before.Snoozes
	switch to {
	case records.StatusRunning:
		// An acknowledgement: only the deadline to acknowledge goes, and
		// progress, when reported, is kept.
		wantProgress := before.Progress
		if k.status == "" {
			wantProgress = json.RawMessage(k.raw)
		}
		if after.AckDeadline != nil || after.LeaseExpiresAt == nil || after.DeadlineAt == nil ||
			!jsonEqual(after.Progress, wantProgress) || after.FinishedAt != nil {
			t.Fatalf("acknowledged: ack_deadline %v, lease %v, deadline %v, progress %s (want %s), finished_at %v",
				after.AckDeadline, after.LeaseExpiresAt, after.DeadlineAt, after.Progress, wantProgress, after.FinishedAt)
		}
	case records.StatusRetrying:
		// Due after backoff × 2^(attempt−1), ±20%.
		d := time.Duration(before.RetryBackoffSeconds * float64(time.Second) * float64(int(1)<<max(before.Attempt-1, 0)))
		lo, hi := start.Add(d*8/10), end.Add(d*12/10)
		if !within(after.RunAt, lo, hi) {
			t.Fatalf("retry due at %v, want within [%v, %v]", after.RunAt, lo, hi)
		}
		wantWorker = ""
	case records.StatusScheduled:
		// Snoozed: due later, the attempt given back.
		if !within(after.RunAt, start.Add(trSnooze), end.Add(trSnooze)) {
			t.Fatalf("snoozed until %v, want about %v from now", after.RunAt, trSnooze)
		}
		wantAttempt, wantWorker, wantSnoozes = before.Attempt-1, "", before.Snoozes+1
	case records.StatusCompleted, records.StatusFailed, records.StatusCancelled:
		if after.FinishedAt == nil || !within(*after.FinishedAt, start, end) {
			t.Fatalf("finished_at %v, want the time of the report", after.FinishedAt)
		}
		if to == records.StatusCompleted && !jsonEqual(after.Result, json.RawMessage(k.raw)) {
			t.Fatalf("result %s, want %s", after.Result, k.raw)
		}
	}
	if to != records.StatusRunning && (after.AckDeadline != nil || after.LeaseExpiresAt != nil || after.DeadlineAt != nil) {
		t.Fatalf("out of running with ack_deadline %v, lease %v, deadline %v",
			after.AckDeadline, after.LeaseExpiresAt, after.DeadlineAt)
	}
	if (to == records.StatusRetrying || to == records.StatusScheduled) && after.FinishedAt != nil {
		t.Fatalf("waiting again with finished_at %v", after.FinishedAt)
	}
	if after.Attempt != wantAttempt || str(after.WorkerID) != wantWorker || after.Snoozes != wantSnoozes {
		t.Fatalf("attempt %d, worker %q, snoozes %d; want %d, %q, %d",
			after.Attempt, str(after.WorkerID), after.Snoozes, wantAttempt, wantWorker, wantSnoozes)
	}
}

// shape is what two paths must agree on about a job, times and ids aside.
type shape struct {
	Status                  string
	Attempt, Snoozes        int
	Worker                  string
	CancelRequested         bool
	Acked, Leased, Finished bool
	Progress, Result        string
	Errors                  []errorEntry
}

func shapeOf(t *testing.T, j records.Job) shape {
	t.Helper()
	return shape{Status: j.Status, Attempt: j.Attempt, Snoozes: j.Snoozes, Worker: str(j.WorkerID),
		CancelRequested: j.CancelRequested, Acked: j.AckDeadline == nil, Leased: j.LeaseExpiresAt != nil,
		Finished: j.FinishedAt != nil, Progress: string(j.Progress), Result: string(j.Result), Errors: errorHistory(t, j)}
}
