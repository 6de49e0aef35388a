package tracing

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ValidParent reports whether s is a W3C traceparent agq accepts:
// version 00, lower-case hex ids that are not all zero.
func ValidParent(s string) bool {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return false
	}
	trace, span, flags := s[3:35], s[36:52], s[53:]
	return lowerHex(trace) && lowerHex(span) && lowerHex(flags) &&
		strings.Trim(trace, "0") != "" && strings.Trim(span, "0") != ""
}

func lowerHex(p string) bool {
	for i := range len(p) {
		if c := p[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// MaxStateLen bounds a tracestate (W3C: 32 members of up to 256 bytes;
// agq keeps it short, as the recommended 512 bytes).
const MaxStateLen = 512

// remote is ctx with the span context a traceparent and tracestate name as
// its remote parent; ctx unchanged when they name none.
func remote(ctx context.Context, parent, state string) context.Context {
	if parent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": parent}
	if state != "" {
		carrier["tracestate"] = state
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// format is the traceparent naming sc.
func format(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%02x", sc.TraceID(), sc.SpanID(), byte(sc.TraceFlags()))
}
