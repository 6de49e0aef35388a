package commands_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// followStatus follows job.<id>.status and hands each event's name, with
// its step or signal, to the returned channel.
func followStatus(t *testing.T, c *redis.Client, id string) <-chan string {
	t.Helper()
	ctx := ctxT(t)
	sub := c.Subscribe(ctx, "job."+id+".status")
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 64)
	go func() {
		for m := range sub.Channel() {
			var ev struct {
				Event  string `json:"event"`
				StepID string `json:"step_id"`
				Signal string `json:"signal"`
			}
			json.Unmarshal([]byte(m.Payload), &ev)
			out <- strings.Join(strings.Fields(ev.Event+" "+ev.StepID+" "+ev.Signal), " ")
		}
	}()
	return out
}

// expectInOrder waits for each of want, in order, among the events seen.
func expectInOrder(t *testing.T, events <-chan string, want ...string) {
	t.Helper()
	var seen []string
	deadline := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case ev := <-events:
			seen = append(seen, ev)
			if ev == want[0] {
				want = want[1:]
			}
		case <-deadline:
			t.Fatalf("events %v seen, still waiting for %v", seen, want)
		}
	}
}

type awaitStepView struct {
	StepID   string          `json:"step_id"`
	Kind     string          `json:"kind"`
	Status   string          `json:"status"`
	Output   json.RawMessage `json:"output"`
	Deadline json.RawMessage `json:"deadline"`
}

func awaitSteps(t *testing.T, c *redis.Client, id string) []awaitStepView {
	t.Helper()
	raw, err := c.Do(context.Background(), "JOB.STEPS", id).Text()
	if err != nil {
		t.Fatalf("JOB.STEPS: %v", err)
	}
	var steps []awaitStepView
	if err := json.Unmarshal([]byte(raw), &steps); err != nil {
		t.Fatalf("JOB.STEPS %s: %v", raw, err)
	}
	return steps
}

