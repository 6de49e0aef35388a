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
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer records the spans of jobs. A nil *Tracer is tracing off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint is set, and neither OTEL_SDK_DISABLED nor
// OTEL_TRACES_EXPORTER=none says otherwise.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// New builds the tracer the OTEL_* variables describe, exporting over
// OTLP (HTTP/protobuf unless OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL is
// grpc) as service (unless OTEL_SERVICE_NAME names another); nil when
// tracing is off.
func New(ctx context.Context, service string) (*Tracer, error) {
	if !Enabled() {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch proto := cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf"); proto {
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTLP protocol %q is not supported: use http/protobuf or grpc", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("describing the service: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(idGenerator{}),
	)
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/agq/agq")}, nil
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}
