package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueDepth counts the jobs of a queue that are claimable now: what LLEN
// and LPUSH answer. It counts from jobs_waiting (queue equality, run_at filter).
func (s *Store) QueueDepth(ctx context.Context, queue string) (int64, error) {
	var n int64
	err := s.Pool.QueryRow(ctx, `
		SELECT count(*) FROM jobs
		WHERE queue = $1 AND status IN ('queued', 'scheduled', 'retrying') AND run_at <= now()`, queue).Scan(&n)
	return n, interpretError(err)
}

// QueuePeek returns claimable jobs of a queue in pop order, skipping offset.
func (s *Store) QueuePeek(ctx context.Context, queue string, offset, limit int64) ([]Job, error) {
	return collectJobs(s.Pool.Query(ctx, `
		SELECT `+jobColumns+` FROM jobs
		WHERE queue = $1 AND status IN ('queued', 'scheduled', 'retrying') AND run_at <= now()
		ORDER BY priority DESC, run_at, id
		OFFSET $2 LIMIT $3`, queue, offset, limit))
}

// Queue is one queue with its counts by status.
type Queue struct {
	Name      string
	Paused    bool
	Counts    map[string]int64
	OldestAge time.Duration // of the oldest claimable job, 0 when none
}

// QueueStats returns queues (all, or the one named) with their job counts.
func (s *Store) QueueStats(ctx context.Context, name string) ([]Queue, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT q.name, q.paused, coalesce(c.status, ''), coalesce(c.n, 0), coalesce(o.age, 0)
		FROM queues q
		LEFT JOIN LATERAL (
			SELECT CASE WHEN status IN ('scheduled', 'retrying') AND run_at <= now() THEN 'queued' ELSE status END AS status,
			       count(*) AS n
			FROM jobs WHERE queue = q.name GROUP BY 1
		) c ON true
		LEFT JOIN LATERAL (
			SELECT extract(epoch FROM now() - min(run_at))::float8 AS age FROM jobs
			WHERE queue = q.name AND status IN ('queued', 'scheduled', 'retrying') AND run_at <= now()
		) o ON true
		WHERE $1 = '' OR q.name = $1
		ORDER BY q.name`, name)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []Queue
	for rows.Next() {
		var qname, status string
		var paused bool
		var n int64
		var age float64
		if err := rows.Scan(&qname, &paused, &status, &n, &age); err != nil {
			return nil, interpretError(err)
		}
		if len(out) == 0 || out[len(out)-1].Name != qname {
			out = append(out, Queue{Name: qname, Paused: paused, Counts: map[string]int64{}, OldestAge: time.Duration(age * float64(time.Second))})
		}
		if status != "" {
			out[len(out)-1].Counts[status] = n
		}
	}
	return out, interpretError(rows.Err())
}

// QueueSetPaused pauses or resumes a queue (creating its row if needed);
// resuming wakes waiters through a ReadyNote for every claimable job.
func (s *Store) QueueSetPaused(ctx context.Context, name string, paused bool) error {
	_, err := s.Pool.Exec(ctx, `
		WITH up AS (
			INSERT INTO queues (name, paused) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET paused = excluded.paused
		)
		SELECT pg_notify($3, json_build_object('q', $1::text, 'n', 1000000)::text) WHERE NOT $2`,
		name, paused, ChannelJobs)
	return interpretError(err)
}

// JobListParams filters JOB.LIST; Cursor is the last id of the previous page.
type JobListParams struct {
	Queue, Status, Type, Cursor string
	Limit                       int
}

// JobList pages through jobs by id. A queue filter is served by
// jobs_queue_status; without one the primary key gives the order.
func (s *Store) JobList(ctx context.Context, p JobListParams) ([]Job, error) {
	return collectJobs(s.Pool.Query(ctx, `
		SELECT `+jobColumns+` FROM jobs
		WHERE ($1 = '' OR queue = $1)
		  AND ($2 = '' OR status = $2 OR ($2 = 'queued' AND status IN ('scheduled', 'retrying') AND run_at <= now()))
		  AND ($3 = '' OR type = $3)
		  AND id > $4
		ORDER BY id LIMIT $5`, p.Queue, p.Status, p.Type, p.Cursor, p.Limit))
}

// Querier is what both a pool and a single connection offer.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// FutureReadyNotes returns a ReadyNote for each distinct future due time of
// scheduled and retrying jobs, soonest first: what a node that just started
// listening must time itself, since the notes for them were sent before.
func FutureReadyNotes(ctx context.Context, q Querier, limit int) ([]ReadyNote, error) {
	rows, err := q.Query(ctx, `
		SELECT queue, requires, (extract(epoch FROM run_at) * 1000)::bigint, count(*)
		FROM jobs
		WHERE status IN ('scheduled', 'retrying') AND run_at > now()
		GROUP BY queue, requires, run_at
		ORDER BY run_at LIMIT $1`, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []ReadyNote
	for rows.Next() {
		var n ReadyNote
		if err := rows.Scan(&n.Queue, &n.Requires, &n.At, &n.N); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, n)
	}
	return out, interpretError(rows.Err())
}
