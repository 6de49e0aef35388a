package client

import (
	"context"
	"errors"
)

// maxReportBatch bounds the reports one pipeline carries: as many as agq
// puts in one group of final reports (the server's MaxGroup), so that each
// pipeline is one commit.
const maxReportBatch = 500

// pendingReport is a JOB.UPDATE waiting for its pipeline.
type pendingReport struct {
	// ctx bounds an acknowledgement or a progress report, whose sender
	// waits and retries itself; a final report has none: the reporter
	// retries it until agq answers or the reports are abandoned.
	ctx   context.Context
	jobID string
	body  []byte
	// step is the STEP.COMPLETE sent before the report, in the same
	// pipeline: the completion of the job's last step, held for it.
	// stepErr is why it is to be sent again.
	step    []any
	stepErr error
	done    func(err error) // called once, with the reply's error
}

// report sends JOB.UPDATE job_id body together with the reports of other
// slots, in one pipeline, and returns its reply's error.
func (w *Worker) report(ctx context.Context, jobID string, body []byte) error {
	done := make(chan error, 1)
	w.reports.push(&pendingReport{ctx: ctx, jobID: jobID, body: body, done: func(err error) { done <- err }})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reporter sends the waiting reports as pipelines (sendPipelines):
// reports about different jobs in one pipeline share a commit on agq, and
// each still gets its own reply.
func (w *Worker) reporter() { sendPipelines(&w.reports, w.sendReports) }

// sendReports sends batch until each report has its answer; a final
// report that met connection trouble, or a server that no longer knows
// this worker, is sent again after a backoff (agq applies a repeated
// report once).
func (w *Worker) sendReports(batch []*pendingReport) {
	b := w.newBackoff()
	for {
		sent := batch[:0:0]
		pipe := w.rdb.Pipeline()
		for _, p := range batch {
			if p.ctx != nil && p.ctx.Err() != nil {
				p.done(p.ctx.Err())
				continue
			}
			sent = append(sent, p)
		}
		if len(sent) == 0 {
			return
		}
		// The steps' completions go first, all of them, then the reports:
		// agq applies each before its job's report, and the completions
		// share one commit and the reports another.
		var completing []*pendingReport
		for _, p := range sent {
			if p.step != nil {
				completing = append(completing, p)
				pipe.Do(w.reportCtx, p.step...)
			}
		}
		for _, p := range sent {
			pipe.Do(w.reportCtx, "JOB.UPDATE", p.jobID, p.body)
		}
		cmds, err := pipe.Exec(w.reportCtx)
		for i, p := range completing {
			cerr := err
			if i < len(cmds) {
				cerr = cmds[i].Err()
			}
			switch classify(cerr) {
			case outcomeOK, outcomeCancelled, outcomeLost:
				// Kept, or the job is no longer this delivery's to
				// complete (its report says so too).
				p.step = nil
			case outcomeConn, outcomeNotRegistered:
				// Sent again with the report (a completion sent again
				// answers OK).
				p.stepErr = cerr
			default:
				p.step = nil
				w.log.Warn("could not complete the job's last step", "job_id", p.jobID, "error", cerr)
			}
		}
		cmds = cmds[min(len(completing), len(cmds)):]
		retry := batch[:0:0]
		var retryErr error
		unknown := false // agq does not know this worker: register again
		for i, p := range sent {
			perr := err
			if i < len(cmds) {
				perr = cmds[i].Err()
			}
			switch o := classify(perr); {
			case p.ctx == nil && w.reportCtx.Err() == nil && (o == outcomeConn || o == outcomeNotRegistered):
				retry, retryErr = append(retry, p), perr
				unknown = unknown || o == outcomeNotRegistered
			default:
				if p.step != nil {
					// Its report was answered first: the step stays
					// as the report left it.
					w.log.Warn("could not complete the job's last step", "job_id", p.jobID, "error", p.stepErr)
				}
				p.done(perr)
			}
		}
		if len(retry) == 0 {
			return
		}
		batch = retry
		w.reg.lost()
		wait := b.Next()
		w.log.Warn("JOB.UPDATE failed", "reports", len(batch), "error", retryErr, "retry_in", wait)
		ok := sleep(w.reportCtx, wait)
		if ok && unknown {
			ok = w.ensureRegistered(w.reportCtx) == nil
		}
		if !ok {
			for _, p := range batch {
				p.done(errors.Join(errReportsAbandoned, retryErr))
			}
			return
		}
	}
}
