package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// WorkersMarkDead turns live workers whose last heartbeat is older than
// deadAfter into DEAD and gives their jobs back (attempt counted: the
// worker was lost holding them; failed when no attempt is left). The
// heartbeat condition is re-checked in the UPDATE, so a worker that just
// heartbeated is left alone (workers_live_heartbeat). Every node hears of
// each death on ChannelMoved. It returns the ids.
func (s *Store) WorkersMarkDead(ctx context.Context, deadAfter time.Duration, limit int) ([]string, error) {
	var dead []string
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH stale AS (
				SELECT worker_id FROM workers
				WHERE state IN ('ACTIVE', 'DRAINING') AND last_heartbeat_at < now() - $1::interval
				ORDER BY last_heartbeat_at LIMIT $2
				FOR UPDATE SKIP LOCKED
			)
			UPDATE workers w SET state = 'DEAD', state_changed_at = now()
			FROM stale WHERE w.worker_id = stale.worker_id
			  AND w.state IN ('ACTIVE', 'DRAINING') AND w.last_heartbeat_at < now() - $1::interval
			RETURNING w.worker_id`, deadAfter, limit)
		if err != nil {
			return err
		}
		dead, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range dead {
			// Subscribers on every node hear of the death, then of
			// the jobs given back.
			b, _ := json.Marshal(Moved{DeadWorker: id})
			if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelMoved, string(b)); err != nil {
				return err
			}
			if err := requeueHeld(ctx, tx, id, true); err != nil {
				return err
			}
		}
		return nil
	})
	return dead, interpretError(err)
}

// JobsRecoverExpiredLeases gives back running jobs whose lease ran out —
// their holder stopped heartbeating, or is no longer live — counting the
// attempt. A job whose cancellation was asked for ends cancelled instead of
// being retried (jobs_running_lease).
func (s *Store) JobsRecoverExpiredLeases(ctx context.Context, limit int) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH due AS (
				SELECT id FROM jobs
				WHERE status = 'running' AND lease_expires_at < now()
				ORDER BY lease_expires_at LIMIT $1
				FOR UPDATE SKIP LOCKED
			)
			UPDATE jobs j SET
				status = CASE WHEN j.cancel_requested THEN 'cancelled'
				              WHEN j.attempt >= j.max_attempts THEN 'failed'
				              ELSE 'queued' END,
				finished_at = CASE WHEN j.cancel_requested OR j.attempt >= j.max_attempts THEN now() END,
				errors = CASE WHEN j.cancel_requested THEN j.errors
				         ELSE j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt,
				              'worker_id', j.worker_id, 'error', 'lease expired: worker stopped heartbeating', 'at', now())) END,
				worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
				run_at = now(), ack_deadline = NULL, lease_expires_at = NULL, deadline_at = NULL, updated_at = now()
			FROM due WHERE j.id = due.id AND j.status = 'running'
			RETURNING j.id, j.status, j.queue, j.type, j.requires, j.attempt`, limit)
		if err != nil {
			return err
		}
		n, err = notifyMoved(ctx, tx, rows)
		return err
	})
	return n, interpretError(err)
}

// JobsFailTimedOut fails the current attempt of running jobs more than
// grace past their timeout (retried after backoff while attempts remain)
// and flags the holding worker (jobs_running_deadline). The grace lets a
// worker that enforces the timeout itself report what it killed.
func (s *Store) JobsFailTimedOut(ctx context.Context, grace time.Duration, limit int) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		type due struct {
			id, worker   string
			attempt, max int
			backoff      float64
			timeout      int
			cancel       bool
		}
		rows, err := tx.Query(ctx, `
			SELECT id, worker_id, attempt, max_attempts, retry_backoff_seconds, timeout_seconds, cancel_requested
			FROM jobs WHERE status = 'running' AND deadline_at < now() - $2::interval
			ORDER BY deadline_at LIMIT $1
			FOR UPDATE SKIP LOCKED`, limit, grace)
		if err != nil {
			return err
		}
		var all []due
		for rows.Next() {
			var d due
			if err := rows.Scan(&d.id, &d.worker, &d.attempt, &d.max, &d.backoff, &d.timeout, &d.cancel); err != nil {
				rows.Close()
				return err
			}
			all = append(all, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, d := range all {
			// Computed per job: the retry delay has jitter.
			runAt := time.Now().Add(RetryDelay(d.backoff, d.attempt))
			moved, err := tx.Query(ctx, `
				UPDATE jobs SET
					status = CASE WHEN cancel_requested THEN 'cancelled'
					              WHEN attempt >= max_attempts THEN 'failed'
					              ELSE 'retrying' END,
					finished_at = CASE WHEN cancel_requested OR attempt >= max_attempts THEN now() END,
					errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempt,
						'worker_id', worker_id, 'error', format('timed out after %s seconds', timeout_seconds), 'at', now())),
					worker_id = CASE WHEN cancel_requested THEN worker_id END,
					run_at = CASE WHEN cancel_requested OR attempt >= max_attempts THEN run_at ELSE $2 END,
					ack_deadline = NULL, lease_expires_at = NULL, deadline_at = NULL, updated_at = now()
				WHERE id = $1
				RETURNING id, CASE WHEN status = 'retrying' THEN 'queued' ELSE status END, queue, type, requires, attempt`, d.id, runAt)
			if err != nil {
				return err
			}
			// A retrying job is announced for its due time.
			if _, err := notifyMovedAt(ctx, tx, moved, runAt); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `
				UPDATE workers SET timed_out_jobs = timed_out_jobs + 1, last_timeout_at = now()
				WHERE worker_id = $1`, d.worker); err != nil {
				return err
			}
		}
		n = len(all)
		return nil
	})
	return n, interpretError(err)
}

// RetentionParams says how long finished jobs are kept.
type RetentionParams struct {
	Completed time.Duration
	Failed    time.Duration // also for cancelled jobs
	Limit     int
}

// JobsDeleteExpired deletes up to Limit completed and up to Limit failed or
// cancelled jobs past their retention, oldest first, in one short
// statement, so the table stays small without long locks. Each kind is
// picked on its own (jobs_finished: status, finished_at), so retained
// failures never stall the deletion of expired completions. Waiting and
// running jobs are never touched, and the row locks keep a concurrent
// JOB.RETRY from being deleted under it.
func (s *Store) JobsDeleteExpired(ctx context.Context, p RetentionParams) (int, error) {
	tag, err := s.Pool.Exec(ctx, `
		WITH completed AS (
			SELECT id FROM jobs WHERE status = 'completed' AND finished_at < now() - $1::interval
			ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED
		), failed AS (
			SELECT id FROM jobs WHERE status IN ('failed', 'cancelled') AND finished_at < now() - $2::interval
			ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED
		)
		DELETE FROM jobs WHERE id IN (SELECT id FROM completed UNION ALL SELECT id FROM failed)`,
		p.Completed, p.Failed, p.Limit)
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}
