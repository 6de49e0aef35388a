package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// Walks down a job graph too large for one bounded transaction: restoring
// what a parent's end cancelled (JOB.RETRY of the parent) and JOB.CANCEL …
// CASCADE. A walk is a set of marks in graph_walks, each naming a job whose
// descendants are still to be walked. A batch takes some marks, walks down
// from them up to maxCascade jobs, applies its change to the jobs it
// reached, and replaces the marks it took by marks on the jobs it reached
// whose children it did not: all in one transaction, so a crash half way
// loses nothing and the leader's sweep carries the walk on.

// Kinds of walk, graph_walks.kind.
const (
	WalkRestore = "restore"
	WalkCascade = "cascade"
)

// Walked is what one batch of a walk did.
type Walked struct {
	// Restored are jobs a restore made pending again.
	Restored []string
	// Cancelled are jobs a cascade cancelled; Asked, running jobs whose
	// cancellation it asked.
	Cancelled []records.JobState
	Asked     []string
	// Check are jobs to settle once committed: restored jobs that wait for
	// no parent (to release), and jobs a cascade ended.
	Check []string
	// Next are the jobs of the marks the batch left, where the walk goes
	// on; More, whether any mark it may not have seen is left.
	Next []string
	More bool
	// Namespace is where the batch walked: every job it names is there.
	Namespace string
}

// mark is one row of graph_walks with its job's status ("" when the job
// is gone).
type mark struct {
	id      int64
	job     string
	status  string
	resumed bool
}

// takeMarks locks marks of kind in namespace ns, those of the jobs named
// or, with ids nil, the oldest, up to limit; marks another walker holds
// are skipped.
func takeMarks(ctx context.Context, tx pgx.Tx, ns, kind string, ids []string, limit int) ([]mark, error) {
	// graph_walks_job finds a job's marks; the primary key, the oldest.
	rows, err := tx.Query(ctx, `
		SELECT g.id, g.job_id, coalesce(j.status, ''), g.resumed
		FROM graph_walks g LEFT JOIN jobs j ON j.namespace = g.namespace AND j.id = g.job_id
		WHERE g.namespace = $1 AND g.kind = $2 AND ($3::text[] IS NULL OR g.job_id = ANY($3::text[]))
		ORDER BY g.id LIMIT $4 FOR UPDATE OF g SKIP LOCKED`, ns, kind, ids, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (mark, error) {
		var m mark
		return m, r.Scan(&m.id, &m.job, &m.status, &m.resumed)
	})
}

// replaceMarks deletes the marks taken and marks the jobs of next, of
// namespace ns, kind, as a walk resumed.
func replaceMarks(ctx context.Context, tx pgx.Tx, ns, kind string, taken []mark, next []string) error {
	ids := make([]int64, len(taken))
	for i, m := range taken {
		ids[i] = m.id
	}
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM graph_walks WHERE id = ANY($1::bigint[])`, ids)
	if len(next) > 0 {
		b.Queue(`INSERT INTO graph_walks (namespace, job_id, kind, resumed) SELECT $1, unnest($2::text[]), $3, true`, ns, next, kind)
	}
	return tx.SendBatch(ctx, b).Close()
}

// GraphWalk runs one batch of the walks of kind: from the marks of the
// jobs named, jobs of s's namespace, or, with ids nil, the oldest (the
// leader's sweep) of the namespace of the oldest mark, up to limit marks.
// A batch walks one namespace, the one its Walked names.
func (s *Store) GraphWalk(ctx context.Context, kind string, ids []string, limit int) (Walked, error) {
	var out Walked
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := s.noJIT(ctx, tx); err != nil {
			return err
		}
		ns := s.ns
		if ids == nil {
			// The primary key finds the oldest mark.
			err := tx.QueryRow(ctx, `SELECT namespace FROM graph_walks WHERE kind = $1 ORDER BY id LIMIT 1`, kind).Scan(&ns)
			if errors.Is(err, pgx.ErrNoRows) {
				out = Walked{}
				return nil
			}
			if err != nil {
				return err
			}
		}
		var err error
		out, err = walkIn(ctx, tx, ns, kind, ids, limit)
		return err
	})
	return out, interpretError(err)
}

// walkIn is GraphWalk in tx, in namespace ns.
func walkIn(ctx context.Context, tx pgx.Tx, ns, kind string, ids []string, limit int) (Walked, error) {
	marks, err := takeMarks(ctx, tx, ns, kind, ids, limit)
	if err != nil || len(marks) == 0 {
		return Walked{Namespace: ns}, err
	}
	var out Walked
	if kind == WalkRestore {
		out, err = restoreBatch(ctx, tx, ns, marks)
	} else {
		out, err = cascadeBatch(ctx, tx, ns, marks)
	}
	if err != nil {
		return Walked{}, err
	}
	out.Namespace = ns
	out.More = out.More || len(marks) >= limit
	return out, replaceMarks(ctx, tx, ns, kind, marks, out.Next)
}

// FlushChildrenIndex moves the entries waiting in jobs_children's pending
// list into the index proper. A GIN index takes new entries — every job
// with parents submitted, and every change of such a job's status, since
// those write new row versions — into a pending list that each search
// reads whole until it is merged (at 128 kB, or by VACUUM): with a few
// thousand entries there, each probe of a walk costs 0.7 ms instead of
// 5 µs. Merging them first costs a few milliseconds a thousand entries,
// work VACUUM would do later anyway.
// Only the index's owner may merge them (as for VACUUM): for others this
// does nothing.
func (s *Store) FlushChildrenIndex(ctx context.Context) error {
	_, err := s.Pool.Exec(ctx, `
		SELECT gin_clean_pending_list(c.oid) FROM pg_class c
		WHERE c.oid = 'jobs_children'::regclass AND pg_has_role(c.relowner, 'USAGE')`)
	return interpretError(err)
}
