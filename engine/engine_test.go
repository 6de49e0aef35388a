package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/internal/wakeup/listen"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// deadline bounds every wait of these tests for something that should
// happen at once.
const deadline = 10 * time.Second

type testBundle struct {
	ctx    context.Context
	engine *engine.Engine
	store  *store.Store
	hub    *wakeup.Hub
	// worker is registered and ACTIVE, able to run jobs needing "t".
	worker records.Worker
	// messages are the pub/sub messages this node's subscribers would get.
	messages *messageLog
}

// setup builds an engine over a fresh database, as a node does, with its
// hub listening and one worker registered.
func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupWith(t, func(*engine.Config) {})
}

// setupWith is setup with the engine's config changed by configure.
func setupWith(t *testing.T, configure func(*engine.Config)) *testBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := store.Open(ctx, store.Config{URL: agqtest.NewDatabase(t), Rules: engine.Decisions{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	hub := wakeup.New(wakeup.Config{Dial: listen.Dialer(st.Pool.Config().ConnString()), NodeID: "n", Send: listen.Send(st)})
	cfg := engine.Config{HeartbeatInterval: 10 * time.Second, AckTimeout: time.Minute}
	configure(&cfg)
	e := engine.New(cfg, st, hub)
	msgs := &messageLog{}
	wakeup.Listen(hub, wakeup.Messages, msgs.add)
	listening := make(chan struct{}, 1)
	wakeup.Listen(hub, wakeup.Reconnected, func(struct{}) {
		select {
		case listening <- struct{}{}:
		default:
		}
	})
	hubCtx, stopHub := context.WithCancel(context.Background())
	if err := hub.Start(hubCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hub.Stop()
		stopHub()
	})
	// Notifications sent inside transactions reach only a hub that listens.
	select {
	case <-listening:
	case <-time.After(deadline):
		t.Fatal("the hub's LISTEN connection did not come up")
	}
	b := &testBundle{ctx: ctx, engine: e, store: st, hub: hub, messages: msgs}
	b.worker = b.registerWorker(t, "w1")
	return b
}

// registerWorker registers an ACTIVE worker able to run jobs needing "t".
func (b *testBundle) registerWorker(t *testing.T, id string) records.Worker {
	t.Helper()
	w := records.Worker{ID: id, Principal: id, Hostname: "h", AgwVersion: "1", Capabilities: []string{"t"},
		Metadata: json.RawMessage(`{}`), MaxConcurrentJobs: 10}
	if err := b.engine.RegisterWorker(b.ctx, w, nil); err != nil {
		t.Fatalf("registering %s: %v", id, err)
	}
	return w
}

// newJob is a job of queue "q" due now, needing "t", retried at once.
func newJob(id string) records.NewJob {
	return records.NewJob{ID: id, Queue: "q", Type: "t", Requires: []string{"t"}, Payload: json.RawMessage(`{"n":1}`),
		MaxAttempts: 3, RetryBackoffSeconds: 0, TimeoutSeconds: 60}
}

func (b *testBundle) submit(t *testing.T, job records.NewJob) records.SubmitResult {
	t.Helper()
	res, err := b.engine.Submit(job)(b.ctx)
	if err != nil {
		t.Fatalf("submitting %s: %v", job.ID, err)
	}
	return res
}

// claimOne claims the one job w must get from queue "q".
func (b *testBundle) claimOne(t *testing.T, w records.Worker) records.Job {
	t.Helper()
	_, jobs, err := b.engine.Claim(b.ctx, w, []string{"q"}, 1)
	if err != nil {
		t.Fatalf("claiming for %s: %v", w.ID, err)
	}
	if len(jobs) != 1 {
		t.Fatalf("claimed %d jobs for %s, want 1", len(jobs), w.ID)
	}
	return jobs[0]
}

// submitAndClaim submits a job and claims it for the bundle's worker.
func (b *testBundle) submitAndClaim(t *testing.T, job records.NewJob) records.Job {
	t.Helper()
	b.submit(t, job)
	return b.claimOne(t, b.worker)
}

// report is the holder's report about the delivery of job it got.
func report(job records.Job, worker, status string) records.Report {
	r := records.Report{ID: job.ID, WorkerID: worker, Status: status, Attempt: job.Attempt}
	if job.Delivery != nil {
		r.Delivery = *job.Delivery
	}
	return r
}

func (b *testBundle) get(t *testing.T, id string) records.Job {
	t.Helper()
	j, err := b.engine.JobGet(b.ctx, id)
	if err != nil {
		t.Fatalf("getting %s: %v", id, err)
	}
	return j
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// receive waits for c's next value.
func receive[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(deadline):
		t.Fatalf("timed out waiting: %s", what)
		panic("unreachable")
	}
}

// requireJobError checks that err is a refusal about job id.
func requireJobError(t *testing.T, err error, id string) *records.JobError {
	t.Helper()
	var je *records.JobError
	if !errors.As(err, &je) {
		t.Fatalf("got %v (%T), want a *api.JobError", err, err)
	}
	if je.JobID != id {
		t.Fatalf("the refusal names job %q, want %q", je.JobID, id)
	}
	return je
}

// fakeWait is a blocked pop's or JOB.WAIT's wait: it ends at its deadline
// or when ended, and says each time it starts waiting.
type fakeWait struct {
	until   time.Time
	end     chan struct{}
	endOnce sync.Once
	waiting chan struct{}
	gone    atomic.Bool
}

func newWait(d time.Duration) *fakeWait {
	return &fakeWait{until: time.Now().Add(d), end: make(chan struct{}), waiting: make(chan struct{}, 1)}
}

// stop ends the wait as its timeout would.
func (w *fakeWait) stop() { w.endOnce.Do(func() { close(w.end) }) }

func (w *fakeWait) started() {
	select {
	case w.waiting <- struct{}{}:
	default:
	}
}

func (w *fakeWait) Next(c <-chan records.ReadyNote) (*records.ReadyNote, bool, error) {
	w.started()
	timer := time.NewTimer(time.Until(w.until))
	defer timer.Stop()
	select {
	case note := <-c:
		return &note, false, nil
	case <-timer.C:
		return nil, true, nil
	case <-w.end:
		return nil, true, nil
	}
}

func (w *fakeWait) Out() error {
	timer := time.NewTimer(time.Until(w.until))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-w.end:
	}
	return nil
}

