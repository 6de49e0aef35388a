package tracing

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// recording is a Tracer whose spans a test reads.
func recording(t *testing.T) (*Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(idGenerator{}))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &Tracer{provider: tp, tracer: tp.Tracer("test")}, rec
}

func TestNoEndpointMeansNoTracerAndNoExporter(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
		t.Setenv(v, "")
	}
	tr, err := New(context.Background(), "agq")
	if tr != nil || err != nil {
		t.Fatalf("New with no endpoint = %v, %v; want no tracer", tr, err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown of no tracer: %v", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := New(context.Background(), "agq"); err == nil {
		t.Fatal("an unsupported protocol was accepted")
	}
}

func TestValidParent(t *testing.T) {
	for tp, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00": true,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": false, // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01": false, // zero span id
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": false, // upper case
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": false, // another version
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7":    false,
		"": false,
	} {
		if got := ValidParent(tp); got != want {
			t.Errorf("ValidParent(%q) = %v, want %v", tp, got, want)
		}
	}
}

// The traceparent a delivery carries names the span its attempt's end
// records, wherever that is computed, with the job's times.
func TestTheDeliveredTraceparentNamesTheAttemptSpan(t *testing.T) {
	tr, rec := recording(t)
	sub := tr.StartSubmission("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=1", "j1", "ready", "t")
	sub.End(true, nil)
	a := Attempt{JobID: "j1", TraceParent: sub.TraceParent, TraceState: sub.TraceState, Delivery: "0190-d1", WorkerID: "w1", Attempt: 1}
	queued, delivered, ended := time.Unix(100, 0), time.Unix(105, 0), time.Unix(130, 0)
	traceparent := tr.Delivered(a, queued, delivered)
	other, _ := recording(t) // another node, or this one after a restart
	other.AttemptEnded(a, delivered, ended, "completed", "")
	tr.AttemptEnded(a, delivered, ended, "completed", "")

	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("recorded %d spans, want submission, queued, attempt", len(spans))
	}
	submitted, q, attempt := spans[0], spans[1], spans[2]
	if submitted.Parent().SpanID().String() != "00f067aa0ba902b7" || submitted.SpanContext().TraceState().String() != "vendor=1" {
		t.Errorf("the submission's parent is %v", submitted.Parent())
	}
	if q.Name() != SpanQueued || q.Parent().SpanID() != submitted.SpanContext().SpanID() || !q.StartTime().Equal(queued) || !q.EndTime().Equal(delivered) {
		t.Errorf("queued span %s under %v from %v to %v", q.Name(), q.Parent().SpanID(), q.StartTime(), q.EndTime())
	}
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + attempt.SpanContext().SpanID().String() + "-01"
	if traceparent != want || attempt.Parent().SpanID() != submitted.SpanContext().SpanID() || !attempt.StartTime().Equal(delivered) || !attempt.EndTime().Equal(ended) {
		t.Errorf("delivered %s, attempt span %s under %v from %v to %v", traceparent, want, attempt.Parent().SpanID(), attempt.StartTime(), attempt.EndTime())
	}
	if attemptSpanID("0190-d1") != attempt.SpanContext().SpanID() || attemptSpanID("0190-d2") == attemptSpanID("0190-d1") {
		t.Error("an attempt's span id is not its delivery's own")
	}
}

func TestAnEndpointMakesATracerOverHTTPOrGRPC(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	for _, proto := range []string{"", "http/protobuf", "grpc"} {
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
		tr, err := New(context.Background(), "agq")
		if tr == nil || err != nil {
			t.Fatalf("protocol %q: New = %v, %v; want a tracer", proto, tr, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = tr.Shutdown(ctx) // nothing to export; the endpoint is not there
		cancel()
	}
}
