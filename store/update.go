package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// JobUpdate applies a worker's report to a job it holds, as the engine's
// rules decide (records.Rules.Report): a report that took effect before is
// answered as it was and changes nothing, since clients re-send after
// timeouts. It returns what the report means to listeners — the job
// claimable again or ended, room freed where it left running — for the
// caller to publish once it returned; also with a refusal, whose effects
// are at most a wake-up for the waiting job the report held locked, or
// the job's end when the report found its cancellation asked.
func (s *Store) JobUpdate(ctx context.Context, p records.Report) (records.Effects, error) {
	if !storable(p.ID) {
		return records.Effects{}, records.ErrNotFound
	}
	var r reported
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		r = reported{ns: s.ns}
		return s.applyReport(ctx, tx, p, &r)
	})
	return r.effects(p, err)
}

// reported is what one report's transaction found and did.
type reported struct {
	// ns is the namespace of the job (the store's).
	ns      string
	job     reportedJob
	verdict records.ReportVerdict
	// refusal is the rule's answer besides its verdict.
	refusal error
	// done is what the transaction did, once it committed.
	done records.Effects
}

// reportedJob is the row of a reported job, locked.
type reportedJob struct {
	now          records.JobNow
	max          int
	stepFailures int
	backoff      float64
	queue, typ   string
	requires     []string
}

func lockReportedJob(ctx context.Context, tx pgx.Tx, ns, id string) (reportedJob, error) {
	var j reportedJob
	var worker, delivery *string
	err := lockJob(ctx, tx, ns, id, `status, snoozes, worker_id, delivery::text, cancel_requested, attempt, max_attempts, step_failures,
			retry_backoff_seconds, queue, type, requires, errors`,
		&j.now.Status, &j.now.Snoozes, &worker, &delivery, &j.now.CancelRequested, &j.now.Attempt, &j.max,
		&j.stepFailures, &j.backoff, &j.queue, &j.typ, &j.requires, &j.now.Errors)
	if worker != nil {
		j.now.Worker = *worker
	}
	if delivery != nil {
		j.now.Delivery = *delivery
	}
	return j, err
}

// applyReport locks the job, asks the rules what the report does, and does
// it: nothing, its refusal, the job's end, or the report's status.
func (s *Store) applyReport(ctx context.Context, tx pgx.Tx, p records.Report, r *reported) error {
	var err error
	if r.job, err = lockReportedJob(ctx, tx, s.ns, p.ID); err != nil {
		return err
	}
	if s.rules == nil {
		return ErrNoRules
	}
	r.verdict, r.refusal = s.rules.Report(r.job.now, p)
	switch r.verdict {
	case records.ReportRefused:
		return r.refusal
	case records.ReportRepeated, records.ReportFindsCancelled:
		return nil
	case records.ReportCancels:
		r.done.Done = []string{p.ID}
		return finish(ctx, tx, s.ns, p.ID, records.StatusCancelled, nil)
	case records.ReportSnoozeFails:
		if _, err := tx.Exec(ctx, recordErrorSQL, p.ID, r.refusal.Error(), s.ns); err != nil {
			return err
		}
		r.done.Done = []string{p.ID}
		return finish(ctx, tx, s.ns, p.ID, records.StatusFailed, nil)
	}
	return s.applyStatus(ctx, tx, p, r)
}

// applyStatus applies the status of a report its job runs for.
func (s *Store) applyStatus(ctx context.Context, tx pgx.Tx, p records.Report, r *reported) error {
	j := r.job
	switch p.Status {
	case "", records.StatusRunning:
		// An acknowledgement or progress lost in an OS crash only means a
		// redelivery: no need to wait for the WAL flush.
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		progress := any(nil)
		if p.Status == "" {
			progress = string(p.Raw)
		}
		_, err := tx.Exec(ctx, `
			UPDATE jobs SET ack_deadline = NULL, progress = coalesce($2::jsonb, progress), updated_at = now()
			WHERE namespace = $3 AND id = $1`, p.ID, progress, s.ns)
		return err
	case records.StatusSnoozed:
		// Back to waiting, due later; the attempt is given back, so the
		// next delivery has the same number. The delivery token stays
		// until then: a re-sent snooze is recognised by it.
		var runAt time.Time
		if err := tx.QueryRow(ctx, snoozeSQL, p.ID, p.SnoozeFor, s.ns).Scan(&runAt); err != nil {
			return err
		}
		r.done.Ready = []records.ReadyNote{{Namespace: s.ns, Queue: j.queue, N: 1, Requires: j.requires, At: dueMillis(runAt)}}
		return nil
	case records.StatusCompleted, records.StatusCancelled:
		r.done.Done = []string{p.ID}
		return finish(ctx, tx, s.ns, p.ID, p.Status, p.Raw)
	case records.StatusFailed:
		// The failure joins the error history and the retry is timed by
		// the database's clock, like every other time of the job.
		// Deliveries its steps' failures ended count against the steps.
		retry, delay, err := s.nextRetry(records.Failure{Attempt: j.now.Attempt - j.stepFailures, MaxAttempts: j.max,
			BackoffSeconds: j.backoff, Retryable: p.Retryable})
		if err != nil {
			return err
		}
		var runAt time.Time
		if err := tx.QueryRow(ctx, failAttemptSQL, p.ID, p.Error, retry, delay, s.ns).Scan(&runAt); err != nil {
			return err
		}
		if retry {
			r.done.Ready = []records.ReadyNote{{Namespace: s.ns, Queue: j.queue, N: 1, Requires: j.requires, At: dueMillis(runAt)}}
			return nil
		}
		r.done.Done = []string{p.ID}
		return finish(ctx, tx, s.ns, p.ID, records.StatusFailed, p.Raw)
	}
	return fmt.Errorf("unknown status %q", p.Status)
}

