package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
)

// idGenerator makes random ids, except for a span whose id was fixed in
// its context (withSpanID): an attempt's span, named at delivery and
// recorded at its report, maybe on another node.
type idGenerator struct{}

type spanIDKey struct{}

// withSpanID fixes the id of the next span started with ctx.
func withSpanID(ctx context.Context, id trace.SpanID) context.Context {
	return context.WithValue(ctx, spanIDKey{}, id)
}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, idGenerator{}.NewSpanID(ctx, tid)
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if id, ok := ctx.Value(spanIDKey{}).(trace.SpanID); ok {
		return id
	}
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// attemptSpanID is the span id of the attempt a delivery token names: the
// same wherever and whenever it is computed, and unlike any other
// delivery's.
func attemptSpanID(delivery string) trace.SpanID {
	sum := sha256.Sum256([]byte("agq attempt " + delivery))
	var sid trace.SpanID
	copy(sid[:], sum[:8])
	if !sid.IsValid() {
		sid[7] = 1
	}
	return sid
}