func (w *fakeWait) Gone() bool     { return w.gone.Load() }
func (w *fakeWait) OnWake() func() { return nil }

// fakeJobWait is fakeWait as a JOB.WAIT takes it.
type fakeJobWait struct{ *fakeWait }

func (w fakeJobWait) Next(c <-chan struct{}) (bool, error) {
	w.started()
	timer := time.NewTimer(time.Until(w.until))
	defer timer.Stop()
	select {
	case <-c:
		return false, nil
	case <-timer.C:
		return true, nil
	case <-w.end:
		return true, nil
	}
}

type popResult struct {
	queue string
	jobs  []records.Job
	err   error
}

// startPop runs a blocking pop of queue "q" for w; it answers on the
// channel returned once the pop is waiting.
func (b *testBundle) startPop(t *testing.T, w records.Worker, wait *fakeWait) <-chan popResult {
	t.Helper()
	out := make(chan popResult, 1)
	refresh := func() (records.Worker, error) { return b.engine.WorkerGet(b.ctx, w.ID) }
	go func() {
		q, jobs, err := b.engine.PopWaiting(b.ctx, w, refresh, []string{"q"}, 1, wait)
		out <- popResult{q, jobs, err}
	}()
	receive(t, "the pop to wait", wait.waiting)
	return out
}

type waitResult struct {
	job   records.Job
	found bool
	err   error
}

// startWaitJob runs a JOB.WAIT for id; it answers on the channel returned
// once it is waiting, or at once when the job has ended.
func (b *testBundle) startWaitJob(t *testing.T, id string, wait *fakeWait) <-chan waitResult {
	t.Helper()
	out := make(chan waitResult, 1)
	go func() {
		j, found, err := b.engine.WaitJob(b.ctx, id, fakeJobWait{wait})
		out <- waitResult{j, found, err}
	}()
	select {
	case <-wait.waiting:
	case r := <-out:
		out <- r
	case <-time.After(deadline):
		t.Fatal("timed out waiting for JOB.WAIT to wait")
	}
	return out
}

// messageLog records the pub/sub messages published on this node.
type messageLog struct {
	mu   sync.Mutex
	msgs []wakeup.Message
}

func (l *messageLog) add(m wakeup.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, m)
}

// on returns the payloads published on channel so far, in order.
func (l *messageLog) on(channel string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.msgs {
		if m.Channel == channel {
			out = append(out, m.Payload)
		}
	}
	return out
}

// events returns the "event" field of the messages on channel that are
// about job id, in order.
func (l *messageLog) events(t *testing.T, channel, id string) []string {
	t.Helper()
	var out []string
	for _, p := range l.on(channel) {
		var ev struct {
			Event string `json:"event"`
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal([]byte(p), &ev); err != nil {
			t.Fatalf("message on %s is not JSON: %q", channel, p)
		}
		if ev.JobID == id {
			out = append(out, ev.Event)
		}
	}
	return out
}

// waitEvents waits until the events about job id on channel are want.
func (l *messageLog) waitEvents(t *testing.T, channel, id string, want ...string) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		got := l.events(t, channel, id)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(end) || len(got) > len(want) {
			t.Fatalf("events of %s on %s: got %q, want %q", id, channel, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
