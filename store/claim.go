package store

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// JobsClaimParams says who claims from which queue: workers that all have
// the same capabilities, longest waiting first. A worker named n times may
// get up to n jobs.
type JobsClaimParams struct {
	Queue        string
	Workers      []string
	Capabilities []string
	AckTimeout   time.Duration
	Lease        time.Duration
}

// Claimed is one job handed to one worker: the job holds what a delivery
// carries (not its result, errors or timestamps).
type Claimed struct {
	Worker string
	Job    Job
}

// WorkerNotActiveError means the claiming worker is not ACTIVE (draining,
// dead or unregistered): it may claim nothing.
type WorkerNotActiveError struct{ State string }

func (e *WorkerNotActiveError) Error() string { return "worker is " + e.State }

// ErrCapabilitiesChanged means the worker registered again, with other
// capabilities, since the caller read them.
var ErrCapabilitiesChanged = errors.New("worker capabilities changed")

// JobsClaim hands claimable jobs of one queue to workers, one job per time
// a worker is named, in priority then due-time then submission order,
// skipping rows other claimers hold. One statement serves them all. The
// capability filter is part of it, so a job no claimer can run is never
// claimed and never blocks the jobs behind it. It serves from jobs_waiting:
// equality on queue, then the index order is the ORDER BY; run_at and
// requires are filters on the rows the scan visits (1M jobs, 7,000 waiting:
// 0.14-0.5 ms).
//
// Workers are checked (ACTIVE, with these capabilities) but not locked: a
// row every claim of a worker shared would serialise them. A claim that
// races with its worker's death leaves the job with a dead holder, whose
// unacknowledged delivery or lease the watchdog takes back. A worker that
// could not claim for its own reason gets its error in the map, checked only
// when some worker got nothing. Claims commit without waiting for the WAL
// flush: a claim lost in a crash is delivered again, and the delivery
// token tells the two deliveries apart.
func (s *Store) JobsClaim(ctx context.Context, p JobsClaimParams) ([]Claimed, map[string]error, error) {
	caps := cmpOrEmpty(p.Capabilities)
	var claimed []Claimed
	refused := map[string]error{}
	err := s.asyncQuery(ctx, func(rows pgx.Rows) error {
		// What a delivery carries, and what orders deliveries.
		c := Claimed{Job: Job{Status: StatusRunning}}
		j := &c.Job
		if err := rows.Scan(&c.Worker, &j.ID, &j.Seq, &j.Queue, &j.Type, &j.Requires, &j.Plan, &j.Inputs, &j.Payload,
			&j.Priority, &j.Attempt, &j.MaxAttempts, &j.TimeoutSeconds, &j.RunAt, &j.Delivery); err != nil {
			return err
		}
		j.WorkerID = &c.Worker
		claimed = append(claimed, c)
		return nil
	}, `
		WITH w AS MATERIALIZED (
			-- LIMIT 1 makes each check one primary-key probe, whatever
			-- the planner guesses of the array's length.
			SELECT u.wid, row_number() OVER (ORDER BY u.ord) AS rn
			FROM unnest($2::text[]) WITH ORDINALITY AS u(wid, ord)
			CROSS JOIN LATERAL (
				SELECT 1 FROM workers
				WHERE worker_id = u.wid AND state = 'ACTIVE' AND capabilities = $3::text[] LIMIT 1
			) active
		), picked AS (
			SELECT id, row_number() OVER () AS rn FROM (
				SELECT j.id FROM jobs j
				WHERE j.queue = $1
				  AND j.status IN ('queued', 'scheduled', 'retrying')
				  AND j.run_at <= now()
				  AND j.requires <@ $3::text[]
				  AND NOT EXISTS (SELECT 1 FROM queues WHERE name = $1 AND paused)
				ORDER BY j.priority DESC, j.run_at, j.seq
				LIMIT (SELECT count(*) FROM w)
				FOR UPDATE OF j SKIP LOCKED
			) p
		)
		UPDATE jobs j SET
			status = 'running',
			worker_id = w.wid,
			attempt = j.attempt + 1,
			delivery = gen_random_uuid(),
			started_at = now(),
			ack_deadline = now() + $4::interval,
			lease_expires_at = now() + $5::interval,
			deadline_at = now() + make_interval(secs => j.timeout_seconds),
			progress = NULL,
			updated_at = now()
		FROM picked JOIN w USING (rn) WHERE j.id = picked.id
		RETURNING w.wid, j.id, j.seq, j.queue, j.type, j.requires, j.plan, j.inputs, j.payload, j.priority,
			j.attempt, j.max_attempts, j.timeout_seconds, j.run_at, j.delivery::text`,
		p.Queue, p.Workers, caps, p.AckTimeout, p.Lease)
	if err != nil {
		return nil, nil, interpretError(err)
	}
	if len(claimed) < len(p.Workers) {
		// Some got nothing: say which of them may not claim at all.
		if err := s.claimRefusals(ctx, p.Workers, caps, refused); err != nil {
			return nil, nil, err
		}
	}
	sort.SliceStable(claimed, func(a, b int) bool { return claimedBefore(claimed[a].Job, claimed[b].Job) })
	return claimed, refused, nil
}

// claimRefusals notes, for each worker that is not ACTIVE with caps, why.
func (s *Store) claimRefusals(ctx context.Context, workers, caps []string, refused map[string]error) error {
	rows, err := s.Pool.Query(ctx, `
		SELECT u.wid, coalesce(w.state, 'UNREGISTERED')
		FROM unnest($1::text[]) AS u(wid)
		LEFT JOIN LATERAL (SELECT state, capabilities FROM workers WHERE worker_id = u.wid LIMIT 1) w ON true
		WHERE w.state IS DISTINCT FROM 'ACTIVE' OR w.capabilities <> $2::text[]`, workers, caps)
	if err != nil {
		return interpretError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return interpretError(err)
		}
		if state != WorkerActive {
			refused[id] = &WorkerNotActiveError{State: state}
		} else {
			refused[id] = ErrCapabilitiesChanged
		}
	}
	return interpretError(rows.Err())
}

// JobRelease gives back a just-claimed job whose delivery could not happen
// (the client left): queued again, the attempt not counted. The note says
// whom it may wake; the caller publishes it.
func (s *Store) JobRelease(ctx context.Context, id, workerID string) ([]ReadyNote, error) {
	var queue string
	var requires []string
	err := s.Pool.QueryRow(ctx, `
		UPDATE jobs SET status = 'queued', worker_id = NULL, attempt = greatest(attempt - 1, 0),
			ack_deadline = NULL, lease_expires_at = NULL, deadline_at = NULL, started_at = NULL,
			updated_at = now()
		WHERE id = $1 AND worker_id = $2 AND status = 'running' AND ack_deadline IS NOT NULL
		RETURNING queue, requires`, id, workerID).Scan(&queue, &requires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil // already acknowledged or moved on
	}
	if err != nil {
		return nil, interpretError(err)
	}
	return []ReadyNote{{Queue: queue, N: 1, Requires: requires}}, nil
}
