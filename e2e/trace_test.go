package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// The submitter's own span, which job "traced" names in its traceparent.
const (
	submitterTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	submitterSpan  = "00f067aa0ba902b7"
)

// TestOneJobIsOneTraceFromSubmissionToAgw: with OTLP given to agq and agw
// by the standard variables, a job's spans from both share one trace and
// nest — the submission under the submitter's span (or starting the trace),
// the time queued and each attempt under the submission, agw's job span
// under the attempt its delivery's traceparent names, and a step under its
// attempt.
func TestOneJobIsOneTraceFromSubmissionToAgw(t *testing.T) {
	receiver := newSpanReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	a := agqtest.Start(t, heartbeatEvery(time.Second), func(c *config.Config) { c.AckTimeout = time.Second })
	agw := startAgw(t, a.Addr, "agw-traced", a.CreateKey(t, "worker", "agw-traced"))
	producer := a.Client(t, redis.Options{Password: a.CreateKey(t, "producer", "tracer")})

	plan := `"plan":{"tasks":[{"tool":"sort"}]},"inputs":{"stdin":"b\na\n"}`
	submit(t, producer, `{"job_id":"traced","traceparent":"00-`+submitterTrace+`-`+submitterSpan+`-01",`+plan+`}`)
	submit(t, producer, `{"job_id":"untraced",`+plan+`}`)
	for _, id := range []string{"traced", "untraced"} {
		if j := waitJob(t, producer, id, 30*time.Second); j.Status != "completed" {
			t.Fatalf("job %s is %s", id, j.Status)
		}
	}
	// Re-sent with another traceparent, it is the same job.
	if id := submit(t, producer, `{"job_id":"traced","traceparent":"00-`+strings.Repeat("1", 32)+`-`+strings.Repeat("2", 16)+`-01",`+plan+`}`); id != "traced" {
		t.Fatalf("the re-sent job is %s", id)
	}
	lostAttempt := runStepsJobs(t, a)
	agw.signal(t, syscall.SIGTERM)
	if code := agw.waitExit(t, 10*time.Second); code != 0 {
		t.Fatalf("agw exited %d", code)
	}

	var traced, untraced, stepped, lost jobSpans
	agqtest.Eventually(t, 15*time.Second, func() error {
		spans := receiver.received()
		traced, untraced, stepped = spansOf(spans, "traced"), spansOf(spans, "untraced"), spansOf(spans, "stepped")
		if lost = spansOf(spans, "lost"); lost.has("agq", "job.attempt", "job.recover") != nil {
			return lost.has("agq", "job.attempt", "job.recover")
		}
		for _, js := range []jobSpans{traced, untraced} {
			if err := js.has("agq", "job.submit", "job.queued", "job.attempt"); err != nil {
				return err
			}
			if err := js.has("agw", "agw.job"); err != nil {
				return err
			}
		}
		return stepped.has("agq", "job.submit", "job.attempt", "job.step")
	})

	for _, js := range []jobSpans{traced, untraced, stepped} {
		submitted, attempt := js.first("job.submit"), js.first("job.attempt")
		for _, s := range js {
			if s.Name == "job.submit" && s.Attrs["agq.job.created"] == "false" {
				continue // a re-sending, in the trace of whoever re-sent it
			}
			if s.TraceID != submitted.TraceID {
				t.Errorf("job %s: span %s of %s is in trace %s, its submission in %s", js.id(), s.Name, s.Service, s.TraceID, submitted.TraceID)
			}
		}
		if q := js.first("job.queued"); q.Parent != submitted.SpanID {
			t.Errorf("job %s: job.queued's parent is %q, want the submission %s", js.id(), q.Parent, submitted.SpanID)
		}
		if attempt.Parent != submitted.SpanID {
			t.Errorf("job %s: job.attempt's parent is %q, want the submission %s", js.id(), attempt.Parent, submitted.SpanID)
		}
		if attempt.Attrs["agq.attempt.outcome"] != "completed" || attempt.Attrs["agq.job.attempt"] != "1" || attempt.Attrs["agq.worker.id"] == "" {
			t.Errorf("job %s: job.attempt has attributes %v", js.id(), attempt.Attrs)
		}
	}
	if s := traced.first("job.submit"); s.TraceID != submitterTrace || s.Parent != submitterSpan || s.Attrs["agq.job.created"] != "true" {
		t.Errorf("job traced: its submission is %+v, want it in trace %s under span %s", s, submitterTrace, submitterSpan)
	}
	if resent := traced.named("job.submit"); len(resent) != 2 || resent[1].TraceID != strings.Repeat("1", 32) || resent[1].Attrs["agq.job.created"] != "false" {
		t.Errorf("job traced has submission spans %+v, want the job's and its re-sending's, in the re-sender's trace", resent)
	}
	if s := untraced.first("job.submit"); s.Parent != "" || s.TraceID == submitterTrace {
		t.Errorf("job untraced: its submission is %+v, want it to start a trace", s)
	}
	for _, js := range []jobSpans{traced, untraced} {
		job, attempt := js.first("agw.job"), js.first("job.attempt")
		if job.Parent != attempt.SpanID || job.Attrs["agq.worker.id"] != "agw-traced" || attempt.Attrs["agq.worker.id"] != "agw-traced" {
			t.Errorf("job %s: agw's span %+v, want it under the attempt %+v", js.id(), job, attempt)
		}
	}
	// The watchdog took back the delivery nobody acknowledged: the attempt
	// its traceparent named ends there, the recovery under it.
	if attempt, recovery := lost.first("job.attempt"), lost.first("job.recover"); attempt.SpanID != lostAttempt ||
		attempt.Attrs["agq.attempt.outcome"] != "unacked_delivery" || recovery.Parent != lostAttempt ||
		recovery.Attrs["agq.recovery.reason"] != "unacked_delivery" {
		t.Errorf("job lost: attempt %+v and recovery %+v, want both about the delivered span %s", attempt, recovery, lostAttempt)
	}
	if step, attempt := stepped.first("job.step"), stepped.first("job.attempt"); step.Parent != attempt.SpanID || step.Attrs["agq.step.id"] != "fetch" {
		t.Errorf("job stepped: its step %+v, want it under the attempt %+v", step, attempt)
	}
}

