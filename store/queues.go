package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// QueueDepth counts the jobs of a queue that are claimable now: what LLEN
// and LPUSH answer. It counts from jobs_waiting (namespace and queue
// equality, run_at filter).
func (s *Store) QueueDepth(ctx context.Context, queue string) (int64, error) {
	var n int64
	err := s.Pool.QueryRow(ctx, `
		SELECT count(*) FROM jobs
		WHERE namespace = $2 AND queue = $1 AND status IN ('queued', 'scheduled', 'retrying') AND run_at <= now()`,
		queue, s.ns).Scan(&n)
	return n, interpretError(err)
}

// QueueDepthUpTo counts the jobs of a queue claimable now, as QueueDepth
// does, but stops at limit: its cost is bounded however deep the queue.
func (s *Store) QueueDepthUpTo(ctx context.Context, queue string, limit int64) (int64, error) {
	var n int64
	err := s.Pool.QueryRow(ctx, `
		SELECT count(*) FROM (
			SELECT 1 FROM jobs
			WHERE namespace = $3 AND queue = $1 AND status IN ('queued', 'scheduled', 'retrying') AND run_at <= now()
			LIMIT $2) w`, queue, limit, s.ns).Scan(&n)
	return n, interpretError(err)
}

// QueuePeek returns claimable jobs of a queue in pop order, skipping offset.
func (s *Store) QueuePeek(ctx context.Context, queue string, offset, limit int64) ([]records.Job, error) {
	return collectJobs(s.Pool.Query(ctx, `
		SELECT `+jobColumns+` FROM jobs
		WHERE namespace = $4 AND queue = $1 AND status IN ('queued', 'scheduled', 'retrying') AND run_at <= now()
		ORDER BY priority DESC, fair_pass NULLS LAST, run_at, seq
		OFFSET $2 LIMIT $3`, queue, offset, limit, s.ns))
}

