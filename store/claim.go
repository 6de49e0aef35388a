package store

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
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
// when its rate held jobs back, the next start it allows, and the limited
// job types that held jobs back.
type ClaimOutcome struct {
	Claimed []Claimed
	Refused map[string]error
	Limited bool
	// NamespaceLimited says the namespace's cap of running jobs applies
	// (Limited too).
	NamespaceLimited bool
	RateLimited      time.Time
	Types            []TypeHold
	// Again says the limits' locks held back jobs another claim may take
	// at once.
	Again bool
}

// TypeHold is a job type whose limits held back jobs of the claim's queue.
// RateLimited, when set, is when the type's rate allows its next start.
type TypeHold struct {
	Type        string
	RateLimited time.Time
}

// Claimed is one job handed to one worker: the job holds what a delivery
// carries (not its result, errors or timestamps).
type Claimed struct {
	Worker string
	Job    records.Job
	order  int64 // in the claim's order
}

// WorkerNotActiveError means the claiming worker is not ACTIVE (draining,
// dead or unregistered): it may claim nothing.
type WorkerNotActiveError struct{ State string }

func (e *WorkerNotActiveError) Error() string { return "worker is " + e.State }

// JobsClaim hands claimable jobs of one queue to workers, one job per time
// a worker is named, in priority, then fair-share pass (store/fair.go),
// then due-time, then submission order, skipping rows other claimers
// hold. A statement before it places the due jobs without a pass; one
// statement then serves all the claimers. The
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
// Limits (QueueConfigure, TypeConfigure, and the namespace's cap of
// running jobs, NAMESPACE.CONFIG MAXRUNNING) are counted in the claim's own
// transaction. A statement before the claim locks the queue's row when the
// queue has limits, then the namespace's row when it has a cap, then the
// rows of the limited job types among the jobs
// the claim is about to take, in name order: claims that could start jobs
// of the same limited queue or type take turns on every node, and each
// counts the running jobs and recent starts the previous one committed.
// The claim takes no more than the limits leave room for, never a job of a
// limited type whose row it did not lock, and logs its starts for the
// rates. Where no limits apply (the usual case) the claim is one lean
// statement instead, without locks or counts (claimUnlimited).
//
// A claim takes jobs of s's namespace only, for workers registered there:
// the queue, its limits and pause, the job types' limits and the workers
// named are all the namespace's.
func (s *Store) JobsClaim(ctx context.Context, p JobsClaimParams) (ClaimOutcome, error) {
	key := queueKey{s.ns, p.Queue}
	if _, limited := s.limitedQueues.Load(key); !limited {
		out, limited, err := s.claimUnlimited(ctx, p)
		if err != nil || !limited {
			return out, err
		}
		s.limitedQueues.Store(key, true)
	}
	out, limited, err := s.claimLimited(ctx, p)
	if err == nil && !limited {
		s.limitedQueues.Delete(key)
	}
	return out, err
}

// queueKey names a queue of a namespace (limitedQueues).
type queueKey struct{ ns, queue string }

// claimUnlimited is the claim where no limits apply: neither the queue nor
// any job type has them (the usual case). It answers limited, having
// claimed nothing, when some do; the caller then claims with
// claimLimited. A limit set while this statement runs applies from the
// next claim on, as it would to jobs already running when it was set.
func (s *Store) claimUnlimited(ctx context.Context, p JobsClaimParams) (out ClaimOutcome, limited bool, err error) {
	out.Refused = map[string]error{}
	out.Claimed = make([]Claimed, 0, min(len(p.Workers), 1024))
	err = s.hotQuery(ctx, true, []*pgx.QueuedQuery{placeDue(s.ns, p.Queue)}, func(rows pgx.Rows) error {
		c, refusal, err := s.scanClaimRow(rows)
		if err != nil {
			return err
		}
		switch refusal {
		case "LIMITS":
			limited = true
		default:
			out.add(c, refusal)
		}
		return nil
	}, claimJobsUnlimited, p.Queue, p.Workers, cmpOrEmpty(p.Capabilities), p.AckTimeout, p.Lease, s.ns)
	if err != nil {
		return ClaimOutcome{}, false, interpretError(err)
	}
	if limited {
		return ClaimOutcome{}, true, nil
	}
	out.sort()
	return out, false, nil
}

