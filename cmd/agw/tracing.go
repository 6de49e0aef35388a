package main

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/agq/agq/internal/otlp"
)

// newTracer builds the tracer the standard OTEL_* variables describe, as
// agq does (package otlp): off (nil, and no exporter) unless an OTLP
// endpoint is set; service name agw unless OTEL_SERVICE_NAME says
// otherwise. shutdown exports what is buffered.
func newTracer(ctx context.Context) (tracer trace.Tracer, shutdown func(context.Context) error, err error) {
	tp, err := otlp.NewProvider(ctx, "agw")
	if err != nil {
		return nil, nil, err
	}
	if tp == nil {
		return nil, func(context.Context) error { return nil }, nil
	}
	return tp.Tracer("github.com/agq/agq/cmd/agw"), tp.Shutdown, nil
}