// effects are what the committed report means to listeners, and its
// answer: err when the transaction failed, else the rule's refusal, if any.
func (r reported) effects(p records.Report, err error) (records.Effects, error) {
	var fx records.Effects
	if r.job.now.Status == records.StatusQueued {
		// The report held a waiting job's row while claims skip locked
		// rows: a pop woken for the job may have found nothing meanwhile.
		fx.Ready = []records.ReadyNote{{Namespace: r.ns, Queue: r.job.queue, N: 1}}
	}
	if err != nil {
		return fx, interpretError(err)
	}
	fx.Ready = append(fx.Ready, r.done.Ready...)
	for _, id := range r.done.Done {
		fx.Ended(id)
	}
	// Any report the job ran for takes it out of running, but an
	// acknowledgement or progress. (A repeat left the row as it was:
	// nothing freed.)
	left := r.verdict == records.ReportCancels || r.verdict == records.ReportSnoozeFails ||
		r.verdict == records.ReportApplies && p.Status != "" && p.Status != records.StatusRunning
	if left {
		fx.Freed.AddIn(r.ns, r.job.queue, r.job.typ, 1)
		fx.Moved = []string{p.ID}
	}
	return fx, r.refusal
}

// finish moves job id of namespace ns to a final status; its caller
// counts it Done.
func finish(ctx context.Context, tx pgx.Tx, ns, id, status string, result json.RawMessage) error {
	_, err := tx.Exec(ctx, finishSQL, id, status, nullJSON(result), ns)
	return err
}

// Statements of the locked path that take a job out of running: each names
// the job by its id ($1) and, last, its namespace.
var (
	// recordErrorSQL adds a failure to the job's error history ($2, the
	// message), before finish fails it.
	recordErrorSQL = `UPDATE jobs j SET errors = ` + withError("$2::text") + ` WHERE j.namespace = $3 AND j.id = $1`

	// snoozeSQL puts a snoozed job back to waiting, due $2 from now, its
	// attempt given back.
	snoozeSQL = `
		UPDATE jobs j SET status = 'scheduled', worker_id = NULL, attempt = greatest(j.attempt - 1, 0),
			snoozes = j.snoozes + 1, run_at = now() + $2::interval,
			` + clearDelivery + `, updated_at = now()
		WHERE j.namespace = $3 AND j.id = $1
		RETURNING j.run_at`

	// failAttemptSQL records a failed attempt ($2, the message); when the
	// policy retries it ($3), the job waits $4 and loses its holder, else
	// finish fails it.
	failAttemptSQL = `
		UPDATE jobs j SET
			errors = ` + withError("$2::text") + `,
			status = CASE WHEN $3 THEN 'retrying' ELSE j.status END,
			worker_id = CASE WHEN $3 THEN NULL ELSE j.worker_id END,
			run_at = CASE WHEN $3 THEN now() + $4::interval ELSE j.run_at END,
			` + clearRunning + `, updated_at = now()
		WHERE j.namespace = $5 AND j.id = $1
		RETURNING j.run_at`

	// finishSQL moves a job to a final status ($2), keeping its result
	// unless $3 gives one.
	finishSQL = `
		UPDATE jobs SET status = $2, result = coalesce($3::jsonb, result), finished_at = now(),
			` + clearRunning + `, updated_at = now()
		WHERE namespace = $4 AND id = $1`
)

// JobCancel cancels a job: a waiting one at once, a running one by asking
// its worker (through heartbeats and JOB.UPDATE). Cancelling a cancelled
// job succeeds; a completed or failed one is a StateError. Its effects
// name the job Moved when this call changed it (not when it was
// cancelled, or its cancellation asked, before) and Done when it ended.
func (s *Store) JobCancel(ctx context.Context, id string) (records.Effects, error) {
	var fx records.Effects
	if !storable(id) {
		return fx, records.ErrNotFound
	}
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var err error
		fx, err = cancelIn(ctx, tx, s.ns, id, false)
		return err
	})
	if err != nil {
		return records.Effects{}, interpretError(err)
	}
	return fx, nil
}

