package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agq/agq/client"
)

// startJobSpan opens the span of one job's run, child of the span its
// delivery's traceparent names (agq's attempt span), or of nothing when it
// carries none. Without a tracer it is the no-op span, which costs
// nothing.
func (w *Worker) startJobSpan(j *client.Job) trace.Span {
	ctx := context.Background()
	if w.cfg.Tracer == nil {
		return trace.SpanFromContext(ctx)
	}
	if j.TraceParent() != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{
			"traceparent": j.TraceParent(), "tracestate": j.TraceState()})
	}
	_, span := w.cfg.Tracer.Start(ctx, "agw.job", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("agq.job.id", j.ID()), attribute.String("agq.job.queue", j.Queue()),
		attribute.String("agq.job.type", j.Type()), attribute.Int("agq.job.attempt", j.Attempt()),
		attribute.String("agq.worker.id", w.cfg.WorkerID)))
	return span
}
