package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// JobUpdateParams is one JOB.UPDATE.
type JobUpdateParams struct {
	ID       string
	WorkerID string // the reporting worker; ignored when Admin
	Admin    bool
	// Status is "", "running", "completed", "failed", "cancelled" or
	// "snoozed".
	Status    string
	Error     string
	Retryable bool
	// Attempt is the delivery the report is about; 0 when not given.
	Attempt int
	// Delivery is the token of the delivery the report is about ("" when
	// not given): unlike the attempt, no later delivery repeats it.
	Delivery string
	// Raw is the update as sent: progress for running updates, the result
	// for completed ones.
	Raw json.RawMessage
	// SnoozeFor is how long a snoozed job waits; MaxSnoozes how many
	// snoozes a job may have before the next fails it.
	SnoozeFor  time.Duration
	MaxSnoozes int
}

// errorEntry is one element of a job's error history.
type errorEntry struct {
	Attempt  int       `json:"attempt"`
	WorkerID string    `json:"worker_id,omitempty"`
	Error    string    `json:"error"`
	At       time.Time `json:"at"`
}

// JobUpdate applies a worker's report to a job it holds. Repeating a report
// that already took effect is a no-op that succeeds, since clients re-send
// after timeouts. It returns what the report means to listeners — the job
// claimable again or ended, room freed where it left running — for the
// caller to publish once it returned; also with a refusal, whose effects
// are at most a wake-up for the waiting job the report held locked.
func (s *Store) JobUpdate(ctx context.Context, p JobUpdateParams) (records.Effects, error) {
	var fx, done records.Effects // done: what the transaction did, once it committed
	var freed records.Freed
	if !storable(p.ID) {
		return fx, records.ErrNotFound
	}
	var cancelled, left bool
	var waiting string // the queue of a waiting job the report locked
	var snoozeLimit *records.SnoozeLimitError
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var cur struct {
			status          string
			snoozes         int
			worker          *string
			delivery        *string
			cancelRequested bool
			attempt, max    int
			stepFailures    int
			backoff         float64
			queue, typ      string
			requires        []string
			errors          []errorEntry
		}
		err := tx.QueryRow(ctx, `
			SELECT status, snoozes, worker_id, delivery::text, cancel_requested, attempt, max_attempts, step_failures, retry_backoff_seconds, queue, type, requires, errors
			FROM jobs WHERE id = $1 FOR UPDATE`, p.ID).
			Scan(&cur.status, &cur.snoozes, &cur.worker, &cur.delivery, &cur.cancelRequested, &cur.attempt, &cur.max, &cur.stepFailures, &cur.backoff, &cur.queue, &cur.typ, &cur.requires, &cur.errors)
		if err != nil {
			return err
		}
		// A waiting job is never changed by a report.
		if cur.status == records.StatusQueued {
			waiting = cur.queue
		}
		freed = records.Freed{}
		freed.Add(cur.queue, cur.typ, 1)
		owner := ""
		if cur.worker != nil {
			owner = *cur.worker
		}
		switch {
		case p.Status == records.StatusSnoozed && cur.status == records.StatusScheduled && cur.worker == nil && cur.snoozes > 0 &&
			(p.Delivery != "" && cur.delivery != nil && *cur.delivery == p.Delivery || p.Delivery == "" && p.Attempt == cur.attempt+1):
			return nil // the same snooze again: the job waits, not yet delivered again
		case p.Delivery != "" && (cur.delivery == nil || *cur.delivery != p.Delivery) && (p.Attempt == 0 || p.Attempt == cur.attempt):
			// A report about a delivery that is not the job's latest: the
			// job was delivered again since, or the claim that made it
			// was lost in a database crash. It must not touch the job.
			return &records.StaleDeliveryError{Attempt: cur.attempt}
		case p.Attempt > 0 && p.Attempt != cur.attempt:
			// A report about an earlier delivery, re-sent late: it must
			// not touch the current one. Its own outcome, if recorded, was
			// this very report.
			for _, e := range cur.errors {
				if e.Attempt == p.Attempt && e.WorkerID == p.WorkerID && sameFailure(p) {
					return nil
				}
			}
			return &records.StateError{Status: fmt.Sprintf("at attempt %d, not %d", cur.attempt, p.Attempt)}
		case records.IsTerminal(cur.status) && !p.Admin && owner != "" && owner != p.WorkerID:
			return &records.NotOwnerError{Owner: owner}
		case cur.status == records.StatusCancelled && p.Status == records.StatusCancelled && !cur.cancelRequested && owner != "":
			// The holder's own cancellation, reported again (a job
			// JOB.CANCEL ended has its request set, or no holder).
			return nil
		case cur.status == records.StatusCancelled:
			cancelled = true
			return nil
		case records.IsTerminal(cur.status):
			if p.Status == cur.status {
				return nil // the same final report again
			}
			return &records.StateError{Status: cur.status}
		case cur.status == records.StatusRetrying && sameFailure(p) && len(cur.errors) > 0 &&
			cur.errors[len(cur.errors)-1].Attempt == cur.attempt && cur.errors[len(cur.errors)-1].WorkerID == p.WorkerID:
			return nil // the same failure report again
		case cur.status != records.StatusRunning:
			return &records.StateError{Status: cur.status}
		case !p.Admin && owner != p.WorkerID:
			return &records.NotOwnerError{Owner: owner}
		case cur.cancelRequested:
			// The holder now knows: the job ends cancelled.
			cancelled, left = true, true
			done.Done = []string{p.ID}
			return finish(ctx, tx, p.ID, records.StatusCancelled, nil)
		}

		// Past the checks, the job is running for this report: any report
		// but an acknowledgement or progress takes it out of running. (A
		// repeat answered above left the row as it was: nothing freed.)
		left = p.Status != "" && p.Status != records.StatusRunning
		switch p.Status {
		case "", records.StatusRunning:
			// An acknowledgement or progress lost in an OS crash only
			// means a redelivery: no need to wait for the WAL flush.
			if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
				return err
			}
			progress := any(nil)
			if p.Status == "" {
				progress = string(p.Raw)
			}
			_, err = tx.Exec(ctx, `
				UPDATE jobs SET ack_deadline = NULL, progress = coalesce($2::jsonb, progress), updated_at = now()
				WHERE id = $1`, p.ID, progress)
			return err
		case records.StatusSnoozed:
			if cur.snoozes >= p.MaxSnoozes {
				limit := &records.SnoozeLimitError{Snoozes: cur.snoozes}
				if _, err := tx.Exec(ctx, recordErrorSQL, p.ID, limit.Error()); err != nil {
					return err
				}
				if err := finish(ctx, tx, p.ID, records.StatusFailed, nil); err != nil {
					return err
				}
				done.Done = []string{p.ID}
				snoozeLimit = limit
				return nil
			}
			// Back to waiting, due later; the attempt is given back, so the
			// next delivery has the same number. The delivery token stays
			// until then: a re-sent snooze is recognised by it.
			var runAt time.Time
			if err := tx.QueryRow(ctx, snoozeSQL, p.ID, p.SnoozeFor).Scan(&runAt); err != nil {
				return err
			}
			done.Ready = []records.ReadyNote{{Queue: cur.queue, N: 1, Requires: cur.requires, At: dueMillis(runAt)}}
			return nil
		case records.StatusCompleted, records.StatusCancelled:
			done.Done = []string{p.ID}
			return finish(ctx, tx, p.ID, p.Status, p.Raw)
		case records.StatusFailed:
			// The failure joins the error history and the retry is timed
			// by the database's clock, like every other time of the job.
			// Deliveries its steps' failures ended count against the steps.
			retry, delay, err := s.nextRetry(records.Failure{Attempt: cur.attempt - cur.stepFailures, MaxAttempts: cur.max,
				BackoffSeconds: cur.backoff, Retryable: p.Retryable})
			if err != nil {
				return err
			}
			var runAt time.Time
			if err := tx.QueryRow(ctx, failAttemptSQL, p.ID, p.Error, retry, delay).Scan(&runAt); err != nil {
				return err
			}
			if retry {
				done.Ready = []records.ReadyNote{{Queue: cur.queue, N: 1, Requires: cur.requires, At: dueMillis(runAt)}}
				return nil
			}
			done.Done = []string{p.ID}
			return finish(ctx, tx, p.ID, records.StatusFailed, p.Raw)
		}
		return fmt.Errorf("unknown status %q", p.Status)
	})
	if waiting != "" {
		// The report held a waiting job's row while claims skip locked
		// rows: a pop woken for the job may have found nothing meanwhile.
		fx.Ready = []records.ReadyNote{{Queue: waiting, N: 1}}
	}
	if err != nil {
		return fx, interpretError(err)
	}
	fx.Ready = append(fx.Ready, done.Ready...)
	for _, id := range done.Done {
		fx.Ended(id)
	}
	if left {
		fx.Freed, fx.Moved = freed, []string{p.ID}
	}
	if cancelled {
		return fx, records.ErrJobCancelled
	}
	if snoozeLimit != nil {
		return fx, snoozeLimit
	}
	return fx, nil
}

