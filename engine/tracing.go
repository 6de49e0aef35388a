package engine

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agq/agq/internal/tracing"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// A job's spans (internal/tracing), recorded around the transitions that
// begin and end them. Every hook starts with the tracer's nil check: with
// tracing off the job flow does no span work and reads nothing more. A
// traceparent submitted while tracing is off is still stored and handed to
// the job's workers as given, so their spans join the submitter's trace.

// startSubmissions opens the submission spans of jobs, setting on each the
// trace context it is stored with; nil when tracing is off.
func (e *Engine) startSubmissions(jobs []records.NewJob) []tracing.Submission {
	if e.trace == nil {
		return nil
	}
	subs := make([]tracing.Submission, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		subs[i] = e.trace.StartSubmission(j.TraceParent, j.TraceState, j.ID, j.Queue, j.Type)
		j.TraceParent, j.TraceState = subs[i].TraceParent, subs[i].TraceState
	}
	return subs
}

// endSubmissions closes the spans startSubmissions opened once the jobs'
// outcomes are known; errs nil when the submission failed as a whole with
// err.
func endSubmissions(subs []tracing.Submission, res []records.SubmitResult, errs []error, err error) {
	for i, s := range subs {
		created := err == nil && i < len(res) && res[i].Created
		jobErr := err
		if errs != nil {
			jobErr = errs[i]
		}
		s.End(created, jobErr)
	}
}

// traceDeliveries records how long each delivered job waited and gives it
// the traceparent of its attempt's span, which its worker's spans join.
func (e *Engine) traceDeliveries(worker string, jobs []records.Job) {
	if e.trace == nil {
		return
	}
	now := time.Now()
	for i := range jobs {
		j := &jobs[i]
		if j.TraceParent == "" || j.Delivery == nil {
			continue
		}
		a := tracing.Attempt{JobID: j.ID, TraceParent: j.TraceParent, TraceState: j.TraceState, Delivery: *j.Delivery,
			WorkerID: worker, Attempt: j.Attempt}
		j.TraceParent = e.trace.Delivered(a, j.RunAt, now)
	}
}

// attemptTraces reads, before reports end them, the deliveries of the
// jobs they are about; nil when tracing is off.
func (e *Engine) attemptTraces(ctx context.Context, ids []string) map[string]store.AttemptTrace {
	if e.trace == nil {
		return nil
	}
	traces, err := e.store.AttemptTraces(ctx, ids)
	if err != nil {
		e.log.Warn().Err(err).Msg("reading the jobs' trace context")
	}
	return traces
}

// traceReports records the attempts that reports ended: those in moved,
// whose report was taken.
func (e *Engine) traceReports(traces map[string]store.AttemptTrace, reports []records.Report, errs []error, moved []string) {
	if len(traces) == 0 {
		return
	}
	now := time.Now()
	for i, r := range reports {
		t, ok := traces[r.ID]
		if !ok || (errs != nil && errs[i] != nil) || !slices.Contains(moved, r.ID) {
			continue
		}
		e.trace.AttemptEnded(attemptOf(t), t.StartedAt, now, r.Status, r.Error)
	}
}

// attemptOf is the attempt a trace read names.
func attemptOf(t store.AttemptTrace) tracing.Attempt {
	return tracing.Attempt{JobID: t.JobID, TraceParent: t.TraceParent, TraceState: t.TraceState, Delivery: t.Delivery,
		WorkerID: t.WorkerID, Attempt: t.Attempt}
}

// stepTrace reads, before a step call ends the step, the job's delivery
// and when the step began; found false when tracing is off or the job
// carries no trace context.
func (e *Engine) stepTrace(ctx context.Context, p records.StepParams) (store.AttemptTrace, bool) {
	if e.trace == nil {
		return store.AttemptTrace{}, false
	}
	t, found, err := e.store.StepTrace(ctx, p.JobID, p.StepID)
	if err != nil {
		e.log.Warn().Err(err).Str("job", p.JobID).Msg("reading the step's trace context")
	}
	return t, found
}

// Recoveries is what the store tells of jobs recoveries took out of
// running (store.Config.Recovered): each is counted in
// agq_jobs_recovered_total by namespace and reason, registered with reg;
// with tracing on (t), the attempts' spans of those carrying trace
// context end there, with the recovery as a span of its own.
func Recoveries(t *tracing.Tracer, reg prometheus.Registerer) func(reason string, jobs []store.RecoveredJob) {
	recovered := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agq_jobs_recovered_total",
		Help: "Running jobs a recovery took back (the watchdog's, or a worker's registration or departure), by namespace and reason, on this node.",
	}, []string{"namespace", "reason"})
	if reg != nil {
		reg.MustRegister(recovered)
	}
	return func(reason string, jobs []store.RecoveredJob) {
		now := time.Now()
		for _, j := range jobs {
			recovered.WithLabelValues(cmp.Or(j.Namespace, records.DefaultNamespace), reason).Inc()
			if t == nil || j.TraceParent == "" {
				continue
			}
			a := tracing.Attempt{JobID: j.JobID, TraceParent: j.TraceParent, TraceState: j.TraceState, Delivery: j.Delivery,
				Attempt: j.Attempt}
			t.Recovered(a, reason, j.Status, j.StartedAt, now)
		}
	}
}