// claimLimited is the claim under limits (see JobsClaim). It answers
// whether any applied: the queue's, or some job type's.
func (s *Store) claimLimited(ctx context.Context, p JobsClaimParams) (ClaimOutcome, bool, error) {
	caps := cmpOrEmpty(p.Capabilities)
	var out ClaimOutcome
	out.Refused = map[string]error{}
	out.Claimed = make([]Claimed, 0, min(len(p.Workers), 1024))
	limited := true
	lock := &pgx.QueuedQuery{SQL: claimLocks, Arguments: []any{p.Queue, caps, len(p.Workers), s.ns}}
	lock.Query(func(rows pgx.Rows) error {
		// Limited types that looked full, ahead in the queue: not locked,
		// and their jobs not taken, but a finish of theirs wakes this
		// queue's pops. A row without a type: no limits at all.
		for rows.Next() {
			var h TypeHold
			var next time.Time
			if err := rows.Scan(&h.Type, &next); err != nil {
				return err
			}
			if h.Type == "" {
				limited = false
				continue
			}
			if next.Unix() > 0 {
				h.RateLimited = next
			}
			out.Types = append(out.Types, h)
		}
		return rows.Err()
	})
	err := s.hotQuery(ctx, true, []*pgx.QueuedQuery{placeDue(s.ns, p.Queue), lock}, func(rows pgx.Rows) error {
		// What a delivery carries, and what orders deliveries; or why a
		// worker may not claim; or a limit that held jobs back.
		c, refusal, err := s.scanClaimRow(rows)
		if err != nil {
			return err
		}
		j := &c.Job
		switch refusal {
		case "LIMITS", "NAMESPACE":
			out.Limited = true
			out.NamespaceLimited = out.NamespaceLimited || refusal == "NAMESPACE"
			out.Again = out.Again || j.Attempt == 1
			if j.RunAt.Unix() > 0 {
				out.RateLimited = j.RunAt
			}
		case "TYPE":
			// A locked type that held jobs back: claiming again may take
			// jobs behind them.
			h := TypeHold{Type: j.Type}
			out.Again = true
			if j.RunAt.Unix() > 0 {
				h.RateLimited = j.RunAt
			}
			out.Types = append(out.Types, h)
		default:
			out.add(c, refusal)
		}
		return nil
	}, claimJobs, p.Queue, p.Workers, caps, p.AckTimeout, p.Lease, s.ns)
	if err != nil {
		return ClaimOutcome{}, true, interpretError(err)
	}
	out.sort()
	return out, limited, nil
}

// scanClaimRow reads one row of a claim: what a delivery carries, and
// what orders deliveries; or why a worker may not claim; or a limit that
// held jobs back. The job is of s's namespace.
func (s *Store) scanClaimRow(rows pgx.Rows) (Claimed, string, error) {
	c := Claimed{Job: records.Job{Namespace: s.ns, Status: records.StatusRunning}}
	j := &c.Job
	var refusal string
	err := rows.Scan(&c.Worker, &j.ID, &j.Seq, &j.Queue, &j.Type, &j.Requires, rawJSON(&j.Plan), rawJSON(&j.Inputs), rawJSON(&j.Payload),
		&j.Priority, &j.Attempt, &j.MaxAttempts, &j.TimeoutSeconds, &j.RunAt, &j.Delivery, &j.After,
		&j.TraceParent, &j.TraceState, &j.FairKey, &c.order, &refusal)
	return c, refusal, err
}

// add records a claimed job (no refusal) or a worker's refusal.
func (out *ClaimOutcome) add(c Claimed, refusal string) {
	switch refusal {
	case "":
		w := c.Worker // (a pointer to c's own field would move all of c to the heap)
		c.Job.WorkerID = &w
		out.Claimed = append(out.Claimed, c)
	case records.WorkerActive:
		out.Refused[c.Worker] = records.ErrCapabilitiesChanged
	default:
		out.Refused[c.Worker] = &WorkerNotActiveError{State: refusal}
	}
}

