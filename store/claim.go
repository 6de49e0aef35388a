package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// JobClaimParams says who claims from which queue.
type JobClaimParams struct {
	Queue      string
	WorkerID   string
	AckTimeout time.Duration
	Lease      time.Duration
	Limit      int
}

// WorkerNotActiveError means the claiming worker is not ACTIVE (draining,
// dead or unregistered): it may claim nothing.
type WorkerNotActiveError struct{ State string }

func (e *WorkerNotActiveError) Error() string { return "worker is " + e.State }

// JobClaim hands up to Limit claimable jobs of one queue to a worker, in
// priority then due-time order, skipping rows other claimers hold. The
// capability filter is part of the statement, so a job the worker cannot
// run is never claimed and never blocks the jobs behind it. It serves from
// jobs_waiting: equality on queue, then the index order is the ORDER BY;
// run_at and requires are filters on the rows the scan visits (1M jobs,
// 7,000 waiting: 0.14-0.5 ms). The worker row is read with FOR SHARE, so
// its capabilities are current and a concurrent unregister or death waits
// for the claim instead of leaving the job with a worker that is gone.
// When nothing is claimed because the worker is not ACTIVE, the error says so.
func (s *Store) JobClaim(ctx context.Context, p JobClaimParams) ([]Job, error) {
	if p.Limit <= 0 {
		p.Limit = 1
	}
	var jobs []Job
	err := s.asyncCommit(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
		WITH w AS (
			SELECT capabilities FROM workers WHERE worker_id = $2 AND state = 'ACTIVE' FOR SHARE
		), picked AS (
			SELECT j.id FROM jobs j, w
			WHERE j.queue = $1
			  AND j.status IN ('queued', 'scheduled', 'retrying')
			  AND j.run_at <= now()
			  AND j.requires <@ w.capabilities
			  AND NOT EXISTS (SELECT 1 FROM queues WHERE name = $1 AND paused)
			ORDER BY j.priority DESC, j.run_at, j.seq
			LIMIT $3
			FOR UPDATE OF j SKIP LOCKED
		)
		UPDATE jobs j SET
			status = 'running',
			worker_id = $2,
			attempt = j.attempt + 1,
			started_at = now(),
			ack_deadline = now() + $4::interval,
			lease_expires_at = now() + $5::interval,
			deadline_at = now() + make_interval(secs => j.timeout_seconds),
			progress = NULL,
			updated_at = now()
		FROM picked WHERE j.id = picked.id
		RETURNING `+jobCols("j."),
			p.Queue, p.WorkerID, p.Limit, p.AckTimeout, p.Lease)
		jobs, err = collectJobs(rows, err)
		if err != nil || len(jobs) > 0 {
			return err
		}
		var state string
		err = tx.QueryRow(ctx, `SELECT state FROM workers WHERE worker_id = $1`, p.WorkerID).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return &WorkerNotActiveError{State: WorkerUnregistered}
		}
		if err == nil && state != WorkerActive {
			return &WorkerNotActiveError{State: state}
		}
		return err
	})
	if err != nil {
		return nil, interpretError(err)
	}
	sortClaimed(jobs)
	return jobs, nil
}

// JobRelease gives a just-claimed job back when its delivery could not
// happen (the client left): queued again, the attempt not counted.
func (s *Store) JobRelease(ctx context.Context, id, workerID string) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var queue string
		var requires []string
		err := tx.QueryRow(ctx, `
			UPDATE jobs SET status = 'queued', worker_id = NULL, attempt = greatest(attempt - 1, 0),
				ack_deadline = NULL, lease_expires_at = NULL, deadline_at = NULL, started_at = NULL,
				updated_at = now()
			WHERE id = $1 AND worker_id = $2 AND status = 'running' AND ack_deadline IS NOT NULL
			RETURNING queue, requires`, id, workerID).Scan(&queue, &requires)
		if err == pgx.ErrNoRows {
			return nil // already acknowledged or moved on
		}
		if err != nil {
			return interpretError(err)
		}
		return notifyReady(ctx, tx, ReadyNote{Queue: queue, N: 1, Requires: requires})
	})
}
