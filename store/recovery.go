package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// JobsRequeueUnacked returns deliveries nobody acknowledged in time to
// their queues without counting the attempt: the worker may never have
// received them. Every unackedLimit-th such return of a job counts an
// attempt, though, so a job that kills its workers before they can
// acknowledge it ends failed instead of cycling forever. FOR UPDATE re-checks the CTE's conditions on the newest
// version of each row, so a job acknowledged meanwhile is left alone; the
// deadline is not repeated outside the CTE, where it made the planner
// drive the update from jobs_running_ack and rescan the CTE per row
// (jobs_running_ack; 2,000 overdue rows of 1M: 8-17 ms per batch).
func (s *Store) JobsRequeueUnacked(ctx context.Context, limit int) (int, error) {
	const unackedLimit = 3
	n := 0
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH due AS (
				SELECT id FROM jobs
				WHERE status = 'running' AND ack_deadline IS NOT NULL AND ack_deadline < now()
				ORDER BY ack_deadline LIMIT $1
				FOR UPDATE SKIP LOCKED
			)
			UPDATE jobs j SET
				status = CASE WHEN j.cancel_requested THEN 'cancelled'
				              WHEN j.unacked_returns + 1 >= $2 AND j.attempt >= j.max_attempts THEN 'failed'
				              ELSE 'queued' END,
				finished_at = CASE WHEN j.cancel_requested OR (j.unacked_returns + 1 >= $2 AND j.attempt >= j.max_attempts) THEN now() END,
				attempt = CASE WHEN j.unacked_returns + 1 >= $2 THEN j.attempt ELSE greatest(j.attempt - 1, 0) END,
				errors = CASE WHEN j.unacked_returns + 1 >= $2 THEN j.errors || jsonb_build_array(jsonb_build_object(
				              'attempt', j.attempt, 'worker_id', j.worker_id, 'at', now(),
				              'error', format('delivered %s times without an acknowledgement', $2::int)))
				         ELSE j.errors END,
				unacked_returns = CASE WHEN j.unacked_returns + 1 >= $2 THEN 0 ELSE j.unacked_returns + 1 END,
				worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END, run_at = now(),
				ack_deadline = NULL, lease_expires_at = NULL, deadline_at = NULL, started_at = NULL,
				updated_at = now()
			FROM due WHERE j.id = due.id AND j.status = 'running'
			RETURNING j.id, j.status, j.queue, j.type, j.requires, j.attempt`, limit, unackedLimit)
		if err != nil {
			return err
		}
		n, err = notifyMoved(ctx, tx, rows)
		return err
	})
	return n, interpretError(err)
}

// notifyMoved reads rows of (id, status, queue, type, requires, attempt)
// for jobs a statement just moved out of running and tells listeners:
// claimable jobs wake waiters, finished ones wake JOB.WAIT, and every node
// learns of the move (ChannelMoved), for its subscribers and for the pops
// its queue's or type's limits held back. It closes rows.
func notifyMoved(ctx context.Context, tx pgx.Tx, rows pgx.Rows) (int, error) {
	return notifyMovedAt(ctx, tx, rows, time.Time{})
}

// notifyMovedAt is notifyMoved for jobs claimable from at (zero: now).
func notifyMovedAt(ctx context.Context, tx pgx.Tx, rows pgx.Rows, at time.Time) (int, error) {
	type moved struct {
		id, status, queue, typ string
		requires               []string
		attempt                int
	}
	var all []moved
	for rows.Next() {
		var m moved
		if err := rows.Scan(&m.id, &m.status, &m.queue, &m.typ, &m.requires, &m.attempt); err != nil {
			rows.Close()
			return 0, err
		}
		all = append(all, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, m := range all {
		var err error
		if m.status == StatusQueued {
			note := ReadyNote{Queue: m.queue, N: 1, Requires: m.requires}
			if !at.IsZero() {
				note.At = dueMillis(at)
			}
			err = notifyReady(ctx, tx, note)
		} else {
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelDone, m.id)
		}
		if err != nil {
			return 0, err
		}
		b, _ := json.Marshal(Moved{ID: m.id, Status: m.status, Queue: m.queue, Type: m.typ, Attempt: m.attempt})
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelMoved, string(b)); err != nil {
			return 0, err
		}
	}
	return len(all), nil
}

// Moved is a job the watchdog or a worker's (re-)registration moved out of
// running, as ChannelMoved tells every node: queued again, failed or
// cancelled; or, with DeadWorker set instead, a worker the watchdog
// declared DEAD.
type Moved struct {
	ID         string `json:"i,omitempty"`
	Status     string `json:"s,omitempty"`
	Queue      string `json:"q,omitempty"`
	Type       string `json:"t,omitempty"`
	Attempt    int    `json:"a,omitempty"`
	DeadWorker string `json:"dw,omitempty"`
	// Registered is a worker that registered again with other
	// capabilities: no job moved.
	Registered string `json:"rw,omitempty"`
}