// sort puts the claimed jobs in delivery order, which UPDATE … RETURNING
// does not keep.
func (out *ClaimOutcome) sort() {
	sort.Slice(out.Claimed, func(a, b int) bool { return out.Claimed[a].order < out.Claimed[b].order })
}

// A limited type's running jobs are counted among the namespace's running
// ones, all read through jobs_running.
//
// claimLocks locks what the claim that follows counts on, in namespace $4:
// the queue's row
// when it has limits, then the rows of the limited types that look open
// among the next jobs the claim would take ($3 of them, types that look
// full skipped), recording their names for the claim, and whether it
// locked the queue's row (a queue given limits since must not be counted
// unlocked, nor its row updated out of order). It answers the
// limited types that look full among the queue's next jobs, and when
// their rate allows a start. What it reads without locks only chooses
// what to lock; the claim counts again under the locks.
const claimLocks = `
	WITH q AS (
		SELECT 1 FROM queues WHERE namespace = $4 AND name = $1 AND (max_running IS NOT NULL OR rate_limit IS NOT NULL OR max_running_per_key IS NOT NULL)
		FOR NO KEY UPDATE
	), nsl AS (
		-- The namespace's row when it caps its running jobs (MAXRUNNING):
		-- its claims, of every queue, take turns on every node.
		SELECT 1 FROM namespaces WHERE name = $4 AND max_running IS NOT NULL
		FOR NO KEY UPDATE
	), lim AS MATERIALIZED (
		SELECT name,
			(max_running IS NULL OR max_running > (
				SELECT count(*) FROM jobs r WHERE r.namespace = t.namespace AND r.status = 'running' AND r.type = t.name))
			AND (rate_limit IS NULL OR rate_limit > (
				SELECT count(*) FROM unnest(rate_starts) s WHERE s > now() - rate_period)) AS open,
			(SELECT min(s) FROM unnest(rate_starts) s WHERE s > now() - rate_period) + rate_period AS next_start
		FROM job_types t WHERE t.namespace = $4
	), ahead AS MATERIALIZED (
		-- The queue's next jobs, types that look full included; read only
		-- when some type has limits. They are locked (the claim takes
		-- them, or leaves them at its commit), so that the types locked
		-- are those of jobs no other claim is taking.
		SELECT j.type FROM jobs j
		WHERE j.namespace = $4 AND j.queue = $1 AND j.status IN ('queued', 'scheduled', 'retrying') AND j.run_at <= now()
		  AND j.requires <@ $2::text[] AND EXISTS (SELECT 1 FROM lim)
		ORDER BY j.priority DESC, j.fair_pass, j.run_at, j.seq LIMIT $3
		FOR UPDATE OF j SKIP LOCKED
	), past AS MATERIALIZED (
		-- The next jobs past the types that look full.
		SELECT j.type FROM jobs j
		WHERE j.namespace = $4 AND j.queue = $1 AND j.status IN ('queued', 'scheduled', 'retrying') AND j.run_at <= now()
		  AND j.requires <@ $2::text[] AND EXISTS (SELECT 1 FROM lim WHERE NOT open)
		  AND j.type NOT IN (SELECT name FROM lim WHERE NOT open)
		ORDER BY j.priority DESC, j.fair_pass, j.run_at, j.seq LIMIT $3
		FOR UPDATE OF j SKIP LOCKED
	), locked AS (
		SELECT t.name FROM job_types t
		WHERE t.namespace = $4 AND (t.name IN (SELECT type FROM ahead) OR t.name IN (SELECT type FROM past))
		  AND t.name IN (SELECT name FROM lim WHERE open)
		ORDER BY t.name FOR NO KEY UPDATE
	)
	SELECT '', 'epoch'::timestamptz FROM (SELECT count(*) AS n FROM q) q
	WHERE set_config('agq.claim_queue', q.n::text, true)
		|| set_config('agq.claim_namespace', (SELECT count(*) FROM nsl)::text, true)
		|| set_config('agq.claim_types', (SELECT coalesce(array_agg(name), '{}') FROM locked)::text, true) IS NULL
	UNION ALL
	SELECT name, coalesce(next_start, 'epoch') FROM lim
	WHERE NOT open AND name IN (SELECT type FROM ahead)
	UNION ALL
	SELECT '', 'epoch' WHERE NOT EXISTS (SELECT 1 FROM q) AND NOT EXISTS (SELECT 1 FROM nsl) AND NOT EXISTS (SELECT 1 FROM lim)`

