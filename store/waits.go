package store

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// Waits (STEP.WAIT) and signals (JOB.SIGNAL). A wait is a job_steps row of
// kind wait; while it is awaiting, its job is awaiting too and holds no
// worker. Whatever ends the wait — its signal, its deadline — completes
// the step with its output and queues the job in one transaction, so the
// next delivery's STEP.WAIT answers that output.

// wakeSQL queues an awaiting job whose wait just ended; it takes a new
// place among its key's jobs (jobs_unplace).
const wakeSQL = `
	UPDATE jobs SET status = 'queued', run_at = now(), updated_at = now()
	WHERE namespace = $1 AND id = $2 AND status = 'awaiting'
	RETURNING queue, requires`

// wake queues job id of namespace ns after its wait ended, noting it for
// pops.
func wake(ctx context.Context, tx pgx.Tx, ns, id string, fx *records.Effects) error {
	var queue string
	var requires []string
	err := tx.QueryRow(ctx, wakeSQL, ns, id).Scan(&queue, &requires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	fx.Ready = append(fx.Ready, records.ReadyNote{Queue: queue, N: 1, Requires: requires})
	fx.Moved = append(fx.Moved, id)
	return nil
}

// JobSignal stores a signal for a job of s's namespace, once per token,
// and in the same transaction ends the job's wait for a signal of that
// name, if any: the wait takes it, and the job is queued.
func (s *Store) JobSignal(ctx context.Context, p records.SignalParams) (res records.SignalResult, fx records.Effects, err error) {
	if !storable(p.JobID, p.Name, p.Token) {
		return res, fx, records.ErrNotFound
	}
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		res, fx = records.SignalResult{}, records.Effects{}
		// The job's row lock orders signals and waits of one job.
		var status string
		if err := lockJob(ctx, tx, s.ns, p.JobID, `status`, &status); err != nil {
			return err
		}
		if p.Token != "" {
			// job_signals_token.
			var seen bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM job_signals WHERE namespace = $1 AND job_id = $2 AND token = $3)`,
				s.ns, p.JobID, p.Token).Scan(&seen); err != nil || seen {
				return err
			}
		}
		if records.IsTerminal(status) {
			return &records.JobEndedError{}
		}
		// The key's first columns bound the count to the job's rows.
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM job_signals WHERE namespace = $1 AND job_id = $2`,
			s.ns, p.JobID).Scan(&n); err != nil {
			return err
		}
		if n >= records.MaxSignals {
			return &records.SignalLimitError{}
		}
		var seq int64
		if err := tx.QueryRow(ctx, `
			INSERT INTO job_signals (namespace, job_id, name, payload, token) VALUES ($1, $2, $3, $4::jsonb, nullif($5, ''))
			RETURNING seq`, s.ns, p.JobID, p.Name, p.Payload, p.Token).Scan(&seq); err != nil {
			return err
		}
		res.Stored = true
		if status != records.StatusAwaiting {
			return nil
		}
		// job_steps_awaiting: the job's one open wait, if it is for this
		// name. Read without a row lock, then changed by its key: the
		// settling of JOBS waits locks their rows before their jobs', and
		// this transaction holds the job's.
		err = tx.QueryRow(ctx, signalWaitSQL, s.ns, p.JobID, p.Name).Scan(&res.Woke)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			UPDATE job_steps SET status = 'completed', completed_at = now(),
				output = jsonb_build_object('signal', $4::text, 'payload', $5::jsonb)
			WHERE namespace = $1 AND job_id = $2 AND step_id = $3 AND awaiting`,
			s.ns, p.JobID, res.Woke, p.Name, p.Payload); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE job_signals SET taken_by = $4 WHERE namespace = $1 AND job_id = $2 AND seq = $3`,
			s.ns, p.JobID, seq, res.Woke); err != nil {
			return err
		}
		return wake(ctx, tx, s.ns, p.JobID, &fx)
	})
	if err != nil {
		return records.SignalResult{}, records.Effects{}, interpretError(err)
	}
	return res, fx, nil
}

// waitOutput is a completed wait's output, JSON null when it has none.
func waitOutput(r stepRow) json.RawMessage {
	if len(r.output) == 0 {
		return json.RawMessage("null")
	}
	return r.output
}

