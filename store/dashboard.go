package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// The dashboard's reads. Each is bounded however many jobs the table
// holds: lists page by key through an index, and counts stop at a cap (a
// page shows "10,000+") instead of counting every finished job on each
// refresh, as QueueStats and JobCounts do for QUEUE.STATS and INFO.

// SummaryStatuses are the statuses QueueSummaries counts.
var SummaryStatuses = []string{records.StatusQueued, records.StatusScheduled, records.StatusRunning, records.StatusRetrying,
	records.StatusAwaiting, records.StatusFailed}

// QueueSummaries returns the first maxQueues queues of the store's
// namespace by name with their jobs counted by status, each count stopping
// at countCap. Every count is an index-only walk of jobs_queue_status
// (namespace, queue, status, id) that reads no more than countCap entries,
// so the statement touches at most maxQueues × 6 × countCap rows.
func (s *Store) QueueSummaries(ctx context.Context, maxQueues, countCap int) ([]records.QueueSummary, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT q.name, q.paused, st.status, c.n
		FROM (SELECT name, paused FROM queues WHERE namespace = $4 ORDER BY name LIMIT $1) q
		CROSS JOIN unnest($2::text[]) AS st(status)
		CROSS JOIN LATERAL (
			SELECT count(*) AS n FROM (
				SELECT 1 FROM jobs_all WHERE namespace = $4 AND queue = q.name AND status = st.status LIMIT $3
			) capped
		) c
		ORDER BY q.name`, maxQueues, SummaryStatuses, countCap, s.ns)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []records.QueueSummary
	for rows.Next() {
		var name, status string
		var paused bool
		var n int64
		if err := rows.Scan(&name, &paused, &status, &n); err != nil {
			return nil, interpretError(err)
		}
		if len(out) == 0 || out[len(out)-1].Name != name {
			out = append(out, records.QueueSummary{Name: name, Paused: paused, Counts: map[string]int64{}})
		}
		out[len(out)-1].Counts[status] = n
	}
	return out, interpretError(rows.Err())
}

// FinishedPerMinute counts the jobs of the store's namespace completed and
// failed in each minute from the one holding since up to the current one
// (on the database's clock), each count stopping at countCap. Each count is
// a range of jobs_finished (namespace, status, finished_at), so the statement reads at most
// 2 × countCap index entries per minute; the dashboard keeps the minutes
// that are over and asks again only for the last ones.
func (s *Store) FinishedPerMinute(ctx context.Context, since time.Time, countCap int) ([]records.MinuteCount, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT m,
			(SELECT count(*) FROM (
				SELECT 1 FROM jobs_all WHERE namespace = $3 AND status = 'completed' AND finished_at >= m AND finished_at < m + interval '1 minute'
				LIMIT $2) c),
			(SELECT count(*) FROM (
				SELECT 1 FROM jobs_all WHERE namespace = $3 AND status = 'failed' AND finished_at >= m AND finished_at < m + interval '1 minute'
				LIMIT $2) f)
		FROM generate_series(date_trunc('minute', $1::timestamptz), date_trunc('minute', now()), interval '1 minute') AS m
		ORDER BY m`, since, countCap, s.ns)
	return collect(rows, err, func(row pgx.CollectableRow) (m records.MinuteCount, err error) {
		return m, row.Scan(&m.Minute, &m.Completed, &m.Failed)
	})
}

// QueueJobs returns a queue's jobs of one status by id, descending: newest
// first for the UUIDv7 ids agq gives jobs. jobs_queue_status (namespace,
// queue, status, id) serves it walking backwards from Before, so a page reads
// Limit entries however deep it is.
func (s *Store) QueueJobs(ctx context.Context, p records.QueueJobsParams) ([]records.Job, error) {
	if !storable(p.Queue, p.Status, p.Before) {
		return nil, nil
	}
	// Planned for its arguments (an unnamed statement), as JobList is.
	if p.Before == "" {
		return collectJobs(s.Pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs_all
			WHERE namespace = $4 AND queue = $1 AND status = $2 ORDER BY id DESC LIMIT $3`,
			pgx.QueryExecModeExec, p.Queue, p.Status, p.Limit, s.ns))
	}
	return collectJobs(s.Pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs_all
		WHERE namespace = $5 AND queue = $1 AND status = $2 AND id < $3 ORDER BY id DESC LIMIT $4`,
		pgx.QueryExecModeExec, p.Queue, p.Status, p.Before, p.Limit, s.ns))
}

