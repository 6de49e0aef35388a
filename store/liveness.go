package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// WorkersMarkDead turns live workers whose last heartbeat is older than
// deadAfter into DEAD and gives their jobs back (attempt counted: the
// worker was lost holding them; failed when no attempt is left). The
// heartbeat condition is re-checked in the UPDATE, so a worker that just
// heartbeated is left alone (workers_live_heartbeat). Every node hears of
// each death on ChannelMoved. It spans namespaces, and returns the ids.
func (s *Store) WorkersMarkDead(ctx context.Context, deadAfter time.Duration, limit int) ([]string, error) {
	var dead []deadWorker
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
			RETURNING w.worker_id, w.namespace`, deadAfter, limit)
		if err != nil {
			return err
		}
		if dead, err = collectDead(rows); err != nil {
			return err
		}
		return s.declaredDead(ctx, tx, dead)
	})
	return idsOf(dead), interpretError(err)
}

// deadWorker is a worker a sweep declared DEAD, in its namespace.
type deadWorker struct{ id, namespace string }

// collectDead reads rows of (worker_id, namespace).
func collectDead(rows pgx.Rows) ([]deadWorker, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (w deadWorker, err error) {
		return w, row.Scan(&w.id, &w.namespace)
	})
}

func idsOf(dead []deadWorker) []string {
	ids := make([]string, len(dead))
	for i, w := range dead {
		ids[i] = w.id
	}
	return ids
}

// declaredDead gives back the jobs of workers tx just made DEAD, the
// attempt counted, and tells every node of each death, in the worker's
// namespace.
func (s *Store) declaredDead(ctx context.Context, tx pgx.Tx, dead []deadWorker) error {
	for _, w := range dead {
		// Subscribers on every node hear of the death, then of the jobs
		// given back.
		b, _ := json.Marshal(records.Moved{Namespace: w.namespace, DeadWorker: w.id})
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelMoved, string(b)); err != nil {
			return err
		}
		// The leader's sweep settles what this ended.
		if _, err := s.requeueHeld(ctx, tx, w.namespace, w.id, true); err != nil {
			return err
		}
	}
	return nil
}

// JobsRecoverExpiredLeases gives back running jobs whose lease ran out —
// their holder stopped heartbeating, or is no longer live — counting the
// attempt. A job whose cancellation was asked for ends cancelled instead of
// being retried (jobs_running).
func (s *Store) JobsRecoverExpiredLeases(ctx context.Context, limit int) (int, error) {
	return s.sweep(ctx, `
			SELECT j.namespace, `+lostDecideColumns+`, NOT j.cancel_requested
			FROM jobs j
			WHERE `+runningByIndex+` AND j.lease_expires_at < now()
			ORDER BY j.lease_expires_at LIMIT $1
			FOR UPDATE SKIP LOCKED`, []any{limit},
		lostMove{failure: lostFailure, sql: recoverLeasesSQL, reason: "expired_lease"})
}

// recoverLeasesSQL gives back jobs whose lease ran out, through their key.
var recoverLeasesSQL = lostJobsSQL("'lease expired: worker stopped heartbeating'", "")

// JobsFailTimedOut fails the current attempt of running jobs more than
// grace past their timeout (retried as the retry policy decides) and flags
// the holding workers (jobs_running). The grace lets a worker that
// enforces the timeout itself report what it killed.
func (s *Store) JobsFailTimedOut(ctx context.Context, grace time.Duration, limit int) (int, error) {
	return s.sweep(ctx, `
			SELECT j.namespace, `+lostDecideColumns+`, NOT j.cancel_requested
			FROM jobs j
			WHERE `+runningByIndex+` AND j.deadline_at < now() - $2::interval
			ORDER BY j.deadline_at LIMIT $1
			FOR UPDATE SKIP LOCKED`, []any{limit, grace},
		lostMove{failure: records.Failure{Retryable: true}, sql: failTimedOutSQL, reason: timedOutReason, decided: countTimedOut})
}

// timedOutReason is told with each job whose timeout ended its delivery.
const timedOutReason = "timed_out_job"

// countTimedOut counts the timed-out jobs against their workers, before
// the jobs lose their holders; the jobs by their key.
func countTimedOut(ctx context.Context, tx pgx.Tx, d retryDecisions) error {
	_, err := tx.Exec(ctx, `
			UPDATE workers w SET timed_out_jobs = w.timed_out_jobs + t.n, last_timeout_at = now()
			FROM (SELECT j.worker_id, count(*) AS n
			      FROM unnest($1::text[], $2::text[]) AS d(id, namespace)
			      JOIN jobs j ON j.namespace = d.namespace AND j.id = d.id
			      GROUP BY j.worker_id) t
			WHERE w.worker_id = t.worker_id`, d.ids, d.namespaces)
	return err
}

// failTimedOutSQL fails the attempts of timed-out jobs, through their key.
var failTimedOutSQL = `
	UPDATE jobs j SET
		status = CASE WHEN j.cancel_requested THEN 'cancelled' WHEN NOT d.retry THEN 'failed' ELSE 'retrying' END,
		finished_at = ` + givenBackFinished + `,
		errors = ` + withError("format('timed out after %s seconds', j.timeout_seconds)") + `,
		step_failures = CASE WHEN j.cancel_requested THEN j.step_failures ELSE ` + stepFailuresCounted + ` END,
		worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
		run_at = CASE WHEN j.cancel_requested OR NOT d.retry THEN j.run_at ELSE ` + retryAt + ` END,
		` + clearRunning + `, updated_at = now()` + fromDecided("")

// RetentionParams says how long finished jobs are kept: the server's
// setting, for every namespace that sets none of its own.
type RetentionParams struct {
	Completed time.Duration
	Failed    time.Duration // also for cancelled jobs
	Limit     int
}

// NamespaceRetention is how long one namespace keeps its finished jobs.
type NamespaceRetention struct {
	Namespace         string
	Completed, Failed time.Duration
}

// RetentionByNamespace is each namespace's retention: its own
// (namespaces.retain_completed, retain_failed) where it sets one, the
// server's (p) otherwise.
func (s *Store) RetentionByNamespace(ctx context.Context, p RetentionParams) ([]NamespaceRetention, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT name, extract(epoch FROM coalesce(retain_completed, $1::interval))::float8,
			extract(epoch FROM coalesce(retain_failed, $2::interval))::float8
		FROM namespaces ORDER BY name`, p.Completed, p.Failed)
	return collect(rows, err, func(row pgx.CollectableRow) (r NamespaceRetention, err error) {
		var completed, failed float64
		err = row.Scan(&r.Namespace, &completed, &failed)
		r.Completed = time.Duration(completed * float64(time.Second))
		r.Failed = time.Duration(failed * float64(time.Second))
		return r, err
	})
}