// StepWait is STEP.WAIT: a wait that ended (or a signal already stored and
// not taken) answers its output; otherwise the job goes to await, its
// attempt given back and its worker freed, as a sleep does. Sent again by
// the delivery that began it, it answers the same deadline. changed
// reports whether this call made the job await.
func (s *Store) StepWait(ctx context.Context, p records.StepWaitParams) (res records.StepWaitResult, changed bool, fx records.Effects, err error) {
	again := func(tx pgx.Tx, j stepJob) (bool, error) {
		r, err := readStep(ctx, tx, j.ns, p.JobID, p.StepID, nil)
		if err != nil || !r.found || r.kind != records.StepKindWait || r.status != records.StepAwaiting || !r.current(j) ||
			j.status != records.StatusAwaiting {
			return false, err
		}
		res = records.StepWaitResult{Awaiting: true, Deadline: r.wakeAt}
		return true, nil
	}
	fx, err = s.stepCall(ctx, p.StepParams, again, func(tx pgx.Tx, j stepJob, fx *records.Effects) error {
		res, changed = records.StepWaitResult{}, false
		r, err := readStep(ctx, tx, j.ns, p.JobID, p.StepID, nil)
		switch {
		case err != nil:
			return err
		case r.found && r.kind != records.StepKindWait:
			return &records.StepKindError{StepID: p.StepID, Kind: r.kind}
		case r.found && r.status == records.StepCompleted && len(r.output) == 0:
			// Woken by its last job's end: its output is read now, once.
			return s.keepJobsOutput(ctx, tx, j.ns, p, &res)
		case r.found && r.status == records.StepCompleted:
			res.Output = waitOutput(r)
			return nil
		case r.found:
			// An awaiting wait whose delivery ended otherwise (an admin
			// moved the job, a retry of the job cancelled as it waited):
			// it waits again below, for nothing it awaited before.
			if _, err := tx.Exec(ctx, `DELETE FROM job_steps WHERE namespace = $1 AND job_id = $2 AND step_id = $3 AND NOT replaced`,
				j.ns, p.JobID, p.StepID); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM job_waits WHERE namespace = $1 AND child_id = $2`, j.ns, p.JobID); err != nil {
				return err
			}
		}
		if len(p.Jobs) > 0 {
			return s.waitJobs(ctx, tx, p, j, r, &res, &changed, fx)
		}
		out, taken, err := takeSignal(ctx, tx, j.ns, p.JobID, p.StepID, p.Signal)
		if err != nil {
			return err
		}
		return s.beginWait(ctx, tx, p, j, r, out, taken, &res, &changed, fx)
	})
	return res, changed, fx, err
}

// takeSignal gives step the oldest signal of name not yet taken
// (job_signals_untaken): the wait's output, or taken false when none is.
func takeSignal(ctx context.Context, tx pgx.Tx, ns, jobID, step, name string) (json.RawMessage, bool, error) {
	var out json.RawMessage
	err := tx.QueryRow(ctx, `
		UPDATE job_signals g SET taken_by = $4
		FROM (SELECT seq FROM job_signals WHERE namespace = $1 AND job_id = $2 AND name = $3 AND taken_by IS NULL ORDER BY seq LIMIT 1) o
		WHERE g.namespace = $1 AND g.job_id = $2 AND g.seq = o.seq
		RETURNING jsonb_build_object('signal', g.name, 'payload', g.payload)`, ns, jobID, name, step).Scan(&out)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	return out, err == nil, err
}

// beginWait records the wait: completed with out when done, else awaiting
// until its deadline with the job awaiting.
func (s *Store) beginWait(ctx context.Context, tx pgx.Tx, p records.StepWaitParams, j stepJob, r stepRow,
	out json.RawMessage, done bool, res *records.StepWaitResult, changed *bool, fx *records.Effects) error {
	ord, err := nextStepOrd(ctx, tx, j.ns, p.JobID)
	if err != nil {
		return err
	}
	status := records.StepAwaiting
	if done {
		status = records.StepCompleted
	}
	var timeout *string
	if p.Timeout > 0 {
		t := p.Timeout.String()
		timeout = &t
	}
	var signal *string
	if p.Signal != "" {
		signal = &p.Signal
	}
	var deadline *time.Time
	if err := tx.QueryRow(ctx, `
		INSERT INTO job_steps (namespace, job_id, step_id, ord, kind, status, max_attempts, retry_backoff_seconds, delivery,
			wake_at, wait_signal, wait_jobs, output, completed_at)
		SELECT j.namespace, j.id, $3, $4, 'wait', $5, j.max_attempts, j.retry_backoff_seconds, j.delivery,
			CASE WHEN $5 = 'awaiting' THEN now() + $6::interval END, $7, $8, $9::jsonb, CASE WHEN $5 = 'completed' THEN now() END
		FROM jobs j WHERE j.namespace = $1 AND j.id = $2
		RETURNING wake_at`, j.ns, p.JobID, p.StepID, ord, status, timeout, signal, nilIfEmpty(p.Jobs), nullJSON(out)).Scan(&deadline); err != nil {
		return err
	}
	if done {
		res.Output = out
		return nil
	}
	// Like a sleep, the attempt is given back and the delivery token stays
	// until the next delivery, so a re-sent call is recognised.
	if _, err := tx.Exec(ctx, `
		UPDATE jobs j SET status = 'awaiting', worker_id = NULL, attempt = greatest(j.attempt - 1, 0),
			`+clearDelivery+`, updated_at = now()
		WHERE j.namespace = $1 AND j.id = $2`, j.ns, p.JobID); err != nil {
		return err
	}
	*changed = true
	*res = records.StepWaitResult{Awaiting: true, Deadline: deadline}
	fx.Moved = []string{p.JobID}
	fx.Freed.AddIn(j.ns, j.queue, j.typ, 1)
	return nil
}

// nilIfEmpty is ids, nil when there are none (a NULL array).
func nilIfEmpty(ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	return ids
}

// signalWaitSQL finds job $2's (of namespace $1) open wait for signal $3
// (job_steps_awaiting).
const signalWaitSQL = `SELECT step_id FROM job_steps WHERE namespace = $1 AND job_id = $2 AND awaiting AND wait_signal = $3`

// waitsExpireSQL is WaitsExpire's statement, up to $1 waits.
const waitsExpireSQL = `
	-- job_steps_deadline. Waits and their jobs are taken only
	-- when neither is locked: JOB.SIGNAL and STEP.WAIT lock the
	-- job, then the step; the release of a job whose awaited jobs
	-- ended, the step, then the job. A wait a signal ended
	-- meanwhile is left (the update's status test sees it anew).
	-- Each row names its namespace: the job and the jobs it
	-- awaited are looked up there.
	WITH due AS (
		SELECT s.namespace, s.job_id, s.step_id, s.wait_jobs, j.status = 'awaiting' AS live
		FROM job_steps s JOIN jobs j ON j.namespace = s.namespace AND j.id = s.job_id
		WHERE s.awaiting AND s.wake_at IS NOT NULL AND s.wake_at <= now()
		ORDER BY s.wake_at LIMIT $1 FOR UPDATE OF s, j SKIP LOCKED
	), ended AS (
		UPDATE job_steps s SET wake_at = NULL
		FROM due WHERE NOT due.live AND s.namespace = due.namespace AND s.job_id = due.job_id
		  AND s.step_id = due.step_id AND s.awaiting
	)
	UPDATE job_steps s SET status = 'completed', completed_at = now(), output = CASE
		WHEN due.wait_jobs IS NULL THEN '{"timeout":true}'::jsonb
		ELSE jsonb_build_object('timeout', true, 'pending', coalesce((
			SELECT jsonb_agg(w ORDER BY o) FROM unnest(due.wait_jobs) WITH ORDINALITY AS u(w, o)
			WHERE NOT EXISTS (SELECT 1 FROM jobs a WHERE a.namespace = due.namespace AND a.id = u.w
				AND a.status IN ('completed', 'failed', 'cancelled'))),
			'[]'::jsonb)) END
	FROM due WHERE due.live AND s.namespace = due.namespace AND s.job_id = due.job_id
	  AND s.step_id = due.step_id AND s.awaiting
	RETURNING s.namespace, s.job_id`

// WaitsExpire ends up to limit waits whose deadline passed
// (job_steps_deadline), in every namespace: each completes with its
// timeout output, its job's waits for other jobs are dropped, and its job
// is queued. A wait whose job no longer awaits (cancelled meanwhile) only
// loses its deadline: it stays as its job left it, and leaves the index.
// The effects are by namespace; each one's Moved are the jobs woken there.
func (s *Store) WaitsExpire(ctx context.Context, limit int) (fx map[string]records.Effects, err error) {
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		fx = map[string]records.Effects{}
		rows, err := tx.Query(ctx, waitsExpireSQL, limit)
		if err != nil {
			return err
		}
		type key struct{ ns, id string }
		keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (key, error) {
			var k key
			return k, r.Scan(&k.ns, &k.id)
		})
		if err != nil {
			return err
		}
		for _, k := range keys {
			if _, err := tx.Exec(ctx, `DELETE FROM job_waits WHERE namespace = $1 AND child_id = $2`, k.ns, k.id); err != nil {
				return err
			}
			one := fx[k.ns]
			if err := wake(ctx, tx, k.ns, k.id, &one); err != nil {
				return err
			}
			fx[k.ns] = one
		}
		return nil
	})
	if err != nil {
		return nil, interpretError(err)
	}
	return fx, nil
}

// waitJobs begins a wait for the jobs p names: completed at once when all
// have ended, else a job_waits row from each job not ended to this one and
// has_children set on it, so that the last one's end wakes the waiter
// through the dependency marks (DependenciesSettle). The awaited rows are
// locked in id order, as linkParents locks parents: one ending meanwhile
// either ended first or sees has_children.
func (s *Store) waitJobs(ctx context.Context, tx pgx.Tx, p records.StepWaitParams, j stepJob, r stepRow,
	res *records.StepWaitResult, changed *bool, fx *records.Effects) error {
	ids := slices.Clone(p.Jobs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	status, err := lockParents(ctx, tx, j.ns, ids)
	if err != nil {
		return err
	}
	var unended []string
	for _, id := range ids {
		st, ok := status[id]
		switch {
		case !ok:
			return &records.AwaitedNotFoundError{ID: id}
		case !records.IsTerminal(st):
			unended = append(unended, id)
		}
	}
	if len(unended) == 0 {
		out, err := s.jobsOutput(ctx, tx, j.ns, p.Jobs, p.ResultBudget)
		if err != nil {
			return err
		}
		return s.beginWait(ctx, tx, p, j, r, out, true, res, changed, fx)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO job_waits (namespace, parent_id, child_id) SELECT $1, unnest($2::text[]), $3 ON CONFLICT DO NOTHING`,
		j.ns, unended, p.JobID); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE jobs SET has_children = true WHERE namespace = $1 AND id = ANY($2::text[]) AND NOT has_children`,
		j.ns, unended); err != nil {
		return err
	}
	return s.beginWait(ctx, tx, p, j, r, nil, false, res, changed, fx)
}

// jobsOutput is a JOBS wait's output: each job's status and, while their
// total stays within budget bytes, its result; past it statuses only and
// jobs_truncated.
func (s *Store) jobsOutput(ctx context.Context, tx pgx.Tx, ns string, ids []string, budget int64) (json.RawMessage, error) {
	var out json.RawMessage
	// jobs_pkey, one probe a job.
	err := tx.QueryRow(ctx, `
		WITH a AS (SELECT id, status, result FROM jobs_all WHERE namespace = $1 AND id = ANY($2::text[])),
		t AS (SELECT coalesce(sum(octet_length(result::text)), 0) AS total FROM a)
		SELECT CASE WHEN t.total <= $3 THEN
				jsonb_build_object('jobs', coalesce((SELECT jsonb_object_agg(id, jsonb_build_object('status', status, 'result', result)) FROM a), '{}'))
			ELSE
				jsonb_build_object('jobs', coalesce((SELECT jsonb_object_agg(id, jsonb_build_object('status', status)) FROM a), '{}'),
					'jobs_truncated', true)
			END
		FROM t`, ns, ids, budget).Scan(&out)
	return out, err
}

// keepJobsOutput reads a woken JOBS wait's output and keeps it, so later
// deliveries answer the same.
func (s *Store) keepJobsOutput(ctx context.Context, tx pgx.Tx, ns string, p records.StepWaitParams, res *records.StepWaitResult) error {
	var ids []string
	if err := tx.QueryRow(ctx, `SELECT wait_jobs FROM job_steps WHERE namespace = $1 AND job_id = $2 AND step_id = $3 AND NOT replaced`,
		ns, p.JobID, p.StepID).Scan(&ids); err != nil {
		return err
	}
	out, err := s.jobsOutput(ctx, tx, ns, ids, p.ResultBudget)
	if err != nil {
		return err
	}
	res.Output = out
	_, err = tx.Exec(ctx, `UPDATE job_steps SET output = $4::jsonb WHERE namespace = $1 AND job_id = $2 AND step_id = $3 AND NOT replaced`,
		ns, p.JobID, p.StepID, out)
	return err
}

// JobSignals reads a job's first signals, up to limit, in arrival order
// (job_signals' key).
func (s *Store) JobSignals(ctx context.Context, id string, limit int) ([]records.Signal, error) {
	if !storable(id) {
		return nil, records.ErrNotFound
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT name, payload, taken_by, created_at FROM job_signals_all WHERE namespace = $1 AND job_id = $2 ORDER BY seq LIMIT $3`,
		s.ns, id, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (records.Signal, error) {
		var g records.Signal
		return g, r.Scan(&g.Name, &g.Payload, &g.TakenBy, &g.At)
	})
	return out, interpretError(err)
}