// QueueNames lists the namespace's queues by name, without counting their
// jobs (QueueStats reads every job of each queue in jobs).
func (s *Store) QueueNames(ctx context.Context) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT name FROM queues WHERE namespace = $1 ORDER BY name`, s.ns)
	return collect(rows, err, func(row pgx.CollectableRow) (n string, err error) { return n, row.Scan(&n) })
}

// QueueStats returns queues (all, or the one named) with their job counts,
// those in history by the counts of their periods.
func (s *Store) QueueStats(ctx context.Context, name string) ([]records.Queue, error) {
	if !storable(name) {
		return nil, nil
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT q.name, q.paused, coalesce(c.status, ''), coalesce(c.n, 0), coalesce(o.age, 0), coalesce(o.keys, 0)
		FROM queues q
		LEFT JOIN LATERAL (
			SELECT status, sum(n)::bigint AS n FROM (
				SELECT CASE WHEN status IN ('scheduled', 'retrying') AND run_at <= now() THEN 'queued' ELSE status END AS status,
				       count(*) AS n
				FROM jobs WHERE namespace = q.namespace AND queue = q.name GROUP BY 1
				UNION ALL
				SELECT h.status, sum(h.n) FROM history_counts h WHERE h.namespace = q.namespace AND h.queue = q.name AND h.n > 0 GROUP BY 1
			) u GROUP BY 1
		) c ON true
		LEFT JOIN LATERAL (
			SELECT extract(epoch FROM now() - min(run_at))::float8 AS age,
			       count(DISTINCT fair_key) FILTER (WHERE fair_key <> '') AS keys FROM jobs
			WHERE namespace = q.namespace AND queue = q.name AND status IN ('queued', 'scheduled', 'retrying') AND run_at <= now()
		) o ON true
		WHERE q.namespace = $2 AND ($1 = '' OR q.name = $1)
		ORDER BY q.name`, name, s.ns)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []records.Queue
	for rows.Next() {
		var qname, status string
		var paused bool
		var n, keys int64
		var age float64
		if err := rows.Scan(&qname, &paused, &status, &n, &age, &keys); err != nil {
			return nil, interpretError(err)
		}
		if len(out) == 0 || out[len(out)-1].Name != qname {
			out = append(out, records.Queue{Name: qname, Paused: paused, Counts: map[string]int64{},
				OldestAge: time.Duration(age * float64(time.Second)), FairKeysReady: keys})
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
			INSERT INTO queues (namespace, name, paused) VALUES ($4, $1, $2)
			ON CONFLICT (namespace, name) DO UPDATE SET paused = excluded.paused
		)
		SELECT pg_notify($3, json_build_object('ns', $4::text, 'q', $1::text, 'n', 1000000)::text) WHERE NOT $2`,
		name, paused, ChannelJobs, s.ns)
	return interpretError(err)
}

// JobList pages through the namespace's jobs by id, in jobs and then in
// history, each read through an index that yields ids in order, so that a
// page stops at its limit whatever history holds:
//   - jobs: only the filters given enter the statement, so each shape gets
//     a plan of its own: with a queue, jobs_queue_status serves (namespace,
//     queue, status, id > cursor); without one the primary key.
//   - history holds ended jobs only: a status not ended reads no history.
//     Otherwise one ordered index scan of jobs_history_queue_status for
//     each queue and ended status the filters leave (the namespace's queues
//     from queues), merged by id; with neither filter, jobs_history_id. A
//     scan of jobs_history_id that filters would read all of history for
//     a rare queue or status.
func (s *Store) JobList(ctx context.Context, p records.JobListParams) ([]records.Job, error) {
	if !storable(p.Queue, p.Status, p.Type, p.Cursor) {
		return nil, nil
	}
	args := []any{s.ns, p.Cursor, p.Limit}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	hot := []string{"namespace = $1", "id > $2"}
	var hist []string // conditions on jobs_history h besides namespace and id
	if p.Queue != "" {
		hot = append(hot, "queue = "+arg(p.Queue))
	}
	ended := true
	switch p.Status {
	case "":
	case records.StatusQueued:
		// A due scheduled or retrying job is shown as queued.
		hot, ended = append(hot, "(status = 'queued' OR (status IN ('scheduled', 'retrying') AND run_at <= now()))"), false
	case records.StatusScheduled, records.StatusRetrying:
		hot, ended = append(hot, "status = "+arg(p.Status)+" AND run_at > now()"), false
	case records.StatusCompleted, records.StatusFailed, records.StatusCancelled:
		hot = append(hot, "status = "+arg(p.Status))
	default:
		hot, ended = append(hot, "status = "+arg(p.Status)), false
	}
	if p.Type != "" {
		cond := "type = " + arg(p.Type)
		hot, hist = append(hot, cond), append(hist, "h."+cond)
	}
	sql := fmt.Sprintf(`SELECT %s FROM jobs WHERE %s ORDER BY id LIMIT $3`, jobColumns, strings.Join(hot, " AND "))
	if ended {
		var from string
		switch {
		case p.Queue == "" && p.Status == "":
			from = `jobs_history h WHERE h.namespace = $1 AND h.id > $2`
		default:
			queues := `SELECT name FROM queues WHERE namespace = $1`
			if p.Queue != "" {
				queues = `SELECT ` + arg(p.Queue) + `::text`
			}
			statuses := `'completed', 'failed', 'cancelled'`
			if p.Status != "" {
				statuses = arg(p.Status) + `::text`
			}
			from = `(` + queues + `) q(name) CROSS JOIN unnest(ARRAY[` + statuses + `]) st(status)
				CROSS JOIN LATERAL (SELECT * FROM jobs_history h
					WHERE h.namespace = $1 AND h.queue = q.name AND h.status = st.status AND h.id > $2` +
				strings.Join(append([]string{""}, hist...), " AND ") + ` ORDER BY h.id LIMIT $3) h`
			hist = nil
		}
		sql = fmt.Sprintf(`SELECT * FROM ((%s) UNION ALL (SELECT %s FROM %s%s ORDER BY h.id LIMIT $3)) u ORDER BY id LIMIT $3`,
			sql, jobCols("h."), from, strings.Join(append([]string{""}, hist...), " AND "))
	}
	// Planned for its arguments every time (an unnamed statement): a
	// cached generic plan walks the primary key for a rare queue.
	return collectJobs(s.Pool.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...))
}

// Querier is what both a pool and a single connection offer.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// FutureReadyNotes returns a ReadyNote for each distinct future due time of
// scheduled and retrying jobs, soonest first: what a node that just started
// listening must time itself, since the notes for them were sent before.
func FutureReadyNotes(ctx context.Context, q Querier, limit int) ([]records.ReadyNote, error) {
	rows, err := q.Query(ctx, `
		SELECT namespace, queue, requires, ceil(extract(epoch FROM run_at) * 1000)::bigint, count(*)
		FROM jobs
		WHERE status IN ('scheduled', 'retrying') AND run_at > now()
		GROUP BY namespace, queue, requires, run_at
		ORDER BY run_at LIMIT $1`, limit)
	return collect(rows, err, func(row pgx.CollectableRow) (n records.ReadyNote, err error) {
		return n, row.Scan(&n.Namespace, &n.Queue, &n.Requires, &n.At, &n.N)
	})
}

// ClaimableNotes returns, for each of queues (of the namespace at the same
// index of namespaces), a ReadyNote for each distinct capability set among
// its first perQueue jobs claimable now (in claim order, from the
// jobs_waiting index, so the cost is bounded however long the backlog):
// what wakes the blocked clients that can take them, whatever
// notifications were lost.
func ClaimableNotes(ctx context.Context, q Querier, namespaces, queues []string, perQueue int) ([]records.ReadyNote, error) {
	rows, err := q.Query(ctx, `
		SELECT q.ns, q.name, f.requires, count(*)
		FROM unnest($1::text[], $3::text[]) AS q(name, ns)
		CROSS JOIN LATERAL (
			SELECT requires FROM jobs
			WHERE namespace = q.ns AND queue = q.name AND status IN ('queued', 'scheduled', 'retrying') AND run_at <= now()
			ORDER BY priority DESC, fair_pass, run_at, seq LIMIT $2
		) f
		GROUP BY q.ns, q.name, f.requires`, queues, perQueue, namespaces)
	return collect(rows, err, func(row pgx.CollectableRow) (n records.ReadyNote, err error) {
		return n, row.Scan(&n.Namespace, &n.Queue, &n.Requires, &n.N)
	})
}

// JobCounts counts the namespace's jobs by status (a due scheduled or
// retrying job counts as queued, as everywhere else): those in jobs one by
// one, those in history by the counts of their periods.
func (s *Store) JobCounts(ctx context.Context) (map[string]int64, error) {
	return countBy(ctx, s, `
		SELECT status, sum(n)::bigint FROM (
			SELECT CASE WHEN status IN ('scheduled', 'retrying') AND run_at <= now() THEN 'queued' ELSE status END AS status, count(*) AS n
			FROM jobs WHERE namespace = $1 GROUP BY 1
			UNION ALL
			SELECT status, sum(n) FROM history_counts WHERE namespace = $1 AND n > 0 GROUP BY 1
		) u GROUP BY 1`)
}

// WorkerCounts counts the namespace's workers by state.
func (s *Store) WorkerCounts(ctx context.Context) (map[string]int64, error) {
	return countBy(ctx, s, `SELECT state, count(*) FROM workers WHERE namespace = $1 GROUP BY 1`)
}

// countBy runs sql, which names the namespace as $1, for its counts.
func countBy(ctx context.Context, s *Store, sql string) (map[string]int64, error) {
	rows, err := s.Pool.Query(ctx, sql, s.ns)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, interpretError(err)
		}
		out[k] = n
	}
	return out, interpretError(rows.Err())
}