// claimWorkers reads the claimers (named in $2, to have capabilities $3,
// registered in namespace $6: a worker of another is not registered here):
// the CTEs known, named and w that both claims start with.
const claimWorkers = `
	WITH known AS MATERIALIZED (
		-- One index scan for all the named workers, however often each
		-- is named (ordered and limited so that the planner probes
		-- the primary key rather than reading a small table whole).
		SELECT worker_id, state, capabilities FROM workers WHERE worker_id = ANY($2::text[]) AND namespace = $6
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
	)`

// claimUpdate is what a claim changes in each job it takes (the n-th of
// fits, numbered rn, going to the n-th claimer), and what it answers.
const claimUpdate = `
		UPDATE jobs j SET
			status = 'running',
			worker_id = (SELECT wids FROM w)[fits.rn],
			attempt = j.attempt + 1,
			delivery = gen_random_uuid(),
			started_at = statement_timestamp(),
			ack_deadline = statement_timestamp() + $4::interval,
			lease_expires_at = statement_timestamp() + $5::interval,
			deadline_at = statement_timestamp() + make_interval(secs => j.timeout_seconds),
			progress = NULL,
			updated_at = statement_timestamp()
		FROM fits WHERE j.namespace = $6 AND j.id = fits.id
		RETURNING j.worker_id, j.id, j.seq, j.queue, j.type, j.requires, j.plan, j.inputs, j.payload, j.priority,
			j.attempt, j.max_attempts, j.timeout_seconds, j.run_at, j.delivery::text, j.after,
			coalesce(j.traceparent, ''), coalesce(j.tracestate, ''), j.fair_key, fits.rn`

// claimRefusals answers, after the claimed jobs, the workers that may not
// claim and why: their state, or ACTIVE when their capabilities changed.
const claimRefusals = `
	SELECT DISTINCT wid, '', 0::bigint, '', '', '{}'::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, 0,
		0, 0, 0, now(), '', NULL::text[], '', '', '', 0::bigint, state
	FROM named WHERE NOT ok`

// claimJobsUnlimited is the claim without limits: the next jobs of the
// queue $1 of namespace $6 (jobs_waiting: namespace and queue equality,
// then the index order), unless the queue or some job type has limits, in which case it
// claims nothing and answers LIMITS. It reads neither limits nor locks
// beyond the jobs it takes.
const claimJobsUnlimited = claimWorkers + `, free AS (
		SELECT NOT EXISTS (SELECT 1 FROM job_types WHERE namespace = $6)
			AND NOT EXISTS (SELECT 1 FROM queues WHERE namespace = $6 AND name = $1
			                AND (max_running IS NOT NULL OR rate_limit IS NOT NULL OR max_running_per_key IS NOT NULL))
			AND NOT EXISTS (SELECT 1 FROM namespaces WHERE name = $6 AND max_running IS NOT NULL) AS yes
	), fits AS (
		SELECT id, row_number() OVER () AS rn FROM (
			SELECT j.id FROM jobs j
			WHERE j.namespace = $6 AND j.queue = $1
			  AND j.status IN ('queued', 'scheduled', 'retrying')
			  AND j.run_at <= now()
			  AND j.requires <@ $3::text[]
			  AND (SELECT yes FROM free)
			  AND NOT EXISTS (SELECT 1 FROM queues WHERE namespace = $6 AND name = $1 AND paused)
			ORDER BY j.priority DESC, j.fair_pass, j.run_at, j.seq
			LIMIT (SELECT cardinality(wids) FROM w)
			FOR UPDATE OF j SKIP LOCKED
		) p
	), claimed AS (` + claimUpdate + `
	)
	SELECT *, '' FROM claimed
	UNION ALL` + claimRefusals + `
	UNION ALL
	SELECT '', '', 0::bigint, '', '', '{}'::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, 0,
		0, 0, 0, now(), '', NULL::text[], '', '', '', 0::bigint, 'LIMITS'
	FROM free WHERE NOT yes`

