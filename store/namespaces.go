package store

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// ChannelNamespaces is told of every change to a namespace's settings or
// existence, so that each node's cache of them follows.
const ChannelNamespaces = "agq_namespaces"

// unfinishedJobs is a row per unfinished job of namespace $1, read
// through the three partial indexes that together hold every one:
// jobs_waiting (queued, scheduled, retrying) and jobs_parked (pending,
// awaiting), each led by the namespace, and jobs_running, every running
// job of every namespace: they are as few as the workers run at once. A
// LIMIT over it stops reading at its count.
const unfinishedJobs = `
	SELECT 1 FROM jobs WHERE namespace = $1 AND status IN ('queued', 'scheduled', 'retrying')
	UNION ALL
	SELECT 1 FROM jobs WHERE namespace = $1 AND status = 'running'
	UNION ALL
	SELECT 1 FROM jobs WHERE namespace = $1 AND status IN ('pending', 'awaiting')`

const namespaceColumns = `name, coalesce(max_unfinished, 0), coalesce(submit_rate, 0), coalesce(submit_period, 0),
	coalesce(max_running, 0), coalesce(extract(epoch FROM retain_completed), 0)::bigint,
	coalesce(extract(epoch FROM retain_failed), 0)::bigint, deleting, created_at`

func scanNamespace(row pgx.Row) (records.Namespace, error) {
	var n records.Namespace
	var period, completed, failed int64
	err := row.Scan(&n.Name, &n.MaxUnfinished, &n.SubmitRate, &period, &n.MaxRunning, &completed, &failed, &n.Deleting, &n.CreatedAt)
	n.SubmitPeriod = time.Duration(period) * time.Second
	n.RetainCompleted = time.Duration(completed) * time.Second
	n.RetainFailed = time.Duration(failed) * time.Second
	return n, err
}

// NamespaceCreate creates a namespace; creating one that exists changes
// nothing. records.ErrNamespaceDeleting: one of that name is being deleted.
func (s *Store) NamespaceCreate(ctx context.Context, name string) error {
	var deleting bool
	err := s.Pool.QueryRow(ctx, `
		WITH made AS (
			INSERT INTO namespaces (name) VALUES ($1) ON CONFLICT DO NOTHING RETURNING false AS deleting
		), told AS (
			SELECT pg_notify($2, $1) FROM made
		)
		SELECT deleting FROM made
		UNION ALL SELECT deleting FROM namespaces WHERE name = $1
		LIMIT 1`, name, ChannelNamespaces).Scan(&deleting)
	if err != nil {
		return interpretError(err)
	}
	if deleting {
		return records.ErrNamespaceDeleting
	}
	return nil
}

// Namespaces lists every namespace, by name, those being deleted included
// (Deleting says so).
func (s *Store) Namespaces(ctx context.Context) ([]records.Namespace, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+namespaceColumns+` FROM namespaces ORDER BY name`)
	return collect(rows, err, func(row pgx.CollectableRow) (records.Namespace, error) { return scanNamespace(row) })
}

// NamespaceGet reads one namespace; ErrNotFound when there is none of
// that name.
func (s *Store) NamespaceGet(ctx context.Context, name string) (records.Namespace, error) {
	if !storable(name) {
		return records.Namespace{}, records.ErrNotFound
	}
	n, err := scanNamespace(s.Pool.QueryRow(ctx, `SELECT `+namespaceColumns+` FROM namespaces WHERE name = $1`, name))
	return n, interpretError(err)
}

