package store

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The read-only keyspace (KEYS, SCAN, GET, TTL… for redis-cli) is a view of
// workers, queues and jobs. These statements list and probe what its keys
// show. Listings take a name prefix, turned into a LIKE 'prefix%' that the
// primary keys serve as a range (the managed cluster uses the C collation;
// under another collation it is a filter and stays correct). They run with
// QueryExecModeExec, as unnamed statements planned for their arguments: a
// cached generic plan could not see the prefix and would walk the whole
// index.

// KeyspaceWorker is a worker as the worker:<id>:… keys and the
// capability:<name>:workers sets show it.
type KeyspaceWorker struct {
	ID              string
	State           string
	Capabilities    []string
	HasStats        bool
	LastHeartbeatAt time.Time
	// SinceHeartbeat is now() − last_heartbeat_at by the database's clock,
	// the one every node shares.
	SinceHeartbeat time.Duration
	// Metadata and Stats are filled by KeyspaceWorker only.
	Metadata json.RawMessage
	Stats    json.RawMessage
}

// KeyspaceWorkers lists the workers that are not UNREGISTERED whose id
// starts with idPrefix, by id. workers holds one row per worker: the
// primary key serves the prefix and the order once the table is large
// enough for the planner to prefer it to reading the table.
func (s *Store) KeyspaceWorkers(ctx context.Context, idPrefix string) ([]KeyspaceWorker, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT worker_id, state, capabilities, stats IS NOT NULL, last_heartbeat_at,
		       (extract(epoch FROM now() - last_heartbeat_at) * 1000)::bigint
		FROM workers
		WHERE state <> 'UNREGISTERED' AND worker_id LIKE $1
		ORDER BY worker_id`,
		pgx.QueryExecModeExec, likePrefix(idPrefix))
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []KeyspaceWorker
	for rows.Next() {
		var w KeyspaceWorker
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
func (s *Store) KeyspaceWorker(ctx context.Context, id string) (KeyspaceWorker, error) {
	var w KeyspaceWorker
	var sinceMS int64
	err := s.Pool.QueryRow(ctx, `
		SELECT worker_id, state, capabilities, stats IS NOT NULL, last_heartbeat_at,
		       (extract(epoch FROM now() - last_heartbeat_at) * 1000)::bigint, metadata, stats
		FROM workers WHERE worker_id = $1`, id).
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
		WHERE state = 'ACTIVE' AND capabilities @> ARRAY[$1::text]
		ORDER BY worker_id`, capability)
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
		WHERE q.name LIKE $1
		  AND EXISTS (SELECT 1 FROM jobs j
		              WHERE j.queue = q.name AND j.status IN ('queued', 'scheduled', 'retrying') AND j.run_at <= now())
		ORDER BY q.name`,
		pgx.QueryExecModeExec, likePrefix(namePrefix))
	if err != nil {
		return nil, interpretError(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return names, interpretError(err)
}

// KeyspaceJob is a job as the job:<id> and job:<id>:worker keys show it.
type KeyspaceJob struct {
	ID string
	// Holder is the worker running the job, "" unless the job is running
	// and its deadline (its timeout) has not passed.
	Holder string
	// UntilDeadline is deadline_at − now() by the database's clock when
	// Holder is set and the job has a deadline; nil otherwise.
	UntilDeadline *time.Duration
}

// keyspaceJobColumns is the select list scanKeyspaceJob reads.
const keyspaceJobColumns = `id,
	CASE WHEN status = 'running' AND (deadline_at IS NULL OR deadline_at > now()) THEN coalesce(worker_id, '') ELSE '' END,
	CASE WHEN status = 'running' AND deadline_at > now() THEN (extract(epoch FROM deadline_at - now()) * 1000)::bigint END`

func scanKeyspaceJob(row pgx.Row) (KeyspaceJob, error) {
	var j KeyspaceJob
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

// KeyspaceJobsParams selects a page of job ids in id order.
type KeyspaceJobsParams struct {
	IDPrefix string
	// RunningOnly lists only running jobs (for patterns that can match
	// nothing but job:<id>:worker keys).
	RunningOnly bool
	// After resumes a listing after the last id of the previous page; when
	// it is empty, Offset rows are skipped instead.
	After  string
	Offset int64
	Limit  int
}

// KeyspaceJobs pages through job ids. The primary key serves the prefix,
// the resume point and the order; a page after Offset walks the index past
// the skipped ids, which is why callers resume with After when they can.
//
// Running jobs are the newest: walking the primary key for them would pass
// nearly every finished job first. They are few (no more than the workers
// run at once), so they are all read through the running-job indexes
// (jobs_running_*, whose predicate is status = 'running') and sorted.
func (s *Store) KeyspaceJobs(ctx context.Context, p KeyspaceJobsParams) ([]KeyspaceJob, error) {
	offset := p.Offset
	if p.After != "" {
		offset = 0
	}
	sql := `
		SELECT ` + keyspaceJobColumns + ` FROM jobs
		WHERE id LIKE $1 AND id > $2
		ORDER BY id OFFSET $3 LIMIT $4`
	if p.RunningOnly {
		sql = `
		WITH running AS MATERIALIZED (
			SELECT ` + keyspaceJobColumns + ` FROM jobs
			WHERE status = 'running' AND id LIKE $1 AND id > $2
		)
		SELECT * FROM running ORDER BY id OFFSET $3 LIMIT $4`
	}
	rows, err := s.Pool.Query(ctx, sql, pgx.QueryExecModeExec, likePrefix(p.IDPrefix), p.After, offset, p.Limit)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []KeyspaceJob
	for rows.Next() {
		j, err := scanKeyspaceJob(rows)
		if err != nil {
			return nil, interpretError(err)
		}
		out = append(out, j)
	}
	return out, interpretError(rows.Err())
}

// KeyspaceJobProbe returns one job's id and holder without its documents,
// found by its primary key; ErrNotFound when there is no such job.
func (s *Store) KeyspaceJobProbe(ctx context.Context, id string) (KeyspaceJob, error) {
	j, err := scanKeyspaceJob(s.Pool.QueryRow(ctx, `SELECT `+keyspaceJobColumns+` FROM jobs WHERE id = $1`, id))
	return j, interpretError(err)
}

// KeyspaceJobCounts counts the jobs and the running jobs that have a
// holder key, for DBSIZE. No index helps: it reads the whole table (about
// 0.3 s for a million jobs), so DBSIZE costs in proportion to the jobs kept.
func (s *Store) KeyspaceJobCounts(ctx context.Context) (jobs, held int64, err error) {
	err = s.Pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE status = 'running' AND (deadline_at IS NULL OR deadline_at > now()))
		FROM jobs`).Scan(&jobs, &held)
	return jobs, held, interpretError(err)
}

// likePrefix is a LIKE pattern matching the strings that start with prefix.
func likePrefix(prefix string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
}
