package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// JobClaimParams says who claims from which queue.
type JobClaimParams struct {
	Queue        string
	WorkerID     string
	Capabilities []string
	AckTimeout   time.Duration
	Lease        time.Duration
	Limit        int
}

// JobClaim hands up to Limit claimable jobs of one queue to a worker, in
// priority then due-time order, skipping rows other claimers hold. The
// capability filter is part of the statement, so a job the worker cannot
// run is never claimed and never blocks the jobs behind it. It serves from
// jobs_waiting: equality on queue, then the index order is the ORDER BY;
// run_at and requires are filters on the rows the scan visits. The worker
// must be ACTIVE and the queue not paused, checked in the same statement.
func (s *Store) JobClaim(ctx context.Context, p JobClaimParams) ([]Job, error) {
	if p.Limit <= 0 {
		p.Limit = 1
	}
	var jobs []Job
	err := s.asyncCommit(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
		WITH picked AS (
			SELECT id FROM jobs
			WHERE queue = $1
			  AND status IN ('queued', 'scheduled', 'retrying')
			  AND run_at <= now()
			  AND requires <@ $3::text[]
			  AND NOT EXISTS (SELECT 1 FROM queues WHERE name = $1 AND paused)
			  AND EXISTS (SELECT 1 FROM workers WHERE worker_id = $2 AND state = 'ACTIVE')
			ORDER BY priority DESC, run_at, id
			LIMIT $4
			FOR UPDATE SKIP LOCKED
		)
		UPDATE jobs j SET
			status = 'running',
			worker_id = $2,
			attempt = j.attempt + 1,
			started_at = now(),
			ack_deadline = now() + $5::interval,
			lease_expires_at = now() + $6::interval,
			deadline_at = now() + make_interval(secs => j.timeout_seconds),
			progress = NULL,
			updated_at = now()
		FROM picked WHERE j.id = picked.id
		RETURNING `+jobCols("j."),
			p.Queue, p.WorkerID, p.Capabilities, p.Limit, p.AckTimeout, p.Lease)
		jobs, err = collectJobs(rows, err)
		return err
	})
	if err != nil {
		return nil, err
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
