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

// Errors of worker statements.
var (

	// ErrWorkerUnknown means no live worker has the id.
	ErrWorkerUnknown = errors.New("worker not registered")
)

const workerColumns = `namespace, worker_id, principal, state, hostname, platform, agw_version, capabilities, metadata,
	max_concurrent_jobs, stats, registered_at, last_heartbeat_at, state_changed_at, timed_out_jobs, last_timeout_at`

// collectWorkers reads every row of a query of workerColumns.
func collectWorkers(rows pgx.Rows, err error) ([]records.Worker, error) {
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (records.Worker, error) { return scanWorker(r) })
	return out, interpretError(err)
}

func scanWorker(row pgx.Row) (records.Worker, error) {
	var w records.Worker
	err := row.Scan(&w.Namespace, &w.ID, &w.Principal, &w.State, &w.Hostname, &w.Platform, &w.AgwVersion, &w.Capabilities,
		&w.Metadata, &w.MaxConcurrentJobs, &w.Stats, &w.RegisteredAt, &w.LastHeartbeatAt, &w.StateChangedAt,
		&w.TimedOutJobs, &w.LastTimeoutAt)
	return w, err
}

// WorkerRegister registers a worker in the store's namespace or lets the
// same principal take its record over (a reconnect or restart with the same
// id): it becomes ACTIVE and keeps the jobs it holds, whose leases restart.
// Worker ids are unique across namespaces, as principals are. A worker id belongs to
// the principal that first registered it, whatever its state since — except
// that the principal named like the id (the key minted for that worker)
// always gets it back, and the jobs another principal held under it go back
// to their queues.
//
// running, when not nil, lists the jobs the worker really runs: held jobs it
// had acknowledged but does not list were lost with an earlier process of
// the same id (a restart) and go back to their queues, the attempt counted.
// Unacknowledged ones are left to the acknowledgement timeout, since a pop
// may be claiming one at this very moment.
//
// It answers the jobs it ended (a cancellation asked while held, or no
// attempt left), whose children's dependencies are to settle.
func (s *Store) WorkerRegister(ctx context.Context, w records.Worker, lease time.Duration, running []string) (ended []string, err error) {
	err = againOnDeadlock(ctx, func() (err error) {
		ended, err = s.workerRegister(ctx, w, lease, running)
		return err
	})
	return ended, interpretError(err)
}