// claimJobs is the claim itself, under claimLocks' locks, in namespace $6.
// Its times are the statement's, not the transaction's: the transaction
// began before claimLocks waited for its locks, and a start logged at that
// earlier time would leave the rate's window too soon.
const claimJobs = claimWorkers + `, qlocked AS (
		SELECT coalesce(current_setting('agq.claim_queue', true), '') = '1' AS yes
	), room AS (
		-- What the queue's limits leave room for (no row: no limits);
		-- none when claimLocks did not lock its row (limits set since).
		SELECT (SELECT yes FROM qlocked) AS locked,
			CASE WHEN NOT (SELECT yes FROM qlocked) THEN 0 WHEN q.max_running IS NULL THEN NULL ELSE greatest(q.max_running - (
				SELECT count(*) FROM jobs r WHERE r.namespace = $6 AND r.queue = $1 AND r.status = 'running'), 0) END AS by_running,
			CASE WHEN NOT (SELECT yes FROM qlocked) THEN 0 WHEN q.rate_limit IS NULL THEN NULL ELSE greatest(q.rate_limit - (
				SELECT count(*) FROM unnest(q.rate_starts) t WHERE t > statement_timestamp() - q.rate_period), 0) END AS by_rate,
			(SELECT min(t) FROM unnest(q.rate_starts) t WHERE t > statement_timestamp() - q.rate_period) + q.rate_period AS next_start
		FROM queues q WHERE q.namespace = $6 AND q.name = $1 AND (q.max_running IS NOT NULL OR q.rate_limit IS NOT NULL OR q.max_running_per_key IS NOT NULL)
	), nsroom AS (
		-- What the namespace's cap of running jobs leaves room for (no
		-- row: no cap); none when claimLocks did not lock its row (a cap
		-- set since). Counted among all running jobs (jobs_running).
		SELECT coalesce(current_setting('agq.claim_namespace', true), '') = '1' AS locked,
			CASE WHEN coalesce(current_setting('agq.claim_namespace', true), '') <> '1' THEN 0 ELSE greatest(n.max_running - (
				SELECT count(*) FROM jobs r WHERE r.namespace = $6 AND r.status = 'running'), 0) END AS n
		FROM namespaces n WHERE n.name = $6 AND n.max_running IS NOT NULL
	), keyroom AS MATERIALIZED (
		-- What the queue's cap of running jobs per named key leaves room
		-- for, for the keys running any (a key running none has the whole
		-- cap). Counted under the queue's row lock.
		SELECT r.fair_key, greatest(q.max_running_per_key - count(*), 0) AS n
		FROM queues q JOIN jobs r ON r.namespace = q.namespace AND r.queue = q.name
		WHERE q.namespace = $6 AND q.name = $1 AND q.max_running_per_key IS NOT NULL AND (SELECT yes FROM qlocked)
		  AND r.status = 'running' AND r.fair_key <> ''
		GROUP BY r.fair_key, q.max_running_per_key
	), keycap AS (
		SELECT (SELECT max_running_per_key FROM queues WHERE namespace = $6 AND name = $1) AS cap,
			(SELECT coalesce(array_agg(fair_key), '{}') FROM keyroom WHERE n = 0) AS full_keys
	), typeroom AS MATERIALIZED (
		-- What each limited type locked by claimLocks leaves room for.
		SELECT t.name, least(
				CASE WHEN t.max_running IS NULL THEN NULL ELSE greatest(t.max_running - (
					SELECT count(*) FROM jobs r WHERE r.namespace = t.namespace AND r.status = 'running' AND r.type = t.name), 0) END,
				CASE WHEN t.rate_limit IS NULL THEN NULL ELSE greatest(t.rate_limit - (
					SELECT count(*) FROM unnest(t.rate_starts) s WHERE s > statement_timestamp() - t.rate_period), 0) END) AS n,
			CASE WHEN t.rate_limit IS NULL THEN NULL ELSE (
				SELECT min(s) FROM unnest(t.rate_starts) s WHERE s > statement_timestamp() - t.rate_period) + t.rate_period END AS next_start
		FROM job_types t
		WHERE t.namespace = $6 AND t.name = ANY(coalesce(nullif(current_setting('agq.claim_types', true), ''), '{}')::text[])
	), shut AS (
		-- Limited types this claim takes no job of: not locked, or full.
		SELECT coalesce(array_agg(name), '{}') AS names FROM (
			SELECT name FROM job_types WHERE namespace = $6 AND name NOT IN (SELECT name FROM typeroom)
			UNION ALL SELECT name FROM typeroom WHERE n = 0) s
	), picked AS (
		SELECT id, type, fair_key, row_number() OVER () AS pos FROM (
			SELECT j.id, j.type, j.fair_key FROM jobs j
			WHERE j.namespace = $6 AND j.queue = $1
			  AND j.status IN ('queued', 'scheduled', 'retrying')
			  AND j.run_at <= now()
			  AND j.requires <@ $3::text[]
			  -- Written so that the planner keeps its estimate of the
			  -- rows that pass (a plain NOT = ANY of an array it cannot
			  -- see reads as "almost none", and the index order is lost).
			  AND (CASE WHEN j.type = ANY((SELECT names FROM shut)::text[]) THEN NULL ELSE 1 END) IS NOT NULL
			  AND (CASE WHEN j.fair_key = ANY((SELECT full_keys FROM keycap)::text[]) THEN NULL ELSE 1 END) IS NOT NULL
			  AND NOT EXISTS (SELECT 1 FROM queues WHERE namespace = $6 AND name = $1 AND paused)
			ORDER BY j.priority DESC, j.fair_pass, j.run_at, j.seq
			LIMIT least((SELECT cardinality(wids) FROM w), (SELECT by_running FROM room), (SELECT by_rate FROM room),
				(SELECT n FROM nsroom))
			FOR UPDATE OF j SKIP LOCKED
		) p
	), fits AS (
		-- Within each limited type's room and each named key's, in
		-- delivery order.
		SELECT f.id, row_number() OVER (ORDER BY f.pos) AS rn FROM (
			SELECT p.id, p.pos, p.type, p.fair_key,
				row_number() OVER (PARTITION BY p.type ORDER BY p.pos) AS nth,
				row_number() OVER (PARTITION BY p.fair_key ORDER BY p.pos) AS nth_of_key
			FROM picked p) f
		WHERE f.nth <= coalesce((SELECT n FROM typeroom WHERE name = f.type), f.nth)
		  AND (f.fair_key = '' OR f.nth_of_key <= coalesce(
			(SELECT n FROM keyroom WHERE fair_key = f.fair_key), (SELECT cap FROM keycap), f.nth_of_key))
	), claimed AS (` + claimUpdate + `
	), logged AS (
		-- The rate's log: the starts still in the window, and these.
		UPDATE queues q SET rate_starts = ARRAY(
			SELECT t FROM unnest(q.rate_starts) t WHERE t > statement_timestamp() - q.rate_period
			UNION ALL SELECT statement_timestamp() FROM claimed)
		WHERE q.namespace = $6 AND q.name = $1 AND q.rate_limit IS NOT NULL AND EXISTS (SELECT 1 FROM claimed) AND (SELECT yes FROM qlocked)
	), typelogged AS (
		UPDATE job_types t SET rate_starts = ARRAY(
			SELECT s FROM unnest(t.rate_starts) s WHERE s > statement_timestamp() - t.rate_period
			UNION ALL SELECT statement_timestamp() FROM claimed c WHERE c.type = t.name)
		WHERE t.namespace = $6 AND t.name IN (SELECT type FROM claimed) AND t.rate_limit IS NOT NULL
	)
	SELECT *, '' FROM claimed
	UNION ALL` + claimRefusals + `
	UNION ALL
	-- The queue has limits; when its rate held jobs back, the time the
	-- next start is allowed; attempt 1 when its row was not locked (claim
	-- again).
	SELECT '', '', 0::bigint, '', '', '{}'::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, 0,
		CASE WHEN locked AND (SELECT count(*) FROM fits) = (SELECT count(*) FROM picked) THEN 0 ELSE 1 END,
		0, 0, CASE WHEN locked AND by_rate < (SELECT cardinality(wids) FROM w) AND next_start IS NOT NULL
			THEN next_start ELSE 'epoch' END, '', NULL::text[], '', '', '', 0::bigint, 'LIMITS'
	FROM room
	UNION ALL
	-- The namespace caps its running jobs; attempt 1 when its row was not
	-- locked (claim again).
	SELECT '', '', 0::bigint, '', '', '{}'::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, 0,
		CASE WHEN locked THEN 0 ELSE 1 END, 0, 0, 'epoch', '', NULL::text[], '', '', '', 0::bigint, 'NAMESPACE'
	FROM nsroom
	UNION ALL
	-- A locked type that held jobs back: trimmed (jobs picked past its
	-- room), or full although claimLocks saw room (its jobs skipped, and
	-- other locked jobs perhaps with them). Either way another claim may
	-- take more. Its next start when it has a rate.
	SELECT '', '', 0::bigint, '', r.name, '{}'::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, 0,
		0, 0, 0, coalesce(r.next_start, 'epoch'), '', NULL::text[], '', '', '', 0::bigint, 'TYPE'
	FROM typeroom r
	WHERE r.n = 0 OR r.n < (SELECT count(*) FROM picked p WHERE p.type = r.name)`