// sameFailure reports whether failure report p may repeat the failure that
// ended its delivery, now that the job waits for a retry or runs again:
// only a retryable one. A failure not retryable asked that the job never
// run again; answering it OK would say it took effect, while the job
// still retries.
func sameFailure(p JobUpdateParams) bool {
	return p.Status == records.StatusFailed && p.Retryable
}

// finish moves a job to a final status; its caller counts it Done.
func finish(ctx context.Context, tx pgx.Tx, id, status string, result json.RawMessage) error {
	_, err := tx.Exec(ctx, finishSQL, id, status, nullJSON(result))
	return err
}

// Statements of the careful path that take a job out of running.
var (
	// recordErrorSQL adds a failure to the job's error history ($2, the
	// message), before finish fails it.
	recordErrorSQL = `UPDATE jobs j SET errors = ` + withError("$2::text") + ` WHERE j.id = $1`

	// snoozeSQL puts a snoozed job back to waiting, due $2 from now, its
	// attempt given back.
	snoozeSQL = `
		UPDATE jobs j SET status = 'scheduled', worker_id = NULL, attempt = greatest(j.attempt - 1, 0),
			snoozes = j.snoozes + 1, run_at = now() + $2::interval,
			` + clearDelivery + `, updated_at = now()
		WHERE j.id = $1
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
		WHERE j.id = $1
		RETURNING j.run_at`

	// finishSQL moves a job to a final status ($2), keeping its result
	// unless $3 gives one.
	finishSQL = `
		UPDATE jobs SET status = $2, result = coalesce($3::jsonb, result), finished_at = now(),
			` + clearRunning + `, updated_at = now()
		WHERE id = $1`
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
		fx = records.Effects{}
		var status string
		var asked bool
		if err := tx.QueryRow(ctx, `SELECT status, cancel_requested FROM jobs WHERE id = $1 FOR UPDATE`, id).Scan(&status, &asked); err != nil {
			return err
		}
		switch {
		case status == records.StatusCancelled:
			return nil
		case status == records.StatusCompleted || status == records.StatusFailed:
			return &records.StateError{Status: status}
		case status == records.StatusRunning:
			if !asked {
				fx.Moved = []string{id}
			}
			_, err := tx.Exec(ctx, `UPDATE jobs SET cancel_requested = true, updated_at = now() WHERE id = $1`, id)
			return err
		}
		fx.Moved = []string{id}
		fx.Ended(id)
		return finish(ctx, tx, id, records.StatusCancelled, nil)
	})
	if err != nil {
		return records.Effects{}, interpretError(err)
	}
	return fx, nil
}