func (s *Store) workerRegister(ctx context.Context, w records.Worker, lease time.Duration, running []string) (ended []string, err error) {
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var holder, holderNS string
		var caps []string
		err := tx.QueryRow(ctx, `SELECT principal, namespace, capabilities FROM workers WHERE worker_id = $1 FOR UPDATE`,
			w.ID).Scan(&holder, &holderNS, &caps)
		existed := err == nil
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case holder != w.Principal && w.ID != w.Principal:
			return records.ErrWorkerTaken
		case holder != w.Principal:
			held, err := s.requeueHeld(ctx, tx, holderNS, w.ID, false)
			if err != nil {
				return err
			}
			if holderNS == s.ns {
				// Jobs of another namespace that this ended are left
				// to the leader's sweep to settle.
				ended = append(ended, held...)
			}
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO workers (worker_id, principal, state, hostname, platform, agw_version, capabilities, metadata, max_concurrent_jobs,
				namespace)
			VALUES ($1, $2, 'ACTIVE', $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (worker_id) DO UPDATE SET
				principal = excluded.principal, namespace = excluded.namespace,
				-- A drain outlives reconnects: only UNREGISTER or DEAD ends it.
				state = CASE WHEN workers.state = 'DRAINING' THEN 'DRAINING' ELSE 'ACTIVE' END,
				hostname = excluded.hostname,
				platform = excluded.platform, agw_version = excluded.agw_version,
				capabilities = excluded.capabilities, metadata = excluded.metadata,
				max_concurrent_jobs = excluded.max_concurrent_jobs, registered_at = now(),
				last_heartbeat_at = now(),
				state_changed_at = CASE WHEN workers.state = 'ACTIVE' THEN workers.state_changed_at ELSE now() END
			-- Another principal that registered the id in between wins.
			WHERE workers.principal = excluded.principal OR excluded.worker_id = excluded.principal`,
			w.ID, w.Principal, w.Hostname, w.Platform, w.AgwVersion, w.Capabilities, string(w.Metadata), w.MaxConcurrentJobs, s.ns)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return records.ErrWorkerTaken
		}
		if running != nil {
			lost, err := s.requeueLost(ctx, tx, s.ns, w.ID, running)
			if err != nil {
				return err
			}
			ended = append(ended, lost...)
		}
		if existed && !sameSet(caps, w.Capabilities) {
			// The worker's pops blocked on any node wait with the old
			// capabilities: they look again (Moved.Registered).
			b, _ := json.Marshal(records.Moved{Namespace: s.ns, Registered: w.ID})
			if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelMoved, string(b)); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `
			UPDATE jobs SET lease_expires_at = now() + $2::interval, updated_at = now()
			WHERE worker_id = $1 AND status = 'running' AND namespace = $3`, w.ID, lease, s.ns)
		return err
	})
	return ended, err
}

// againOnDeadlock runs a transaction again when PostgreSQL broke a
// deadlock by failing it. A worker's registration, heartbeat and
// unregistration update all the jobs it holds while groups of its reports
// update many of the same rows, neither in an order the other can follow;
// the report groups fall back to one report at a time, these try again.
func againOnDeadlock(ctx context.Context, run func() error) error {
	for try := 1; ; try++ {
		err := run()
		if try == 5 || ctx.Err() != nil || !isDeadlock(err) {
			return err
		}
	}
}

// WorkerHeartbeat records a heartbeat of a worker of the store's
// namespace, stores the stats when given, and extends the lease of every
// job the worker holds (jobs_running_worker), returning those it must
// cancel.
func (s *Store) WorkerHeartbeat(ctx context.Context, id string, stats json.RawMessage, lease time.Duration) (records.HeartbeatResult, error) {
	var res records.HeartbeatResult
	err := againOnDeadlock(ctx, func() error {
		res = records.HeartbeatResult{}
		return s.workerHeartbeat(ctx, id, stats, lease, &res)
	})
	return res, interpretError(err)
}

func (s *Store) workerHeartbeat(ctx context.Context, id string, stats json.RawMessage, lease time.Duration, res *records.HeartbeatResult) error {
	return s.asyncCommit(ctx, func(tx pgx.Tx) error {
		var state string
		err := tx.QueryRow(ctx, `
			UPDATE workers SET last_heartbeat_at = now(), stats = coalesce($2::jsonb, stats)
			WHERE worker_id = $1 AND namespace = $3 AND state IN ('ACTIVE', 'DRAINING')
			RETURNING state`, id, nullJSON(stats), s.ns).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrWorkerUnknown
		}
		if err != nil {
			return err
		}
		res.Drain = state == records.WorkerDraining
		// A job whose cancellation was asked for keeps its old lease: if
		// the worker never confirms, it ends cancelled when that runs out.
		// Jobs another transaction updates are left to the next
		// heartbeat: that one is ending or moving them, and the sweeps
		// lock jobs before their workers' rows, which this one already
		// holds — waiting here would deadlock them for deadlock_timeout.
		// The lock is an UPDATE's own (NO KEY), which the key-share locks
		// of rows inserted for the job (its logs, steps, signals) leave
		// free: a job streaming its logs is extended as ever. A
		// cancellation the skipped transaction asks is told at the next
		// heartbeat.
		rows, err := tx.Query(ctx, `
			UPDATE jobs j SET lease_expires_at = CASE WHEN j.cancel_requested THEN j.lease_expires_at ELSE now() + $2::interval END
			FROM (SELECT id FROM jobs WHERE worker_id = $1 AND status = 'running' AND namespace = $3
			      FOR NO KEY UPDATE SKIP LOCKED) h
			WHERE j.namespace = $3 AND j.id = h.id
			RETURNING j.id, j.cancel_requested`, id, lease, s.ns)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var jobID string
			var cancel bool
			if err := rows.Scan(&jobID, &cancel); err != nil {
				return err
			}
			if cancel {
				res.Cancels = append(res.Cancels, jobID)
			}
		}
		return rows.Err()
	})
}

// WorkerUnregister ends the registration of a worker of the store's
// namespace; jobs it still holds go back
// to their queues at once, the attempt not counted (it did not fail them).
// Unregistering an unregistered worker succeeds. It answers the jobs it
// ended (held jobs whose cancellation was asked), whose children's
// dependencies are to settle.
func (s *Store) WorkerUnregister(ctx context.Context, id string) (ended []string, err error) {
	err = againOnDeadlock(ctx, func() (err error) {
		ended, err = s.workerUnregister(ctx, id)
		return err
	})
	return ended, interpretError(err)
}

func (s *Store) workerUnregister(ctx context.Context, id string) (ended []string, err error) {
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE workers SET state = 'UNREGISTERED',
				state_changed_at = CASE WHEN state = 'UNREGISTERED' THEN state_changed_at ELSE now() END
			WHERE worker_id = $1 AND namespace = $2`, id, s.ns)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrWorkerUnknown
		}
		ended, err = s.requeueHeld(ctx, tx, s.ns, id, false)
		return err
	})
	return ended, err
}

