package worker

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"

	"github.com/agq/agq/cmd/agw/internal/pipeline"
	"github.com/agq/agq/cmd/agw/internal/stats"
)

// jobMessage is the job JSON that BRPOP delivers. Fields agw does not use
// (payload, and whatever a newer server adds) are ignored here; the plan and
// inputs are decoded strictly by pipeline.ParseSpec.
type jobMessage struct {
	JobID          string          `json:"job_id"`
	Type           string          `json:"type"`
	Queue          string          `json:"queue"`
	Plan           json.RawMessage `json:"plan"`
	Inputs         json.RawMessage `json:"inputs"`
	Attempt        int             `json:"attempt"`
	Delivery       string          `json:"delivery"`
	MaxAttempts    int             `json:"max_attempts"`
	TimeoutSeconds float64         `json:"timeout_seconds"`
	TraceParent    string          `json:"traceparent"`
	TraceState     string          `json:"tracestate"`
}

// runJob runs one delivered job: acknowledge it as running (agq re-queues a
// delivery that is not acknowledged within its ack timeout), run its plan
// while reporting progress, then report it completed or failed. A job agq
// cancels is killed: one named by a heartbeat reply is then reported
// cancelled, which ends it on agq; one whose update was answered -CANCELLED
// has ended already and is not reported again.
func (w *Worker) runJob(queue, raw string) {
	var msg jobMessage
	if err := json.Unmarshal([]byte(raw), &msg); err != nil || msg.JobID == "" {
		w.log.Error().Err(err).Str("queue", queue).Int("bytes", len(raw)).
			Msg("received a job without a readable job_id; it cannot be reported, and agq will deliver it again after its ack timeout")
		return
	}
	log := w.log.With().Str("job_id", msg.JobID).Str("queue", queue).Int("attempt", msg.Attempt).Logger()

	ctx, cancel := context.WithCancelCause(w.jobsCtx)
	defer cancel(nil)
	w.track(msg.JobID, cancel)
	defer w.untrack(msg.JobID)

	span := w.startJobSpan(msg)
	defer span.End()

	started := time.Now()
	ack := mustMarshal(runningUpdate{Status: "running", Attempt: msg.Attempt, Delivery: msg.Delivery, WorkerID: w.cfg.WorkerID, StartedAt: timestamp(started)})
	if err := w.report(msg.JobID, ack, log); err != nil {
		if errors.Is(err, errJobCancelled) {
			log.Info().Msg("job was cancelled before it started")
		} else {
			log.Error().Err(err).Msg("could not acknowledge the job; not running it")
		}
		return
	}
	log.Info().Str("type", msg.Type).Msg("job started")

	spec, err := pipeline.ParseSpec(msg.Plan, msg.Inputs, msg.TimeoutSeconds)
	var res pipeline.Result
	if err == nil {
		p := w.startProgress(ctx, msg.JobID, cancel, log)
		logs := w.newLogLines(msg.JobID)
		spec.OnLine = logs.line
		res, err = w.cfg.Executor.Run(ctx, spec, p.offer)
		p.stop()
		// The last lines go before the final report, which ends the
		// job's logs.
		logs.close()
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	w.finish(msg.JobID, delivery{msg.Attempt, msg.Delivery}, res, err, started, log)
}

// finish sends a job's final report, naming the delivery it is about so
// that a report re-sent late never applies to a later delivery.
func (w *Worker) finish(jobID string, d delivery, res pipeline.Result, runErr error, started time.Time, log zerolog.Logger) {
	now := time.Now()
	var body []byte
	switch {
	case runErr == nil:
		w.completed.Add(1)
		body = completedBody(res, now, w.cfg.MaxReportBytes)
	case errors.Is(runErr, errCancelConfirmed):
		log.Info().Msg("job cancelled by agq; its processes are stopped")
		return
	case errors.Is(runErr, errCancelledByServer):
		// agq answers this report -CANCELLED, and the job ends
		// cancelled now rather than when its timeout runs out.
		log.Info().Msg("job cancelled by agq; its processes are stopped; telling agq")
		err := w.report(jobID, withDelivery(cancelledBody(res.Tasks, now, w.cfg.MaxReportBytes), d), log)
		if err != nil && !errors.Is(err, errJobCancelled) {
			log.Error().Err(err).Msg("could not report the job's cancellation")
		}
		return
	case errors.Is(runErr, errShuttingDown):
		w.failed.Add(1)
		body = failedBody(errShuttingDown.Error(), true, res.Tasks, now, w.cfg.MaxReportBytes)
	default:
		w.failed.Add(1)
		body = failedBody(runErr.Error(), pipeline.Retryable(runErr), res.Tasks, now, w.cfg.MaxReportBytes)
	}
	body = withDelivery(body, d)
	ev := log.Info()
	if runErr != nil {
		ev = log.Warn().Str("error", runErr.Error()).Bool("retryable", pipeline.Retryable(runErr))
	}
	ev.Dur("duration", now.Sub(started)).Bool("completed", runErr == nil).Msg("job finished")
	switch err := w.report(jobID, body, log); {
	case errors.Is(err, errJobCancelled):
		log.Info().Msg("job had been cancelled by agq meanwhile")
	case err != nil:
		log.Error().Err(err).Msg("could not report the job's end")
	}
}

// track and untrack keep the cancel function of each running job, so that
// a heartbeat reply's cancel=<id> reaches it.
func (w *Worker) track(jobID string, cancel context.CancelCauseFunc) {
	w.active.Add(1)
	w.jobsMu.Lock()
	w.running[jobID] = cancel
	w.jobsMu.Unlock()
}

func (w *Worker) untrack(jobID string) {
	w.jobsMu.Lock()
	delete(w.running, jobID)
	w.jobsMu.Unlock()
	w.active.Add(-1)
}

// cancelJob cancels a running job; it reports whether the job was running.
func (w *Worker) cancelJob(jobID string, cause error) bool {
	w.jobsMu.Lock()
	cancel, ok := w.running[jobID]
	w.jobsMu.Unlock()
	if ok {
		cancel(cause)
	}
	return ok
}

func (w *Worker) runningIDs() []string {
	w.jobsMu.Lock()
	defer w.jobsMu.Unlock()
	ids := make([]string, 0, len(w.running))
	for id := range w.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (w *Worker) counters() stats.Counters {
	return stats.Counters{Active: w.active.Load(), Completed: w.completed.Load(), Failed: w.failed.Load()}
}

// progressReporter sends a job's progress updates from a goroutine of its
// own, so that the executor never waits for the network. Only the latest
// progress matters: one still waiting when a newer one arrives is replaced,
// and one still waiting when the job ends is dropped, since the final report
// follows at once. Progress is sent once, not retried: it is advisory, and
// the final report, which is retried, supersedes it.
type progressReporter struct {
	w      *Worker
	ctx    context.Context // the job's: no progress is sent once it ends
	jobID  string
	cancel context.CancelCauseFunc
	log    zerolog.Logger
	latest chan pipeline.Progress
	done   chan struct{}
}

func (w *Worker) startProgress(ctx context.Context, jobID string, cancel context.CancelCauseFunc, log zerolog.Logger) *progressReporter {
	p := &progressReporter{w: w, ctx: ctx, jobID: jobID, cancel: cancel, log: log,
		latest: make(chan pipeline.Progress, 1), done: make(chan struct{})}
	go p.loop()
	return p
}

// offer is the executor's progress callback; it never blocks (its only
// caller is the executor's goroutine, so the slot it empties stays empty).
func (p *progressReporter) offer(pr pipeline.Progress) {
	select {
	case <-p.latest:
	default:
	}
	p.latest <- pr
}

func (p *progressReporter) stop() {
	select {
	case <-p.latest:
	default:
	}
	close(p.latest)
	<-p.done
}

func (p *progressReporter) loop() {
	defer close(p.done)
	for pr := range p.latest {
		if p.ctx.Err() != nil {
			continue // cancelled or shutting down: the final report says what matters
		}
		body := mustMarshal(progressUpdate{CurrentTask: pr.Finished, ProgressPercent: pr.Percent})
		err := p.w.cmdUpdate(p.w.reportCtx, p.jobID, body)
		switch classify(err) {
		case outcomeOK:
		case outcomeCancelled:
			p.log.Info().Msg("agq says the job was cancelled; stopping it")
			p.cancel(errCancelConfirmed)
		case outcomeConn, outcomeNotRegistered:
			p.w.markStale()
			p.log.Debug().Err(err).Msg("progress update lost")
		default:
			p.log.Warn().Err(err).Msg("progress update refused")
		}
	}
}
