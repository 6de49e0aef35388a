package worker

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"

	"github.com/agq/agq/client"
	"github.com/agq/agq/cmd/agw/internal/pipeline"
)

// errShutdown is a job's error when agw's shutdown stopped it.
var errShutdown = shutdownError{}

type shutdownError struct{}

func (shutdownError) Error() string { return "agw shutting down" }
func (shutdownError) Unwrap() error { return client.ErrShuttingDown }

// runJob runs one delivered job: acknowledge it as running first (agq
// gives a delivery not acknowledged within its timeout to another worker,
// and a plan's tools may not be safe to run twice), run its plan while
// reporting progress and publishing its output lines, then return what the
// final report says. A job agq cancels is killed and reported cancelled
// (or not at all, when agq already ended it); the client decides which.
func (w *Worker) runJob(ctx context.Context, j *client.Job) (any, error) {
	log := w.log.With().Str("job_id", j.ID()).Str("queue", j.Queue()).Int("attempt", j.Attempt()).Logger()
	span := w.startJobSpan(j)
	defer span.End()
	started := time.Now()
	if err := j.Acknowledge(ctx); err != nil {
		if errors.Is(err, client.ErrCancelled) {
			log.Info().Msg("job was cancelled before it started")
		} else {
			log.Error().Err(err).Msg("could not acknowledge the job; not running it")
		}
		return nil, err
	}
	log.Info().Str("type", j.Type()).Msg("job started")

	spec, err := pipeline.ParseSpec(j.Plan(), j.Inputs(), j.Timeout().Seconds())
	var res pipeline.Result
	if err == nil {
		p := w.startProgress(ctx, j, log)
		logs := newLogLines(j, w.log)
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
	return w.finish(ctx, res, err, started, log)
}

// finish is the handler's answer: the report's fields and the error that
// fails the attempt.
func (w *Worker) finish(ctx context.Context, res pipeline.Result, runErr error, started time.Time, log zerolog.Logger) (any, error) {
	now := time.Now()
	cause := context.Cause(ctx)
	switch {
	case runErr == nil:
		log.Info().Dur("duration", now.Sub(started)).Bool("completed", true).Msg("job finished")
		return fields(completedBody(res, now, w.cfg.MaxReportBytes)), nil
	case errors.Is(cause, client.ErrCancelled):
		// Told by a heartbeat reply or job.cancel, the client reports
		// the job cancelled once its processes are gone, which ends it
		// on agq; confirmed by an update's reply, it reports nothing.
		log.Info().Msg("job cancelled by agq; its processes are stopped")
		return nil, client.WithReportFields(runErr, fields(cancelledBody(res.Tasks, now, w.cfg.MaxReportBytes)))
	case errors.Is(cause, client.ErrShuttingDown):
		runErr = errShutdown
	}
	retryable := pipeline.Retryable(runErr)
	log.Warn().Str("error", runErr.Error()).Bool("retryable", retryable).Dur("duration", now.Sub(started)).
		Bool("completed", false).Msg("job finished")
	err := error(reportedError{storable(runErr.Error()), runErr})
	if !retryable {
		err = client.Permanent(err)
	}
	return nil, client.WithReportFields(err, fields(failedBody(runErr.Error(), retryable, res.Tasks, now, w.cfg.MaxReportBytes)))
}

// reportedError is a job's error with the message agq can store.
type reportedError struct {
	msg string
	err error
}

func (e reportedError) Error() string { return e.msg }
func (e reportedError) Unwrap() error { return e.err }

// progressReporter sends a job's progress updates from a goroutine of its
// own, so that the executor never waits for the network. Only the latest
// progress matters: one still waiting when a newer one arrives is replaced,
// and one still waiting when the job ends is dropped, since the final report
// follows at once.
type progressReporter struct {
	job    *client.Job
	ctx    context.Context // ends when the job's does, or when its pipeline ended
	end    context.CancelFunc
	log    zerolog.Logger
	latest chan pipeline.Progress
	done   chan struct{}
}

func (w *Worker) startProgress(ctx context.Context, j *client.Job, log zerolog.Logger) *progressReporter {
	p := &progressReporter{job: j, log: log, latest: make(chan pipeline.Progress, 1), done: make(chan struct{})}
	p.ctx, p.end = context.WithCancel(ctx)
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
	p.end()
	close(p.latest)
	<-p.done
}

func (p *progressReporter) loop() {
	defer close(p.done)
	for pr := range p.latest {
		if p.ctx.Err() != nil {
			continue // cancelled or ended: the final report says what matters
		}
		switch err := p.job.Progress(p.ctx, pr.Finished, pr.Percent); {
		case errors.Is(err, client.ErrCancelled):
			p.log.Info().Msg("agq says the job was cancelled; stopping it")
		case err == nil, p.ctx.Err() != nil:
		default:
			p.log.Warn().Err(err).Msg("progress update refused")
		}
	}
}