// runStepsJobs submits job "stepped" and runs it as a go-redis worker
// would: one step, begun and completed, then the job's report. Then it
// takes job "lost" and never acknowledges it, answering the span id its
// delivery's traceparent names.
func runStepsJobs(t *testing.T, a *agqtest.Agq) string {
	t.Helper()
	ctx := context.Background()
	w := a.Client(t, redis.Options{Username: "stepper", Password: a.CreateKey(t, "worker", "stepper")})
	do := func(args ...any) string {
		t.Helper()
		v, err := w.Do(ctx, args...).Text()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	do("WORKER.REGISTER", `{"worker_id":"stepper","hostname":"h","agw_version":"1","capabilities":{"tools":[],"types":["steps"]}}`)
	type delivery struct {
		Delivery    string `json:"delivery"`
		TraceParent string `json:"traceparent"`
	}
	pop := func(id string) delivery {
		t.Helper()
		submit(t, a.Admin(t), `{"job_id":"`+id+`","queue":"steps","type":"steps"}`)
		popped, err := w.BRPop(ctx, 10*time.Second, "queue:steps").Result()
		if err != nil {
			t.Fatalf("BRPOP: %v", err)
		}
		var d delivery
		if err := json.Unmarshal([]byte(popped[1]), &d); err != nil || len(d.TraceParent) != 55 {
			t.Fatalf("popped %s (%v): want a traceparent", popped[1], err)
		}
		return d
	}
	d := pop("stepped")
	do("STEP.BEGIN", "stepped", "fetch", "{}", "DELIVERY", d.Delivery)
	do("STEP.COMPLETE", "stepped", "fetch", `"ok"`, "DELIVERY", d.Delivery)
	do("JOB.UPDATE", "stepped", `{"status":"completed","delivery":"`+d.Delivery+`"}`)
	return pop("lost").TraceParent[36:52]
}

// jobSpans are the spans of one job.
type jobSpans []receivedSpan

func spansOf(spans []receivedSpan, id string) jobSpans {
	var out jobSpans
	for _, s := range spans {
		if s.Attrs["agq.job.id"] == id {
			out = append(out, s)
		}
	}
	return out
}

func (js jobSpans) id() string {
	if len(js) == 0 {
		return "?"
	}
	return js[0].Attrs["agq.job.id"]
}

func (js jobSpans) named(name string) jobSpans {
	var out jobSpans
	for _, s := range js {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (js jobSpans) first(name string) receivedSpan {
	if n := js.named(name); len(n) > 0 {
		return n[0]
	}
	return receivedSpan{}
}

// has says which of the spans named, from service, are missing.
func (js jobSpans) has(service string, names ...string) error {
	for _, name := range names {
		found := false
		for _, s := range js.named(name) {
			found = found || s.Service == service
		}
		if !found {
			return fmt.Errorf("job %s: no span %s from %s among %d spans", js.id(), name, service, len(js))
		}
	}
	return nil
}

// TestTracingOffPassesTraceparentThrough: with no OTEL_* endpoint agq
// creates no tracer and starts no span: a job submitted with a traceparent
// is delivered with that very traceparent, one without is delivered
// without any.
func TestTracingOffPassesTraceparentThrough(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	a := agqtest.Start(t)
	if a.Node.Tracing() {
		t.Fatal("agq traces with no OTEL_* endpoint set")
	}
	ctx := context.Background()
	w := a.Client(t, redis.Options{Username: "plain", Password: a.CreateKey(t, "worker", "plain")})
	if err := w.Do(ctx, "WORKER.REGISTER", `{"worker_id":"plain","hostname":"h","agw_version":"1","capabilities":{"tools":[],"types":["t"]}}`).Err(); err != nil {
		t.Fatal(err)
	}
	given := "00-" + submitterTrace + "-" + submitterSpan + "-01"
	admin := a.Admin(t)
	submit(t, admin, `{"job_id":"with","queue":"off","type":"t","traceparent":"`+given+`","tracestate":"vendor=1"}`)
	if n, err := admin.LPush(ctx, "queue:off", `{"job_id":"without","type":"t"}`).Result(); err != nil || n < 1 {
		t.Fatalf("LPUSH answered %d, %v", n, err)
	}
	want := map[string][2]string{"with": {given, "vendor=1"}, "without": {"", ""}}
	for range 2 {
		popped, err := w.BRPop(ctx, 10*time.Second, "queue:off").Result()
		if err != nil {
			t.Fatalf("BRPOP: %v", err)
		}
		var d struct {
			JobID       string  `json:"job_id"`
			TraceParent *string `json:"traceparent"`
			TraceState  *string `json:"tracestate"`
		}
		if err := json.Unmarshal([]byte(popped[1]), &d); err != nil {
			t.Fatal(err)
		}
		got := [2]string{deref(d.TraceParent), deref(d.TraceState)}
		if got != want[d.JobID] {
			t.Errorf("job %s was delivered with trace context %q, want %q (%s)", d.JobID, got, want[d.JobID], popped[1])
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
