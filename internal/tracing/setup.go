// Package tracing records a job's life as OpenTelemetry spans: its
// submission, its time queued, each attempt, each step, and the
// recoveries of lost deliveries. It is configured only by the standard
// OTEL_* variables and is off unless an OTLP endpoint is set: then New
// answers a nil *Tracer, whose methods do nothing, so that the job flow
// pays one nil check and no span work.
//
// Spans that outlive a process (queued, attempts) are recorded once they
// end, with start and end times taken from the job's own row, and an
// attempt's span id is derived from its delivery token, so that the node
// delivering a job names in its traceparent the span that the node
// receiving the report (another one, or the same after a restart) records.
package tracing

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agq/agq/internal/otlp"
)

// Tracer records the spans of jobs. A nil *Tracer is tracing off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// New builds the tracer the OTEL_* variables describe (package otlp), as
// service; nil when tracing is off.
func New(ctx context.Context, service string) (*Tracer, error) {
	tp, err := otlp.NewProvider(ctx, service, sdktrace.WithIDGenerator(idGenerator{}))
	if tp == nil || err != nil {
		return nil, err
	}
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/agq/agq")}, nil
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}
