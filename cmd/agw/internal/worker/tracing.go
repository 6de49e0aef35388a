package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// startJobSpan opens the span of one job's run, child of the span its
// delivery's traceparent names (agq's attempt span), or of nothing when it
// carries none. Without a tracer it is the no-op span, which costs
// nothing.
func (w *Worker) startJobSpan(msg jobMessage) trace.Span {
	ctx := context.Background()
	if w.cfg.Tracer == nil {
		return trace.SpanFromContext(ctx)
	}
	if msg.TraceParent != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{
			"traceparent": msg.TraceParent, "tracestate": msg.TraceState})
	}
	_, span := w.cfg.Tracer.Start(ctx, "agw.job", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("agq.job.id", msg.JobID), attribute.String("agq.job.queue", msg.Queue),
		attribute.String("agq.job.type", msg.Type), attribute.Int("agq.job.attempt", msg.Attempt),
		attribute.String("agq.worker.id", w.cfg.WorkerID)))
	return span
}
