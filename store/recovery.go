package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// JobsRequeueUnacked returns deliveries nobody acknowledged in time to
// their queues without counting the attempt: the worker may never have
// received them. Every unackedLimit-th such return of a job counts an
// attempt, though, so a job that kills its workers before they can
// acknowledge it ends failed instead of cycling forever. The overdue
// deliveries are found and locked first (jobs_running; 2,000 overdue
// rows of 1M: 8-17 ms per batch), then updated through their key with the
// retry policy's decisions.
func (s *Store) JobsRequeueUnacked(ctx context.Context, limit int) (int, error) {
	const unackedLimit = 3
	return s.sweep(ctx, `
			SELECT j.namespace, `+decideColumns+`, j.unacked_returns + 1 >= $2 AND NOT j.cancel_requested
			FROM jobs j
			WHERE `+runningByIndex+` AND j.ack_deadline IS NOT NULL AND j.ack_deadline < now()
			ORDER BY j.ack_deadline LIMIT $1
			FOR UPDATE SKIP LOCKED`, []any{limit, unackedLimit},
		lostMove{failure: lostFailure, sql: requeueUnackedSQL, args: []any{unackedLimit}, reason: "unacked_delivery"})
}

// requeueUnackedSQL gives back deliveries nobody acknowledged; on the
// $5-th return in a row the attempt counts.
var requeueUnackedSQL = `
	UPDATE jobs j SET
		status = ` + givenBackStatus + `,
		finished_at = ` + givenBackFinished + `,
		attempt = CASE WHEN j.cancel_requested OR j.unacked_returns + 1 >= $5 THEN j.attempt ELSE greatest(j.attempt - 1, 0) END,
		errors = CASE WHEN j.unacked_returns + 1 >= $5
		         THEN ` + withError("format('delivered %s times without an acknowledgement', $5::int)") + `
		         ELSE j.errors END,
		unacked_returns = CASE WHEN j.unacked_returns + 1 >= $5 THEN 0 ELSE j.unacked_returns + 1 END,
		worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END, run_at = ` + retryAt + `,
		` + clearDelivery + `, updated_at = now()` + fromDecided("")

// lostMove says how jobs a recovery found move out of running.
type lostMove struct {
	// failure is how the rules see the failure of a job whose attempt
	// the move counts.
	failure records.Failure
	// sql moves the jobs: $1 their ids, $2 whether each is retried, $3
	// after how long and $4 their namespaces (decided), then args.
	sql  string
	args []any
	// reason is told with each job moved (notifyMoved).
	reason string
	// decided, when set, runs with the jobs to move, before they move.
	decided func(ctx context.Context, tx pgx.Tx, d retryDecisions) error
}

// lostFailure is the failure of a delivery lost with its holder.
var lostFailure = records.Failure{Retryable: true, Lost: true}

// moveLost moves out of running the jobs of rows, rows of (namespace,
// decideColumns, counts) that tx locked, as m says, and returns them. It closes rows.
func (s *Store) moveLost(ctx context.Context, tx pgx.Tx, rows pgx.Rows, m lostMove) ([]movedJob, error) {
	d, err := s.decideRows(rows, m.failure)
	if err != nil || len(d.ids) == 0 {
		return nil, err
	}
	if m.decided != nil {
		if err := m.decided(ctx, tx, d); err != nil {
			return nil, err
		}
	}
	if err := endOpenSteps(ctx, tx, d, m.reason); err != nil {
		return nil, err
	}
	moved, err := tx.Query(ctx, m.sql, append(d.args(), m.args...)...)
	if err != nil {
		return nil, err
	}
	return s.notifyMoved(ctx, tx, m.reason, moved)
}

// sweep runs one of the watchdog's recoveries in a transaction of its own:
// the jobs query selects and locks, given args, move as m says. It answers
// how many moved.
func (s *Store) sweep(ctx context.Context, query string, args []any, m lostMove) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		moved, err := s.moveLost(ctx, tx, rows, m)
		n = len(moved)
		return err
	})
	return n, interpretError(err)
}

// endedOf lists the moved jobs that ended (a cancellation asked for while
// they ran): their children's dependencies are to settle.
func endedOf(moved []movedJob) []string {
	var ended []string
	for _, m := range moved {
		if records.IsTerminal(m.status) {
			ended = append(ended, m.id)
		}
	}
	return ended
}

// notifyMoved reads rows of movedColumns for jobs a statement just moved
// out of running, for reason, tells listeners of each (tellMoved) and
// Config.Recovered of those with trace context, and returns them. It
// closes rows.
func (s *Store) notifyMoved(ctx context.Context, tx pgx.Tx, reason string, rows pgx.Rows) ([]movedJob, error) {
	var all []movedJob
	for rows.Next() {
		m, err := scanMoved(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		all = append(all, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var told []RecoveredJob
	for _, m := range all {
		if err := tellMoved(ctx, tx, m); err != nil {
			return nil, err
		}
		if s.recovered != nil {
			told = append(told, m.trace)
		}
	}
	if len(told) > 0 {
		// Told as the move is about to commit: a commit failing now
		// leaves a recovery counted and traced that did not happen,
		// which only a lost connection causes.
		s.recovered(reason, told)
	}
	return all, nil
}

// RecoveredJob is a job a recovery moved out of running, with the trace
// context of the delivery it ended.
type RecoveredJob struct {
	Namespace               string
	JobID, Status           string
	Attempt                 int
	TraceParent, TraceState string
	Delivery                string
	// StartedAt is nil for a delivery given back as never started.
	StartedAt *time.Time
}

// movedJob is a row of movedColumns.
type movedJob struct {
	namespace              string
	id, status, queue, typ string
	requires               []string
	attempt                int
	due                    *time.Time
	trace                  RecoveredJob
}

func scanMoved(rows pgx.Rows) (movedJob, error) {
	var m movedJob
	t := &m.trace
	err := rows.Scan(&m.namespace, &m.id, &m.status, &m.queue, &m.typ, &m.requires, &m.attempt, &m.due,
		&t.TraceParent, &t.TraceState, &t.Delivery, &t.StartedAt)
	t.Namespace, t.JobID, t.Status, t.Attempt = m.namespace, m.id, m.status, m.attempt
	return m, err
}

// tellMoved tells listeners of a job just moved out of running: a
// claimable job wakes waiters (at the time it is due), a finished one
// wakes JOB.WAIT, and every node learns of the move (ChannelMoved, with
// the job's namespace), for its subscribers and for the pops its queue's
// or type's limits held back.
func tellMoved(ctx context.Context, tx pgx.Tx, m movedJob) error {
	var err error
	if m.status == records.StatusQueued {
		note := records.ReadyNote{Namespace: m.namespace, Queue: m.queue, N: 1, Requires: m.requires}
		if m.due != nil {
			note.At = dueMillis(*m.due)
		}
		err = notifyReady(ctx, tx, note)
	} else {
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelDone, m.id)
	}
	if err != nil {
		return err
	}
	b, _ := json.Marshal(records.Moved{Namespace: m.namespace, ID: m.id, Status: m.status, Queue: m.queue, Type: m.typ, Attempt: m.attempt})
	_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelMoved, string(b))
	return err
}