// cancelIn is JobCancel in tx, and with cascade the start of
// JobCancelCascade: it also marks the walk down the graph, finds an ended
// job no refusal, and leaves the job's children to the walk.
func cancelIn(ctx context.Context, tx pgx.Tx, ns, id string, cascade bool) (records.Effects, error) {
	var fx records.Effects
	var status string
	var asked bool
	if err := lockJob(ctx, tx, ns, id, `status, cancel_requested`, &status, &asked); err != nil {
		return fx, err
	}
	if cascade {
		if _, err := tx.Exec(ctx, `INSERT INTO graph_walks (namespace, job_id, kind) VALUES ($3, $1, $2)`, id, WalkCascade, ns); err != nil {
			return fx, err
		}
	}
	switch {
	case status == records.StatusCancelled || cascade && records.IsTerminal(status):
		return fx, nil
	case records.IsTerminal(status):
		return fx, &records.StateError{Status: status}
	case status == records.StatusRunning:
		if !asked {
			fx.Moved = []string{id}
		}
		_, err := tx.Exec(ctx, `UPDATE jobs SET cancel_requested = true, updated_at = now() WHERE namespace = $2 AND id = $1`, id, ns)
		return fx, err
	}
	fx.Moved, fx.Done = []string{id}, []string{id}
	if !cascade {
		fx.Parents = []string{id}
	}
	return fx, finish(ctx, tx, ns, id, records.StatusCancelled, nil)
}

// JobRetry puts a failed or cancelled job back in its queue with a fresh
// set of attempts; its error history is kept. A job already waiting or
// running again is left as it is (the retry already happened). Its effects
// name the job Moved when this call changed it, and Ready when it waits.
func (s *Store) JobRetry(ctx context.Context, id string) (records.Effects, error) {
	return s.jobRetry(ctx, id, "")
}

// JobRetryFrom is JobRetry from step stepID on: the job — failed,
// cancelled or completed (any other status is a StateError) — runs again,
// that step and every step begun after it forgotten (replaced, their rows
// kept), the steps before it keeping their outputs. StepNotBegunError when
// the job has no such step.
func (s *Store) JobRetryFrom(ctx context.Context, id, stepID string) (records.Effects, error) {
	if !storable(stepID) {
		return records.Effects{}, &records.StepNotBegunError{StepID: stepID}
	}
	return s.jobRetry(ctx, id, stepID)
}

// jobRetry is JobRetry, or JobRetryFrom step from when it is given.
func (s *Store) jobRetry(ctx context.Context, id, from string) (records.Effects, error) {
	var fx records.Effects
	if !storable(id) {
		return fx, records.ErrNotFound
	}
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		fx = records.Effects{}
		var status, queue string
		var requires []string
		var inGraph bool
		lock := func() error {
			return tx.QueryRow(ctx, `SELECT status, queue, requires, after IS NOT NULL OR has_children FROM jobs
				WHERE namespace = $2 AND id = $1 FOR UPDATE`,
				id, s.ns).Scan(&status, &queue, &requires, &inGraph)
		}
		// A job in history, or moved there while this waited for its
		// lock, comes back among the unfinished first: the recall's
		// statement sees the move committed.
		err := lock()
		if errors.Is(err, pgx.ErrNoRows) {
			back, rerr := recall(ctx, tx, s.ns, []string{id})
			if rerr != nil {
				return rerr
			}
			if len(back) > 0 {
				err = lock()
			}
		}
		if err != nil {
			return err
		}
		switch {
		case from != "" && !records.IsTerminal(status), status == records.StatusCompleted && from == "":
			return &records.StateError{Status: status}
		case records.IsTerminal(status):
		case status == records.StatusQueued:
			// Its row was held while claims skip locked rows: a pop woken
			// for it may have found nothing meanwhile.
			fx.Ready = []records.ReadyNote{{Namespace: s.ns, Queue: queue, N: 1, Requires: requires}}
			return nil
		default:
			return nil
		}
		if from != "" {
			if err := replaceStepsFrom(ctx, tx, s.ns, id, from); err != nil {
				return err
			}
		}
		// Whatever the job waited for when it ended holds its new run back
		// no more (job_waits_child); its parents not ended are waited for
		// again below.
		if _, err := tx.Exec(ctx, `DELETE FROM job_waits WHERE namespace = $2 AND child_id = $1`, id, s.ns); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			UPDATE jobs SET status = 'queued', attempt = 0, step_failures = 0, worker_id = NULL, cancel_requested = false, cancelled_by = NULL,
				run_at = now(), finished_at = NULL, started_at = NULL, progress = NULL,
				result = CASE WHEN $2 THEN NULL ELSE result END, updated_at = now()
			WHERE namespace = $3 AND id = $1`, id, from != "", s.ns)
		if err != nil {
			return err
		}
		fx.Moved, fx.Ready = []string{id}, []records.ReadyNote{{Namespace: s.ns, Queue: queue, N: 1, Requires: requires}}
		if _, err := tx.Exec(ctx, jobRetryStepsSQL, s.ns, id); err != nil {
			return err
		}
		if inGraph {
			pending, err := retryInGraph(ctx, tx, s.ns, id)
			if pending {
				fx.Ready = nil
			}
			return err
		}
		return nil
	})
	if err != nil {
		return records.Effects{}, interpretError(err)
	}
	return fx, nil
}
