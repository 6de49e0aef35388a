package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span names.
const (
	SpanSubmit   = "job.submit"
	SpanQueued   = "job.queued"
	SpanAttempt  = "job.attempt"
	SpanStep     = "job.step"
	SpanRecovery = "job.recover"
)

// Attribute keys.
const (
	AttrJobID    = "agq.job.id"
	AttrQueue    = "agq.job.queue"
	AttrType     = "agq.job.type"
	AttrCreated  = "agq.job.created"
	AttrAttempt  = "agq.job.attempt"
	AttrWorkerID = "agq.worker.id"
	AttrOutcome  = "agq.attempt.outcome"
	AttrStepID   = "agq.step.id"
	AttrReason   = "agq.recovery.reason"
)

// Submission is the span of one job's submission, open until its commit.
type Submission struct {
	span trace.Span
	// TraceParent and TraceState are what the job is stored with: the
	// submission span, child of the submitter's context when it gave one.
	TraceParent, TraceState string
}

// StartSubmission opens the submission span of a job submitted with the
// trace context parent and state (both "" when it gave none: a trace
// starts here).
func (t *Tracer) StartSubmission(parent, state, jobID, queue, jobType string) Submission {
	ctx := remote(context.Background(), parent, state)
	_, span := t.tracer.Start(ctx, SpanSubmit, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String(AttrJobID, jobID), attribute.String(AttrQueue, queue), attribute.String(AttrType, jobType)))
	sc := span.SpanContext()
	return Submission{span: span, TraceParent: format(sc), TraceState: sc.TraceState().String()}
}

// End closes the submission span: created says a new job was stored
// (false: the id named an existing job), err why it was refused.
func (s Submission) End(created bool, err error) {
	if s.span == nil {
		return
	}
	s.span.SetAttributes(attribute.Bool(AttrCreated, created))
	if err != nil {
		s.span.SetStatus(codes.Error, err.Error())
	}
	s.span.End()
}

// Attempt is one delivery of a job: the trace context the job is stored
// with, and the delivery's token, holder and number.
type Attempt struct {
	JobID                   string
	TraceParent, TraceState string
	Delivery                string
	WorkerID                string
	Attempt                 int
}

// job is the context of the job's stored span, the parent of its queued
// and attempt spans.
func (a Attempt) job() context.Context {
	return remote(context.Background(), a.TraceParent, a.TraceState)
}

// attrs are the attempt's attributes.
func (a Attempt) attrs() []attribute.KeyValue {
	kv := []attribute.KeyValue{attribute.String(AttrJobID, a.JobID), attribute.Int(AttrAttempt, a.Attempt)}
	if a.WorkerID != "" {
		kv = append(kv, attribute.String(AttrWorkerID, a.WorkerID))
	}
	return kv
}

// Delivered records the time a job waited, from queuedSince until now, and
// answers the traceparent its worker's spans join: its attempt's span,
// recorded when the attempt ends (AttemptEnded).
func (t *Tracer) Delivered(a Attempt, queuedSince, now time.Time) string {
	ctx := a.job()
	parent := trace.SpanContextFromContext(ctx)
	if !parent.IsValid() {
		return a.TraceParent
	}
	_, span := t.tracer.Start(ctx, SpanQueued, trace.WithTimestamp(queuedSince), trace.WithAttributes(a.attrs()...))
	span.End(trace.WithTimestamp(now))
	return format(parent.WithSpanID(attemptSpanID(a.Delivery)))
}

// AttemptEnded records the span of an attempt, from its delivery at start
// until end, with its outcome (completed, failed, retrying, cancelled,
// snoozed, sleeping, or a recovery's reason) and error text.
func (t *Tracer) AttemptEnded(a Attempt, start, end time.Time, outcome, errText string) {
	ctx := withSpanID(a.job(), attemptSpanID(a.Delivery))
	_, span := t.tracer.Start(ctx, SpanAttempt, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start),
		trace.WithAttributes(append(a.attrs(), attribute.String(AttrOutcome, outcome))...))
	if errText != "" {
		span.SetStatus(codes.Error, errText)
	}
	span.End(trace.WithTimestamp(end))
}

// StepEnded records a step of an attempt, from its STEP.BEGIN at start to
// its completion or failure at end.
func (t *Tracer) StepEnded(a Attempt, stepID string, start, end time.Time, errText string) {
	ctx := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.SpanContextFromContext(a.job()).WithSpanID(attemptSpanID(a.Delivery)))
	_, span := t.tracer.Start(ctx, SpanStep, trace.WithTimestamp(start),
		trace.WithAttributes(append(a.attrs(), attribute.String(AttrStepID, stepID))...))
	if errText != "" {
		span.SetStatus(codes.Error, errText)
	}
	span.End(trace.WithTimestamp(end))
}

// Recovered records a recovery that took a job's delivery back (reason),
// leaving it in status: the attempt's span ends there (from its start, or
// now for a delivery never started), with the recovery as its child.
func (t *Tracer) Recovered(a Attempt, reason, status string, started *time.Time, now time.Time) {
	start := now
	if started != nil {
		start = *started
	}
	t.AttemptEnded(a, start, now, reason, "")
	ctx := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.SpanContextFromContext(a.job()).WithSpanID(attemptSpanID(a.Delivery)))
	_, span := t.tracer.Start(ctx, SpanRecovery, trace.WithTimestamp(now),
		trace.WithAttributes(append(a.attrs(), attribute.String(AttrReason, reason), attribute.String("agq.job.status", status))...))
	span.End(trace.WithTimestamp(now))
}