// A signal is stored once per ID, by any key that may send it, and the
// refusals are worded as the protocol says.
func TestJobSignalStoresOnceAndRefusesClearly(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "signaller", "s")
	producer := a.Client(t, redis.Options{Username: "prod", Password: a.CreateKey(t, "producer", "prod")})
	id := submit(t, admin, map[string]any{"type": "s", "queue": "signals"})
	for _, c := range []*redis.Client{admin, producer, w.c, w.c} {
		if got, err := c.Do(ctx, "JOB.SIGNAL", id, "approve", `{"by":"ann"}`, "ID", "approval-1").Text(); err != nil || got != "OK" {
			t.Fatalf("JOB.SIGNAL: %q %v", got, err)
		}
	}
	if got, err := producer.Do(ctx, "JOB.SIGNAL", id, "note", `"no id"`).Text(); err != nil || got != "OK" {
		t.Fatalf("JOB.SIGNAL without ID: %q %v", got, err)
	}
	db, err := pgx.Connect(ctx, a.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM job_signals WHERE job_id = $1`, id).Scan(&n); err != nil || n != 2 {
		t.Fatalf("signals stored: %d %v, want 2 (one re-sent three times)", n, err)
	}

	ended := submit(t, admin, map[string]any{"type": "s", "queue": "ended"})
	if err := admin.Do(ctx, "JOB.CANCEL", ended).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"JOB.SIGNAL", "no-such-job", "approve", "{}"}, "ERR no such job no-such-job"},
		{[]any{"JOB.SIGNAL", ended, "approve", "{}"}, "ERR job " + ended + " has ended"},
		{[]any{"JOB.SIGNAL", id, "bad name", "{}"}, "ERR signal name must be 1-128 letters, digits, '_', '-', '.' or ':'"},
		{[]any{"JOB.SIGNAL", id, strings.Repeat("n", 129), "{}"}, "ERR signal name must be 1-128 letters, digits, '_', '-', '.' or ':'"},
		{[]any{"JOB.SIGNAL", id, "approve", "{not json"}, "ERR invalid signal: must be JSON"},
		{[]any{"JOB.SIGNAL", id, "approve", "{}", "ID", strings.Repeat("i", 129)}, "ERR ID must be 1 to 128 bytes"},
		{[]any{"JOB.SIGNAL", id, "approve", "{}", "ID", ""}, "ERR ID must be 1 to 128 bytes"},
		{[]any{"JOB.SIGNAL", id, "approve", "{}", "FOO", "bar"}, "ERR syntax error"},
		{[]any{"JOB.SIGNAL", id, "approve", "{}", "ID"}, "ERR syntax error"},
		{[]any{"JOB.SIGNAL", id, "approve"}, "ERR wrong number of arguments for 'job.signal' command"},
	} {
		if err := admin.Do(ctx, tc.args...).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %s", tc.args, err, tc.want)
		}
	}

	// The cap: filled directly to one short of it, the last one fits, the
	// next is refused, and a re-sent one is still answered OK.
	if _, err := db.Exec(ctx, `INSERT INTO job_signals (job_id, name, payload)
		SELECT $1, 'filler', 'null' FROM generate_series(1, $2 - 3)`, id, 10000); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "JOB.SIGNAL", id, "last", "1").Err(); err != nil {
		t.Fatalf("the 10,000th signal: %v", err)
	}
	if err := admin.Do(ctx, "JOB.SIGNAL", id, "one-more", "1").Err(); err == nil || err.Error() != "ERR job "+id+" holds 10000 signals, the most" {
		t.Fatalf("the 10,001st signal: %v", err)
	}
	if err := admin.Do(ctx, "JOB.SIGNAL", id, "approve", `{"by":"ann"}`, "ID", "approval-1").Err(); err != nil {
		t.Fatalf("a signal re-sent at the cap: %v", err)
	}
}

// A signal stored before its wait is taken at once: STEP.WAIT answers it,
// and answers it again when re-sent; a second wait for the same name does
// not take it again.
func TestASignalSentBeforeTheWaitIsTakenAtOnce(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "approver", "a")
	id := submit(t, admin, map[string]any{"type": "a", "queue": "early"})
	if err := admin.Do(ctx, "JOB.SIGNAL", id, "approve", `{"by":"ann"}`).Err(); err != nil {
		t.Fatal(err)
	}
	j := popStep(t, w, "early")
	want := `{"signal":"approve","payload":{"by":"ann"}}`
	for range 2 {
		if got := j.text("STEP.WAIT", "approval", "SIGNAL", "approve", "TIMEOUT", "60"); got != want {
			t.Fatalf("STEP.WAIT: %s, want %s", got, want)
		}
	}
	if got := j.text("STEP.WAIT", "second-approval", "SIGNAL", "approve"); got != "AWAITING never" {
		t.Fatalf("a second wait for a signal already taken: %s", got)
	}
	steps := awaitSteps(t, admin, id)
	if len(steps) != 2 || steps[0].Kind != "wait" || steps[0].Status != "completed" || string(steps[0].Output) != want ||
		steps[1].Status != "awaiting" || string(steps[1].Deadline) != "null" {
		t.Fatalf("JOB.STEPS: %+v", steps)
	}
}

// A wait with no signal stored puts the job to await, holding no worker
// and counting no attempt; the signal wakes it, and the next delivery's
// STEP.WAIT answers the signal at once, as later deliveries do too.
func TestASignalWakesAnAwaitingJob(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "waiter", "a")
	id := submit(t, admin, map[string]any{"type": "a", "queue": "approvals", "unique_key": "approval-7"})
	events := followStatus(t, admin, id)
	j := popStep(t, w, "approvals")
	for range 2 { // re-sent by the same delivery: the same answer
		if got := j.text("STEP.WAIT", "approval", "SIGNAL", "approve"); got != "AWAITING never" {
			t.Fatalf("STEP.WAIT: %s", got)
		}
	}
	expectInOrder(t, events, "awaiting approval")
	if v := getJob(t, admin, id); v.Status != "awaiting" || v.Attempt != 0 || v.WorkerID != nil {
		t.Fatalf("awaiting: %+v", v)
	}
	if err := j.call("STEP.BEGIN", "next").Err(); err == nil || err.Error() != "ERR job "+id+" is not running" {
		t.Fatalf("a step of an awaiting job: %v", err)
	}
	listed, err := admin.Do(ctx, "JOB.LIST", "STATUS", "awaiting").Slice()
	if err != nil || !strings.Contains(replyText(listed), id) {
		t.Fatalf("JOB.LIST STATUS awaiting: %v %v", listed, err)
	}
	res, err := admin.Do(ctx, "QUEUE.STATS", "approvals").Result()
	if err != nil {
		t.Fatal(err)
	}
	if stats, _ := res.(map[any]any); stats["awaiting"] != int64(1) || stats["running"] != int64(0) {
		t.Fatalf("QUEUE.STATS: %v", res)
	}
	// An awaiting job still holds its unique key.
	if again := submit(t, admin, map[string]any{"type": "a", "queue": "approvals", "unique_key": "approval-7"}); again != id {
		t.Fatalf("the unique key of an awaiting job gave another job %s", again)
	}
	// A signal of another name is kept, and wakes nothing; JOB.WAIT goes
	// on waiting.
	if err := admin.Do(ctx, "JOB.SIGNAL", id, "comment", `"looks fine"`).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "JOB.WAIT", id, "0.3").Err(); err != redis.Nil {
		t.Fatalf("JOB.WAIT of an awaiting job: %v, want nil", err)
	}
	if _, _, ok := w.pop(t, "0.3", "approvals"); ok {
		t.Fatal("delivered while awaiting")
	}

	// A pop blocked before the signal is woken by it.
	popped := make(chan stepJob, 1)
	go func() { popped <- popStep(t, w, "approvals") }()
	time.Sleep(100 * time.Millisecond)
	if err := admin.Do(ctx, "JOB.SIGNAL", id, "approve", `{"by":"bob"}`).Err(); err != nil {
		t.Fatal(err)
	}
	j = <-popped
	expectInOrder(t, events, "signal approve", "woken approval")
	if j.d.Attempt != 1 {
		t.Fatalf("the wait counted an attempt: %d", j.d.Attempt)
	}
	want := `{"signal":"approve","payload":{"by":"bob"}}`
	if got := j.text("STEP.WAIT", "approval", "SIGNAL", "approve"); got != want {
		t.Fatalf("STEP.WAIT after the wake: %s, want %s", got, want)
	}
	// A later delivery finds the completed wait's output too.
	if err := w.update(ctx, id, map[string]any{"status": "failed", "error": "later", "retryable": true, "delivery": j.d.Delivery}); err != nil {
		t.Fatal(err)
	}
	admin.Do(ctx, "JOB.RETRY", id)
	j = popStep(t, w, "approvals")
	if got := j.text("STEP.WAIT", "approval", "SIGNAL", "approve"); got != want {
		t.Fatalf("STEP.WAIT in a later delivery: %s, want %s", got, want)
	}
}

// replyText is a reply as text, for a loose look inside it.
func replyText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A wait's deadline is swept by the leader: the job is delivered again
// and the wait answers {"timeout":true}.
func TestAWaitTimesOut(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "patient", "a")
	id := submit(t, admin, map[string]any{"type": "a", "queue": "deadlines"})
	events := followStatus(t, admin, id)
	j := popStep(t, w, "deadlines")
	got := j.text("STEP.WAIT", "approval", "SIGNAL", "approve", "TIMEOUT", "1")
	deadline, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(got, "AWAITING "))
	if !strings.HasPrefix(got, "AWAITING ") || err != nil || time.Until(deadline) > time.Second+200*time.Millisecond {
		t.Fatalf("STEP.WAIT with a timeout: %q", got)
	}
	if steps := awaitSteps(t, admin, id); len(steps) != 1 || steps[0].Status != "awaiting" || string(steps[0].Deadline) == "null" {
		t.Fatalf("JOB.STEPS: %+v", steps)
	}
	j = popStep(t, w, "deadlines")
	expectInOrder(t, events, "awaiting approval", "woken")
	if time.Now().Before(deadline) {
		t.Fatalf("delivered before its deadline %v", deadline)
	}
	if got := j.text("STEP.WAIT", "approval", "SIGNAL", "approve", "TIMEOUT", "1"); got != `{"timeout":true}` {
		t.Fatalf("STEP.WAIT after its deadline: %s", got)
	}
	// A signal sent after the timeout stays for a later wait.
	if err := admin.Do(context.Background(), "JOB.SIGNAL", id, "approve", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if got := j.text("STEP.WAIT", "approval-2", "SIGNAL", "approve"); got != `{"signal":"approve","payload":1}` {
		t.Fatalf("a second wait: %s", got)
	}
}

// JOB.CANCEL ends an awaiting job at once; a signal then finds it ended,
// and JOB.WAIT answers.
func TestAnAwaitingJobIsCancelledAtOnce(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "cancelled", "a")
	id := submit(t, admin, map[string]any{"type": "a", "queue": "cancel-waits"})
	j := popStep(t, w, "cancel-waits")
	j.text("STEP.WAIT", "approval", "SIGNAL", "approve", "TIMEOUT", "3600")
	waited := make(chan error, 1)
	go func() { waited <- admin.Do(ctx, "JOB.WAIT", id, "10").Err() }()
	if err := admin.Do(ctx, "JOB.CANCEL", id).Err(); err != nil {
		t.Fatal(err)
	}
	if v := getJob(t, admin, id); v.Status != "cancelled" {
		t.Fatalf("cancelled: %+v", v)
	}
	if err := <-waited; err != nil {
		t.Fatalf("JOB.WAIT: %v", err)
	}
	if err := admin.Do(ctx, "JOB.SIGNAL", id, "approve", "{}").Err(); err == nil || err.Error() != "ERR job "+id+" has ended" {
		t.Fatalf("a signal to the cancelled job: %v", err)
	}
	if steps := awaitSteps(t, admin, id); len(steps) != 1 || steps[0].Status != "interrupted" {
		t.Fatalf("JOB.STEPS: %+v", steps)
	}
}

// A cancelled job's wait stays interrupted past its deadline: the
// leader's sweep, which times out the waits of awaiting jobs (here
// another's), gives it no timeout output.
func TestACancelledJobsWaitIsNotTimedOut(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "cancelled-deadline", "a")
	cancelled := submit(t, admin, map[string]any{"type": "a", "queue": "cancel-deadline"})
	popStep(t, w, "cancel-deadline").text("STEP.WAIT", "approval", "SIGNAL", "approve", "TIMEOUT", "1")
	if err := admin.Do(ctx, "JOB.CANCEL", cancelled).Err(); err != nil {
		t.Fatal(err)
	}
	other := submit(t, admin, map[string]any{"type": "a", "queue": "cancel-deadline"})
	popStep(t, w, "cancel-deadline").text("STEP.WAIT", "approval", "SIGNAL", "approve", "TIMEOUT", "1")
	if j := popStep(t, w, "cancel-deadline"); j.id != other {
		t.Fatalf("delivered again after its deadline: %s, want %s", j.id, other)
	}
	steps := awaitSteps(t, admin, cancelled)
	if len(steps) != 1 || steps[0].Status != "interrupted" || string(steps[0].Output) != "null" || string(steps[0].Deadline) != "null" {
		t.Fatalf("the cancelled job's JOB.STEPS: %+v", steps)
	}
	if v := getJob(t, admin, cancelled); v.Status != "cancelled" {
		t.Fatalf("the cancelled job: %+v", v)
	}
}

// STEP.WAIT's refusals, word for word.
func TestStepWaitRefusesClearly(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "refused", "a")
	waiting := submit(t, admin, map[string]any{"type": "a", "queue": "not-yet"})
	id := submit(t, admin, map[string]any{"type": "a", "queue": "wait-refusals"})
	popStep(t, w, "wait-refusals")
	timeout := "ERR TIMEOUT must be between 1 and 2592000 seconds (30 days)"
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"STEP.WAIT", id, "w", "SIGNAL", "a b"}, "ERR signal name must be 1-128 letters, digits, '_', '-', '.' or ':'"},
		{[]any{"STEP.WAIT", id, "w w", "SIGNAL", "go"}, "ERR step_id must be 1-128 letters, digits, '_', '-', '.' or ':'"},
		{[]any{"STEP.WAIT", id, "w", "SIGNAL", "go", "TIMEOUT", "0"}, timeout},
		{[]any{"STEP.WAIT", id, "w", "SIGNAL", "go", "TIMEOUT", "2592001"}, timeout},
		{[]any{"STEP.WAIT", id, "w", "SIGNAL", "go", "TIMEOUT", "soon"}, timeout},
		{[]any{"STEP.WAIT", id, "w", "SIGNAL", "go", "extra"}, "ERR syntax error"},
		{[]any{"STEP.WAIT", id, "w", "SOMETHING", "go"}, "ERR syntax error"},
		{[]any{"STEP.WAIT", id, "w", "SIGNAL"}, "ERR wrong number of arguments for 'step.wait' command"},
		{[]any{"STEP.WAIT", "no-such-job", "w", "SIGNAL", "go"}, "ERR no such job no-such-job"},
		{[]any{"STEP.WAIT", waiting, "w", "SIGNAL", "go"}, "ERR job " + waiting + " is not running"},
	} {
		if err := w.c.Do(ctx, tc.args...).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %s", tc.args, err, tc.want)
		}
	}
	// A step id already used by a step of another kind.
	j := stepJob{t: t, w: w, id: id}
	if err := w.c.Do(ctx, "STEP.BEGIN", id, "plain").Err(); err != nil {
		t.Fatal(err)
	}
	if err := j.w.c.Do(ctx, "STEP.WAIT", id, "plain", "SIGNAL", "go").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR step plain is ") {
		t.Errorf("a wait on a plain step's id: %v", err)
	}
}