// requeueHeld puts the running jobs of a worker of namespace ns back in
// their queues. A job whose cancellation was asked for ends cancelled
// instead. countAttempt says whether the attempt is spent (the worker died
// holding it) or not.
func (s *Store) requeueHeld(ctx context.Context, tx pgx.Tx, ns, workerID string, countAttempt bool) (ended []string, err error) {
	rows, err := tx.Query(ctx, `
		SELECT j.namespace, `+lostDecideColumns+`, $2 AND NOT j.cancel_requested
		FROM jobs j WHERE j.worker_id = $1 AND j.status = 'running' AND j.namespace = $3
		ORDER BY j.id FOR UPDATE`, workerID, countAttempt, ns)
	if err != nil {
		return nil, err
	}
	reason := "worker_left"
	if countAttempt {
		reason = "dead_worker"
	}
	moved, err := s.moveLost(ctx, tx, rows, lostMove{failure: lostFailure, sql: requeueHeldSQL, args: []any{countAttempt, workerID}, reason: reason})
	return endedOf(moved), err
}

// requeueHeldSQL gives back the jobs of worker $6; $5 says whether their
// attempts count.
var requeueHeldSQL = `
	UPDATE jobs j SET
		status = ` + givenBackStatus + `,
		attempt = CASE WHEN $5 THEN j.attempt ELSE greatest(j.attempt - 1, 0) END,
		step_failures = CASE WHEN $5 AND NOT j.cancel_requested THEN ` + stepFailuresCounted + ` ELSE j.step_failures END,
		finished_at = ` + givenBackFinished + `,
		errors = CASE WHEN $5 THEN ` + withError("'worker ' || j.worker_id || ' was lost while holding the job'") + `
		         ELSE j.errors END,
		worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
		run_at = ` + retryAt + `, ` + clearRunning + `, updated_at = now()` + fromDecided("AND j.worker_id = $6")

// WorkerGet returns one worker of the store's namespace; one of another
// namespace is not found.
func (s *Store) WorkerGet(ctx context.Context, id string) (records.Worker, error) {
	if !storable(id) {
		return records.Worker{}, records.ErrNotFound
	}
	w, err := scanWorker(s.Pool.QueryRow(ctx, `SELECT `+workerColumns+` FROM workers WHERE worker_id = $1 AND namespace = $2`,
		id, s.ns))
	return w, interpretError(err)
}

// WorkerOfPrincipal returns the live worker a principal registered most
// recently: the identity of its connections that did not register themselves.
func (s *Store) WorkerOfPrincipal(ctx context.Context, principal string) (records.Worker, error) {
	if !storable(principal) {
		return records.Worker{}, records.ErrNotFound
	}
	w, err := scanWorker(s.Pool.QueryRow(ctx, `
		SELECT `+workerColumns+` FROM workers
		WHERE principal = $1 AND state IN ('ACTIVE', 'DRAINING') AND namespace = $2
		ORDER BY registered_at DESC LIMIT 1`, principal, s.ns))
	return w, interpretError(err)
}

// WorkerList lists the workers of the store's namespace, optionally of one
// state, by id (workers_namespace).
func (s *Store) WorkerList(ctx context.Context, state string) ([]records.Worker, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT `+workerColumns+` FROM workers WHERE namespace = $2 AND ($1 = '' OR state = $1) ORDER BY worker_id`, state, s.ns)
	return collectWorkers(rows, err)
}

// WorkerDrain marks a live worker of the store's namespace DRAINING: it
// gets no new work and its next heartbeat says drain=true.
func (s *Store) WorkerDrain(ctx context.Context, id string) error {
	tag, err := s.Pool.Exec(ctx, `
		UPDATE workers SET state = 'DRAINING',
			state_changed_at = CASE WHEN state = 'DRAINING' THEN state_changed_at ELSE now() END
		WHERE worker_id = $1 AND namespace = $2 AND state IN ('ACTIVE', 'DRAINING')`, id, s.ns)
	if err != nil {
		return interpretError(err)
	}
	if tag.RowsAffected() == 0 {
		return ErrWorkerUnknown
	}
	return nil
}

// requeueLost gives back the acknowledged jobs of namespace ns a
// re-registering worker holds but no longer runs (jobs_running_worker), the
// attempt counted.
func (s *Store) requeueLost(ctx context.Context, tx pgx.Tx, ns, workerID string, running []string) (ended []string, err error) {
	rows, err := tx.Query(ctx, `
		SELECT j.namespace, `+lostDecideColumns+`, NOT j.cancel_requested
		FROM jobs j
		WHERE j.worker_id = $1 AND j.status = 'running' AND j.namespace = $3 AND j.ack_deadline IS NULL AND j.id <> ALL($2::text[])
		ORDER BY j.id FOR UPDATE`, workerID, running, ns)
	if err != nil {
		return nil, err
	}
	moved, err := s.moveLost(ctx, tx, rows, lostMove{failure: lostFailure, sql: requeueLostSQL, args: []any{workerID}, reason: "worker_restarted"})
	return endedOf(moved), err
}

// requeueLostSQL gives back jobs worker $5 lost in a restart.
var requeueLostSQL = lostJobsSQL("'worker ' || j.worker_id || ' restarted without it'", "AND j.worker_id = $5")

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			return false
		}
	}
	return true
}
