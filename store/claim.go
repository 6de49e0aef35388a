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

// ClaimOutcome is what one claim statement did: the jobs it handed out,
// the workers that may not claim and why, whether the queue has limits,
// and, when its rate held jobs back, when the next start is allowed.
type ClaimOutcome struct {
	Claimed     []Claimed
	Refused     map[string]error
	Limited     bool
	RateLimited time.Time
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
// may not claim (not ACTIVE, or registered again with other capabilities)
// gets its error in the map, from the same statement. Claims commit without waiting for the WAL
// flush: a claim lost in a crash is delivered again, and the delivery
// token tells the two deliveries apart.
//
// A queue with limits (QueueConfigure) has its row locked by a statement
// before the claim, in the same transaction: claims of that queue on every
// node then take turns, and each counts the running jobs and recent starts
// the previous one committed. The claim takes no more jobs than the limits
// leave room for, and logs its starts for the rate.
func (s *Store) JobsClaim(ctx context.Context, p JobsClaimParams) (ClaimOutcome, error) {
	caps := cmpOrEmpty(p.Capabilities)
	var claimed []Claimed
	var rateLimited time.Time
	limited := false
	refused := map[string]error{}
	lock := &pgx.QueuedQuery{SQL: `
		SELECT 1 FROM queues WHERE name = $1 AND (max_running IS NOT NULL OR rate_limit IS NOT NULL)
		FOR NO KEY UPDATE`, Arguments: []any{p.Queue}}
	err := s.hotQuery(ctx, true, lock, func(rows pgx.Rows) error {
		// What a delivery carries, and what orders deliveries; or why a
		// worker may not claim.
		c := Claimed{Job: Job{Status: StatusRunning}}
		j := &c.Job
		var refusal string
		if err := rows.Scan(&c.Worker, &j.ID, &j.Seq, &j.Queue, &j.Type, &j.Requires, &j.Plan, &j.Inputs, &j.Payload,
			&j.Priority, &j.Attempt, &j.MaxAttempts, &j.TimeoutSeconds, &j.RunAt, &j.Delivery, &refusal); err != nil {
			return err
		}
		switch refusal {
		case "LIMITS":
			limited = true
			if j.RunAt.Unix() > 0 {
				rateLimited = j.RunAt
			}
		case "":
			j.WorkerID = &c.Worker
			claimed = append(claimed, c)
		case WorkerActive:
			refused[c.Worker] = ErrCapabilitiesChanged
		default:
			refused[c.Worker] = &WorkerNotActiveError{State: refusal}
		}
		return nil
	}, `
		WITH known AS MATERIALIZED (
			-- One index scan for all the named workers, however often each
			-- is named (ordered and limited so that the planner probes
			-- the primary key rather than reading a small table whole).
			SELECT worker_id, state, capabilities FROM workers WHERE worker_id = ANY($2::text[])
			ORDER BY worker_id LIMIT cardinality($2::text[])
		), named AS MATERIALIZED (
			SELECT u.wid, u.ord, coalesce(k.state, 'UNREGISTERED') AS state,
				coalesce(k.state = 'ACTIVE' AND k.capabilities = $3::text[], false) AS ok
			FROM unnest($2::text[]) WITH ORDINALITY AS u(wid, ord)
			LEFT JOIN known k ON k.worker_id = u.wid
		), w AS (
			-- The claimers in waiting order: the n-th job picked goes to
			-- the n-th of them.
			SELECT coalesce(array_agg(wid ORDER BY ord), '{}') AS wids FROM named WHERE ok
		), room AS (
			-- What the queue's limits leave room for (no row: no limits).
			SELECT CASE WHEN q.max_running IS NULL THEN NULL ELSE greatest(q.max_running - (
					SELECT count(*) FROM jobs r WHERE r.queue = $1 AND r.status = 'running'), 0) END AS by_running,
				CASE WHEN q.rate_limit IS NULL THEN NULL ELSE greatest(q.rate_limit - (
					SELECT count(*) FROM unnest(q.rate_starts) t WHERE t > now() - q.rate_period), 0) END AS by_rate,
				(SELECT min(t) FROM unnest(q.rate_starts) t WHERE t > now() - q.rate_period) + q.rate_period AS next_start
			FROM queues q WHERE q.name = $1 AND (q.max_running IS NOT NULL OR q.rate_limit IS NOT NULL)
		), picked AS (
			SELECT id, row_number() OVER () AS rn FROM (
				SELECT j.id FROM jobs j
				WHERE j.queue = $1
				  AND j.status IN ('queued', 'scheduled', 'retrying')
				  AND j.run_at <= now()
				  AND j.requires <@ $3::text[]
				  AND NOT EXISTS (SELECT 1 FROM queues WHERE name = $1 AND paused)
				ORDER BY j.priority DESC, j.run_at, j.seq
				LIMIT least((SELECT cardinality(wids) FROM w), (SELECT by_running FROM room), (SELECT by_rate FROM room))
				FOR UPDATE OF j SKIP LOCKED
			) p
		), claimed AS (
			UPDATE jobs j SET
				status = 'running',
				worker_id = (SELECT wids FROM w)[picked.rn],
				attempt = j.attempt + 1,
				delivery = gen_random_uuid(),
				started_at = now(),
				ack_deadline = now() + $4::interval,
				lease_expires_at = now() + $5::interval,
				deadline_at = now() + make_interval(secs => j.timeout_seconds),
				progress = NULL,
				updated_at = now()
			FROM picked WHERE j.id = picked.id
			RETURNING j.worker_id, j.id, j.seq, j.queue, j.type, j.requires, j.plan, j.inputs, j.payload, j.priority,
				j.attempt, j.max_attempts, j.timeout_seconds, j.run_at, j.delivery::text
		), logged AS (
			-- The rate's log: the starts still in the window, and these.
			UPDATE queues q SET rate_starts = ARRAY(
				SELECT t FROM unnest(q.rate_starts) t WHERE t > now() - q.rate_period
				UNION ALL SELECT now() FROM claimed)
			WHERE q.name = $1 AND q.rate_limit IS NOT NULL AND EXISTS (SELECT 1 FROM claimed)
		)
		SELECT *, '' FROM claimed
		UNION ALL
		-- A worker that may not claim says why, in the same round trip:
		-- its state, or ACTIVE when its capabilities changed.
		SELECT DISTINCT wid, '', 0::bigint, '', '', '{}'::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, 0,
			0, 0, 0, now(), '', state
		FROM named WHERE NOT ok
		UNION ALL
		-- The queue has limits; when its rate held jobs back, the time the
		-- next start is allowed.
		SELECT '', '', 0::bigint, '', '', '{}'::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, 0,
			0, 0, 0, CASE WHEN by_rate < (SELECT cardinality(wids) FROM w) AND next_start IS NOT NULL
				THEN next_start ELSE 'epoch' END, '', 'LIMITS'
		FROM room`,
		p.Queue, p.Workers, caps, p.AckTimeout, p.Lease)
	if err != nil {
		return ClaimOutcome{}, interpretError(err)
	}
	sort.SliceStable(claimed, func(a, b int) bool { return claimedBefore(claimed[a].Job, claimed[b].Job) })
	return ClaimOutcome{Claimed: claimed, Refused: refused, Limited: limited, RateLimited: rateLimited}, nil
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
