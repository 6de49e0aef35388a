package otlp

import (
	"context"
	"testing"
)

func TestTheEnvironmentSaysWhetherAndHowToExport(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
		"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(v, "")
	}
	ctx := context.Background()
	t.Run("NoEndpointIsNoProvider", func(t *testing.T) {
		if tp, err := NewProvider(ctx, "agq"); tp != nil || err != nil {
			t.Fatalf("NewProvider with no endpoint = %v, %v; want none", tp, err)
		}
	})
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Run("DisabledIsOff", func(t *testing.T) {
		t.Setenv("OTEL_SDK_DISABLED", "true")
		if Enabled() {
			t.Fatal("OTEL_SDK_DISABLED=true leaves tracing on")
		}
	})
	t.Run("NoExporterIsOff", func(t *testing.T) {
		t.Setenv("OTEL_TRACES_EXPORTER", "none")
		if Enabled() {
			t.Fatal("OTEL_TRACES_EXPORTER=none leaves tracing on")
		}
	})
	t.Run("AnUnsupportedProtocolIsRefused", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
		if _, err := NewProvider(ctx, "agq"); err == nil {
			t.Fatal("an unsupported protocol was accepted")
		}
	})
	t.Run("AnEndpointIsAProvider", func(t *testing.T) {
		tp, err := NewProvider(ctx, "agq")
		if tp == nil || err != nil {
			t.Fatalf("NewProvider with an endpoint = %v, %v", tp, err)
		}
		// Nothing was recorded: shutting down sends nothing.
		if err := tp.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	})
}
