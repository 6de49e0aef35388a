// Package otlp builds the tracer provider the standard OTEL_* variables
// describe, the same way for agq and agw: off unless an OTLP endpoint is
// set, exporting over HTTP/protobuf unless the protocol is grpc, as the
// service named unless OTEL_SERVICE_NAME names another. It imports nothing
// of agq, so that agw, which imports none of the server's packages, shares
// it with the server.
package otlp

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
)

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint is set, and neither OTEL_SDK_DISABLED nor
// OTEL_TRACES_EXPORTER=none says otherwise.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// NewProvider builds the tracer provider the OTEL_* variables describe,
// exporting in batches over OTLP (HTTP/protobuf unless
// OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL is grpc) as service, with opts;
// nil when tracing is off. Its Shutdown exports what is buffered.
func NewProvider(ctx context.Context, service string, opts ...sdktrace.TracerProviderOption) (*sdktrace.TracerProvider, error) {
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
	opts = append([]sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}, opts...)
	return sdktrace.NewTracerProvider(opts...), nil
}