// JobRelease gives back a just-claimed job whose delivery could not happen
// (the client left): queued again, the attempt not counted. Only that
// delivery is given back, never a later one of the same job. The note says
// whom it may wake; the caller publishes it. A job whose cancellation was
// asked meanwhile ends cancelled instead, as a sweep would end it, and
// listeners are told inside the transaction: no note.
func (s *Store) JobRelease(ctx context.Context, j records.Job, workerID string) ([]records.ReadyNote, error) {
	var notes []records.ReadyNote
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, releaseSQL, j.ID, workerID, j.Delivery, s.ns)
		if err != nil {
			return err
		}
		var moved []movedJob
		for rows.Next() {
			m, err := scanMoved(rows)
			if err != nil {
				rows.Close()
				return err
			}
			moved = append(moved, m)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, m := range moved { // none when already acknowledged or moved on
			if m.status != records.StatusCancelled {
				notes = append(notes, records.ReadyNote{Namespace: s.ns, Queue: m.queue, N: 1, Requires: m.requires})
				continue
			}
			if err := tellMoved(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, interpretError(err)
	}
	return notes, nil
}

// releaseSQL gives back the delivery $3 of job $1 of namespace $4 claimed
// for worker $2 while unacknowledged: found by its key or among the
// worker's running
// jobs (jobs_running), as the planner likes. A job asked to cancel keeps
// its holder and attempt: it will not run again, and a report naming that
// delivery is then about the job's latest one, answered CANCELLED.
const releaseSQL = `
	UPDATE jobs j SET
		status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
		finished_at = CASE WHEN j.cancel_requested THEN now() END,
		worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
		attempt = CASE WHEN j.cancel_requested THEN j.attempt ELSE greatest(j.attempt - 1, 0) END,
		` + clearDelivery + `, updated_at = now()
	WHERE j.namespace = $4 AND j.id = $1 AND j.worker_id = $2 AND j.status = 'running' AND j.ack_deadline IS NOT NULL
		AND j.delivery IS NOT DISTINCT FROM $3::uuid
	RETURNING ` + movedColumns