// NamespaceConfigure applies change to namespace name and returns it as it
// is now; ErrNotFound when there is none (or it is being deleted).
func (s *Store) NamespaceConfigure(ctx context.Context, name string, c records.NamespaceChange) (records.Namespace, error) {
	seconds := func(d *time.Duration) any {
		if d == nil || *d == 0 {
			return nil
		}
		return d.Seconds()
	}
	var rate, period any
	if c.SubmitRate != nil && c.SubmitRate.Limit > 0 {
		rate, period = c.SubmitRate.Limit, int(c.SubmitRate.Period/time.Second)
	}
	n, err := scanNamespace(s.Pool.QueryRow(ctx, `
		WITH changed AS (
			UPDATE namespaces SET
				max_unfinished = CASE WHEN $2 THEN nullif($3::bigint, 0) ELSE max_unfinished END,
				submit_rate = CASE WHEN $4 THEN $5::int ELSE submit_rate END,
				submit_period = CASE WHEN $4 THEN $6::int ELSE submit_period END,
				max_running = CASE WHEN $7 THEN nullif($8::int, 0) ELSE max_running END,
				retain_completed = CASE WHEN $9 THEN make_interval(secs => $10::float8) ELSE retain_completed END,
				retain_failed = CASE WHEN $11 THEN make_interval(secs => $12::float8) ELSE retain_failed END
			WHERE name = $1 AND NOT deleting
			RETURNING *
		), told AS (
			SELECT pg_notify($13, $1) FROM changed
		)
		SELECT `+namespaceColumns+` FROM changed`,
		name, c.MaxUnfinished != nil, deref(c.MaxUnfinished), c.SubmitRate != nil, rate, period,
		c.MaxRunning != nil, deref(c.MaxRunning), c.RetainCompleted != nil, seconds(c.RetainCompleted),
		c.RetainFailed != nil, seconds(c.RetainFailed), ChannelNamespaces))
	return n, interpretError(err)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// NamespaceCounts counts a namespace's unfinished and running jobs, and
// its submissions of the last minute (counted only while it has a quota).
func (s *Store) NamespaceCounts(ctx context.Context, name string) (records.NamespaceCounts, error) {
	var c records.NamespaceCounts
	err := s.Pool.QueryRow(ctx, `
		SELECT
			(SELECT count(*) FROM (`+unfinishedJobs+`) u),
			(SELECT count(*) FROM jobs WHERE namespace = $1 AND status = 'running'),
			(SELECT coalesce(sum(n), 0) FROM namespace_submissions
			 WHERE namespace = $1 AND second > extract(epoch FROM now())::bigint - 60)`, name).
		Scan(&c.Unfinished, &c.Running, &c.SubmittedLastMinute)
	return c, interpretError(err)
}

// NamespaceDeleteBegin starts deleting a namespace: refused with an
// *records.UnfinishedError while it holds unfinished jobs; otherwise it takes
// nothing more (its keys are revoked, every node told) and
// NamespaceDeleteStep removes what it holds. Beginning again changes
// nothing. ErrNotFound: no such namespace.
func (s *Store) NamespaceDeleteBegin(ctx context.Context, name string) error {
	return interpretError(pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var deleting bool
		err := tx.QueryRow(ctx, `SELECT deleting FROM namespaces WHERE name = $1 FOR UPDATE`, name).Scan(&deleting)
		if err != nil || deleting {
			return err
		}
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM (`+unfinishedJobs+`) u`, name).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return &records.UnfinishedError{N: n}
		}
		_, err = tx.Exec(ctx, `
			WITH marked AS (
				UPDATE namespaces SET deleting = true WHERE name = $1
			), revoked AS (
				UPDATE principals SET revoked_at = coalesce(revoked_at, now()) WHERE namespace = $1 RETURNING name
			)
			SELECT pg_notify($2, name) FROM revoked
			UNION ALL SELECT pg_notify($3, $1)`, name, ChannelKeys, ChannelNamespaces)
		return err
	}))
}

// namespaceBatch bounds the rows one deletion transaction removes: each
// holds its locks for milliseconds, so other namespaces' work on the same
// tables never waits long behind it.
const namespaceBatch = 1000

// namespaceTables are the tables that hold a namespace's rows, each with
// the columns that pick one of its rows.
var namespaceTables = []struct{ table, key string }{
	{"jobs", "(namespace, id)"},
	{"job_steps", "(namespace, job_id, ord)"},
	{"job_logs", "(namespace, job_id, attempt, seq)"},
	{"job_signals", "(namespace, job_id, seq)"},
	{"jobs_history", "(namespace, id, expires_at)"},
	{"history_counts", "(namespace, queue, status, period_lo)"},
	{"job_steps_history", "(namespace, job_id, ord, expires_at)"},
	{"job_logs_history", "(namespace, job_id, attempt, seq)"},
	{"job_signals_history", "(namespace, job_id, seq)"},
	{"job_waits", "(namespace, parent_id, child_id)"},
	{"graph_walks", "id"},
	{"dependency_checks", "id"},
	{"schedules", "(namespace, name)"},
	{"queues", "(namespace, name)"},
	{"job_types", "(namespace, name)"},
	{"workers", "worker_id"},
	{"namespace_submissions", "(namespace, second)"},
	{"principals", "name"},
}

// NamespaceDeleteStep removes one bounded batch of what a namespace being
// deleted holds, and the namespace itself once nothing is left; it
// reports whether it is gone. Safe to run on several nodes at once, and
// again: each statement deletes only while the namespace is being
// deleted, and its row goes only when no row of it is left, so a
// namespace created again under the name is never touched.
func (s *Store) NamespaceDeleteStep(ctx context.Context, name string) (gone bool, err error) {
	const deleting = `EXISTS (SELECT 1 FROM namespaces WHERE name = $1 AND deleting)`
	var left []string
	for _, t := range namespaceTables {
		tag, err := s.Pool.Exec(ctx, `
			DELETE FROM `+t.table+` WHERE `+t.key+` IN (
				SELECT `+strings.Trim(t.key, "()")+` FROM `+t.table+` WHERE namespace = $1 AND `+deleting+` LIMIT $2)`, name, namespaceBatch)
		if err != nil {
			return false, interpretError(err)
		}
		if tag.RowsAffected() > 0 {
			return false, nil
		}
		left = append(left, `NOT EXISTS (SELECT 1 FROM `+t.table+` WHERE namespace = $1)`)
	}
	tag, err := s.Pool.Exec(ctx, `
		WITH gone AS (
			DELETE FROM namespaces WHERE name = $1 AND deleting AND `+strings.Join(left, " AND ")+`
			RETURNING name
		)
		SELECT pg_notify($2, name) FROM gone`, name, ChannelNamespaces)
	if err != nil {
		return false, interpretError(err)
	}
	// Nothing deleted: gone already, or rows another node is deleting
	// now (it finishes the namespace).
	var exists bool
	if tag.RowsAffected() == 0 {
		if err := s.Pool.QueryRow(ctx, `SELECT `+deleting, name).Scan(&exists); err != nil {
			return false, interpretError(err)
		}
	}
	return !exists, nil
}

// NamespacesDeleting lists the namespaces whose deletion is under way.
func (s *Store) NamespacesDeleting(ctx context.Context) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT name FROM namespaces WHERE deleting ORDER BY name`)
	return collect(rows, err, pgx.RowTo[string])
}