// FailedJobs returns failed jobs of the store's namespace across queues,
// newest failure first. jobs_finished (namespace, status, finished_at)
// serves it from the cursor's
// finished_at downwards, so a page reads about Limit entries however deep.
func (s *Store) FailedJobs(ctx context.Context, p records.FailedJobsParams) ([]records.Job, error) {
	if !storable(p.BeforeID) {
		return nil, nil
	}
	before := any(p.BeforeFinished)
	if p.BeforeFinished.IsZero() {
		before = "infinity"
	}
	return collectJobs(s.Pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs_all
		WHERE namespace = $4 AND status = 'failed' AND finished_at <= $1::timestamptz AND (finished_at < $1::timestamptz OR id < $2)
		ORDER BY finished_at DESC, id DESC LIMIT $3`, before, p.BeforeID, p.Limit, s.ns))
}

// RunningJobs returns up to limit running jobs of the store's namespace,
// the most recently started first. Running jobs are few (no more than
// workers run at once) and jobs_running holds only them (runningByIndex).
func (s *Store) RunningJobs(ctx context.Context, limit int) ([]records.Job, error) {
	return collectJobs(s.Pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs j
		WHERE `+runningByIndex+` AND j.namespace = $2 ORDER BY started_at DESC NULLS LAST, id LIMIT $1`, limit, s.ns))
}

// WorkerPage returns the workers of the store's namespace by id after the
// cursor. It walks workers_namespace (namespace, worker_id); the table
// holds one row per worker, not per job.
func (s *Store) WorkerPage(ctx context.Context, p records.WorkerPageParams) ([]records.Worker, error) {
	if !storable(p.State, p.After) {
		return nil, nil
	}
	rows, err := s.Pool.Query(ctx, `SELECT `+workerColumns+` FROM workers
		WHERE namespace = $5 AND worker_id > $1
		  AND (NOT $2 OR state IN ('ACTIVE', 'DRAINING'))
		  AND ($3 = '' OR state = $3)
		ORDER BY worker_id LIMIT $4`, p.After, p.Live, p.State, p.Limit, s.ns)
	return collectWorkers(rows, err)
}

// WorkersHeldJobs returns, for each of workers, the ids of up to perWorker
// jobs of the store's namespace it holds, from jobs_running (a worker
// holds the jobs of its own namespace only).
func (s *Store) WorkersHeldJobs(ctx context.Context, workers []string, perWorker int) (map[string][]string, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT w.id, j.id
		FROM unnest($1::text[]) AS w(id)
		CROSS JOIN LATERAL (
			SELECT id FROM jobs WHERE status = 'running' AND worker_id = w.id AND namespace = $3 ORDER BY id LIMIT $2
		) j`, workers, perWorker, s.ns)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var w, j string
		if err := rows.Scan(&w, &j); err != nil {
			return nil, interpretError(err)
		}
		out[w] = append(out[w], j)
	}
	return out, interpretError(rows.Err())
}

// DashboardSecret returns the key the dashboard signs its cookies with,
// storing fresh (at least 32 random bytes) when there is none yet: every
// node reads the same one.
func (s *Store) DashboardSecret(ctx context.Context, fresh []byte) ([]byte, error) {
	var secret []byte
	err := s.Pool.QueryRow(ctx, `
		INSERT INTO dashboard_secret (id, secret) VALUES (1, $1)
		ON CONFLICT (id) DO NOTHING
		RETURNING secret`, fresh).Scan(&secret)
	if !errors.Is(err, pgx.ErrNoRows) {
		return secret, interpretError(err)
	}
	// Another node's insert won. A read in the insert's own statement
	// would not see it (its snapshot predates that commit); this one does.
	err = s.Pool.QueryRow(ctx, `SELECT secret FROM dashboard_secret WHERE id = 1`).Scan(&secret)
	return secret, interpretError(err)
}

// QueueFairKeys lists the named fair keys of a queue of the store's
// namespace with the most jobs ready now, and the jobs each is running. It counts every ready job of
// the queue's keys (an index-only scan of jobs_fair_tail) and its running
// jobs (jobs_queue_status): the cost grows with the queue's backlog.
func (s *Store) QueueFairKeys(ctx context.Context, queue string, limit int) ([]records.FairKeyLoad, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT fair_key, sum(ready)::bigint, sum(running)::bigint FROM (
			SELECT fair_key, count(*) AS ready, 0 AS running FROM jobs
			WHERE namespace = $3 AND queue = $1 AND status IN ('queued', 'scheduled', 'retrying') AND fair_pass > 0 AND fair_key <> ''
			GROUP BY fair_key
			UNION ALL
			SELECT fair_key, 0, count(*) FROM jobs
			WHERE namespace = $3 AND queue = $1 AND status = 'running' AND fair_key <> ''
			GROUP BY fair_key
		) k
		GROUP BY fair_key ORDER BY 2 DESC, 3 DESC, 1 LIMIT $2`, queue, limit, s.ns)
	return collect(rows, err, func(row pgx.CollectableRow) (k records.FairKeyLoad, err error) {
		return k, row.Scan(&k.Key, &k.Ready, &k.Running)
	})
}