// JobRetry puts a failed or cancelled job back in its queue with a fresh
// set of attempts; its error history is kept. A job already waiting or
// running again is left as it is (the retry already happened). Its effects
// name the job Moved when this call changed it, and Ready when it waits.
func (s *Store) JobRetry(ctx context.Context, id string) (records.Effects, error) {
	var fx records.Effects
	if !storable(id) {
		return fx, records.ErrNotFound
	}
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		fx = records.Effects{}
		var status, queue string
		var requires []string
		var inGraph bool
		if err := tx.QueryRow(ctx, `SELECT status, queue, requires, after IS NOT NULL OR has_children FROM jobs WHERE id = $1 FOR UPDATE`,
			id).Scan(&status, &queue, &requires, &inGraph); err != nil {
			return err
		}
		switch status {
		case records.StatusCompleted:
			return &records.StateError{Status: status}
		case records.StatusFailed, records.StatusCancelled:
		case records.StatusQueued:
			// Its row was held while claims skip locked rows: a pop woken
			// for it may have found nothing meanwhile.
			fx.Ready = []records.ReadyNote{{Queue: queue, N: 1, Requires: requires}}
			return nil
		default:
			return nil
		}
		_, err := tx.Exec(ctx, `
			UPDATE jobs SET status = 'queued', attempt = 0, step_failures = 0, worker_id = NULL, cancel_requested = false,
				run_at = now(), finished_at = NULL, started_at = NULL, progress = NULL, updated_at = now()
			WHERE id = $1`, id)
		if err != nil {
			return err
		}
		fx.Moved, fx.Ready = []string{id}, []records.ReadyNote{{Queue: queue, N: 1, Requires: requires}}
		if _, err := tx.Exec(ctx, jobRetryStepsSQL, id); err != nil {
			return err
		}
		if inGraph {
			pending, restored, err := retryInGraph(ctx, tx, id)
			if pending {
				fx.Ready = nil
			}
			fx.Moved = append(fx.Moved, restored...)
			return err
		}
		return nil
	})
	if err != nil {
		return records.Effects{}, interpretError(err)
	}
	return fx, nil
}
