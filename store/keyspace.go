package store

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// The read-only keyspace (KEYS, SCAN, GET, TTL… for redis-cli) is a view of
// the workers, queues and jobs of the store's namespace. These statements list and probe what its keys
// show. Listings take a name prefix, turned into a LIKE 'prefix%' that the
// primary keys serve as a range (the managed cluster uses the C collation;
// under another collation it is a filter and stays correct). They run with
// QueryExecModeExec, as unnamed statements planned for their arguments: a
// cached generic plan could not see the prefix and would walk the whole
// index.

// KeyspaceWorkers lists the workers that are not UNREGISTERED whose id
// starts with idPrefix, by id. workers holds one row per worker:
// workers_namespace (namespace, worker_id) serves the prefix and the order
// once the table is large enough for the planner to prefer it to reading
// the table.
func (s *Store) KeyspaceWorkers(ctx context.Context, idPrefix string) ([]records.KeyspaceWorker, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT worker_id, state, capabilities, stats IS NOT NULL, last_heartbeat_at,
		       (extract(epoch FROM now() - last_heartbeat_at) * 1000)::bigint
		FROM workers
		WHERE namespace = $2 AND state <> 'UNREGISTERED' AND worker_id LIKE $1
		ORDER BY worker_id`,
		pgx.QueryExecModeExec, likePrefix(idPrefix), s.ns)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []records.KeyspaceWorker
	for rows.Next() {
		var w records.KeyspaceWorker
		var sinceMS int64
		if err := rows.Scan(&w.ID, &w.State, &w.Capabilities, &w.HasStats, &w.LastHeartbeatAt, &sinceMS); err != nil {
			return nil, interpretError(err)
		}
		w.SinceHeartbeat = time.Duration(sinceMS) * time.Millisecond
		out = append(out, w)
	}
	return out, interpretError(rows.Err())
}

// KeyspaceWorker returns one worker with its metadata and stats, found by
// its primary key; ErrNotFound when there is no such worker.
func (s *Store) KeyspaceWorker(ctx context.Context, id string) (records.KeyspaceWorker, error) {
	var w records.KeyspaceWorker
	var sinceMS int64
	err := s.Pool.QueryRow(ctx, `
		SELECT worker_id, state, capabilities, stats IS NOT NULL, last_heartbeat_at,
		       (extract(epoch FROM now() - last_heartbeat_at) * 1000)::bigint, metadata, stats
		FROM workers WHERE worker_id = $1 AND namespace = $2`, id, s.ns).
		Scan(&w.ID, &w.State, &w.Capabilities, &w.HasStats, &w.LastHeartbeatAt, &sinceMS, &w.Metadata, &w.Stats)
	w.SinceHeartbeat = time.Duration(sinceMS) * time.Millisecond
	return w, interpretError(err)
}

// KeyspaceCapabilityMembers returns the ACTIVE workers offering a
// capability, by id. No index covers capabilities: workers holds one row
// per worker and is read whole.
func (s *Store) KeyspaceCapabilityMembers(ctx context.Context, capability string) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT worker_id FROM workers
		WHERE namespace = $2 AND state = 'ACTIVE' AND capabilities @> ARRAY[$1::text]
		ORDER BY worker_id`, capability, s.ns)
	if err != nil {
		return nil, interpretError(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, interpretError(err)
}

// KeyspaceQueues lists the queues whose name starts with namePrefix and
// that hold a claimable job, by name. queues is small (its primary key can
// serve the prefix); each queue is probed in jobs_waiting, equality on
// queue, and the first due waiting row ends the probe.
func (s *Store) KeyspaceQueues(ctx context.Context, namePrefix string) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT q.name FROM queues q
		WHERE q.namespace = $2 AND q.name LIKE $1
		  AND EXISTS (SELECT 1 FROM jobs j
		              WHERE j.namespace = q.namespace AND j.queue = q.name
		                AND j.status IN ('queued', 'scheduled', 'retrying') AND j.run_at <= now())
		ORDER BY q.name`,
		pgx.QueryExecModeExec, likePrefix(namePrefix), s.ns)
	if err != nil {
		return nil, interpretError(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return names, interpretError(err)
}

// keyspaceJobColumns is the select list scanKeyspaceJob reads.
const keyspaceJobColumns = `id,
	CASE WHEN status = 'running' AND (deadline_at IS NULL OR deadline_at > now()) THEN coalesce(worker_id, '') ELSE '' END,
	CASE WHEN status = 'running' AND deadline_at > now() THEN (extract(epoch FROM deadline_at - now()) * 1000)::bigint END`

func scanKeyspaceJob(row pgx.Row) (records.KeyspaceJob, error) {
	var j records.KeyspaceJob
	var untilMS *int64
	if err := row.Scan(&j.ID, &j.Holder, &untilMS); err != nil {
		return j, err
	}
	if untilMS != nil {
		d := time.Duration(*untilMS) * time.Millisecond
		j.UntilDeadline = &d
	}
	return j, nil
}

// KeyspaceJobs pages through job ids. The primary key (namespace, id)
// serves the prefix,
// the resume point and the order; a page after Offset walks the index past
// the skipped ids, which is why callers resume with After when they can.
//
// Running jobs are the newest: walking the primary key for them would pass
// nearly every finished job first. They are few (no more than the workers
// run at once), so they are all read through the running-job indexes
// (jobs_running_*, whose predicate is status = 'running') and sorted.
func (s *Store) KeyspaceJobs(ctx context.Context, p records.KeyspaceJobsParams) ([]records.KeyspaceJob, error) {
	offset := p.Offset
	if p.After != "" {
		offset = 0
	}
	sql := `
		SELECT ` + keyspaceJobColumns + ` FROM jobs_all
		WHERE namespace = $5 AND id LIKE $1 AND id > $2
		ORDER BY id OFFSET $3 LIMIT $4`
	if p.RunningOnly {
		sql = `
		WITH running AS MATERIALIZED (
			SELECT ` + keyspaceJobColumns + ` FROM jobs
			WHERE status = 'running' AND namespace = $5 AND id LIKE $1 AND id > $2
		)
		SELECT * FROM running ORDER BY id OFFSET $3 LIMIT $4`
	}
	rows, err := s.Pool.Query(ctx, sql, pgx.QueryExecModeExec, likePrefix(p.IDPrefix), p.After, offset, p.Limit, s.ns)
	return collect(rows, err, func(row pgx.CollectableRow) (records.KeyspaceJob, error) { return scanKeyspaceJob(row) })
}

// KeyspaceJobProbe returns one job's id and holder without its documents,
// found by its primary key; ErrNotFound when there is no such job.
func (s *Store) KeyspaceJobProbe(ctx context.Context, id string) (records.KeyspaceJob, error) {
	j, err := scanKeyspaceJob(s.Pool.QueryRow(ctx, `SELECT `+keyspaceJobColumns+` FROM jobs_all WHERE namespace = $1 AND id = $2`, s.ns, id))
	return j, interpretError(err)
}

// KeyspaceJobCounts counts the jobs of the store's namespace and its
// running jobs that have a holder key, for DBSIZE. It reads every job in
// jobs (about 0.3 s for a million jobs) and counts those in history by
// the counts of their periods.
func (s *Store) KeyspaceJobCounts(ctx context.Context) (jobs, held int64, err error) {
	err = s.Pool.QueryRow(ctx, `
		SELECT count(*) + (SELECT coalesce(sum(n), 0) FROM history_counts WHERE namespace = $1)::bigint,
		       count(*) FILTER (WHERE status = 'running' AND (deadline_at IS NULL OR deadline_at > now()))
		FROM jobs WHERE namespace = $1`, s.ns).Scan(&jobs, &held)
	return jobs, held, interpretError(err)
}

// likePrefix is a LIKE pattern matching the strings that start with prefix.
func likePrefix(prefix string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
}
