package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// waitingStatuses are the unfinished statuses of a job no worker holds:
// a cascade cancels them at once (a running job is asked to stop). A
// status added among the unfinished ones that holds no worker belongs here.
const waitingStatuses = `'pending', 'queued', 'scheduled', 'retrying', 'awaiting'`

// childrenOf is the lateral step from a job (col) to its children, jobs of
// the namespace $1, one probe of jobs_children a job; OFFSET 0 keeps it a
// nested loop over that index. A GIN index cannot lead with the
// namespace: it is filtered past the fence, so that no plan ANDs the
// probe with the namespace's whole share of jobs_pkey. probe says whether a child's own children are to be looked for:
// a job not ended that has any has has_children set (its children were
// linked while it waited or ran), but a job that ended may have children
// submitted since, unmarked.
func childrenOf(col string) string {
	return `CROSS JOIN LATERAL (
		SELECT * FROM (
			SELECT c.namespace, c.id, c.has_children OR c.status IN ('completed', 'failed', 'cancelled') AS probe
			FROM jobs c WHERE c.after @> ARRAY[` + col + `] AND c.after IS NOT NULL OFFSET 0) c
		WHERE c.namespace = $1) k`
}

// cascadeWalkSQL finds every job of namespace $1 after the jobs $2, down
// the graph, whatever its status (an ended job's children may not have
// ended), each once, up to $3.
var cascadeWalkSQL = `
	WITH RECURSIVE r(id, probe) AS (
		SELECT k.id, k.probe FROM unnest($2::text[]) AS m(id) ` + childrenOf("m.id") + `
	  UNION
		SELECT k.id, k.probe FROM r ` + childrenOf("r.id") + ` WHERE r.probe
	)
	SELECT id FROM r LIMIT $3`

// cascadeFrontierSQL names the jobs of $2 with a child outside $2: where
// a walk cut at its bound goes on.
var cascadeFrontierSQL = `
	SELECT DISTINCT w.id FROM unnest($2::text[]) AS w(id) ` + childrenOf("w.id") + `
	LEFT JOIN unnest($2::text[]) AS f(id) ON f.id = k.id
	WHERE f.id IS NULL`

// cascadeCancelSQL cancels the jobs found that no worker holds (by key,
// jobs_pkey); the trigger marks those that are parents.
var cascadeCancelSQL = `
	UPDATE jobs j SET status = 'cancelled', finished_at = now(), ` + clearRunning + `, updated_at = now()
	FROM unnest($2::text[]) AS d(id)
	WHERE j.namespace = $1 AND j.id = d.id AND j.status IN (` + waitingStatuses + `)
	RETURNING j.id, j.queue, j.attempt`

// cascadeAskSQL asks the workers holding the running jobs found to stop,
// as JOB.CANCEL does; their heartbeats and reports tell them.
const cascadeAskSQL = `
	UPDATE jobs j SET cancel_requested = true, updated_at = now()
	FROM unnest($2::text[]) AS d(id)
	WHERE j.namespace = $1 AND j.id = d.id AND j.status = 'running' AND NOT j.cancel_requested
	RETURNING j.id`

// cascadeBatch cancels, down the graph from the marks' jobs, jobs of
// namespace ns, every job not ended, up to maxCascade jobs walked.
func cascadeBatch(ctx context.Context, tx pgx.Tx, ns string, marks []mark) (Walked, error) {
	var out Walked
	from := make([]string, 0, len(marks))
	for _, m := range marks {
		if m.status != "" {
			from = append(from, m.job)
		}
	}
	// One more than the bound: whether the walk was cut.
	rows, err := tx.Query(ctx, cascadeWalkSQL, ns, from, maxCascade+1)
	if err != nil {
		return out, err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(found) == 0 {
		return out, err
	}
	cut := len(found) > maxCascade
	found = found[:min(len(found), maxCascade)]
	b := &pgx.Batch{}
	b.Queue(cascadeCancelSQL, ns, found).Query(func(rows pgx.Rows) error {
		out.Cancelled, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (records.JobState, error) {
			j := records.JobState{Namespace: ns, Status: records.StatusCancelled}
			return j, r.Scan(&j.ID, &j.Queue, &j.Attempt)
		})
		return err
	})
	b.Queue(cascadeAskSQL, ns, found).Query(func(rows pgx.Rows) error {
		out.Asked, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if cut {
		b.Queue(cascadeFrontierSQL, ns, append(from, found...)).Query(func(rows pgx.Rows) error {
			out.Next, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return out, err
	}
	ended := make([]string, len(out.Cancelled))
	for i, c := range out.Cancelled {
		ended[i] = c.ID
	}
	if cut {
		out.Check = ended // settled once the walk is over
		return out, nil
	}
	// The walk reached every child of the jobs it cancelled, and those
	// that waited were cancelled with them: nothing is left to settle.
	// job_waits_pkey and dependency_checks_job, a probe a job.
	b = &pgx.Batch{}
	b.Queue(`DELETE FROM job_waits w USING unnest($2::text[]) AS d(id) WHERE w.namespace = $1 AND w.parent_id = d.id`, ns, ended)
	b.Queue(`DELETE FROM dependency_checks c USING unnest($2::text[]) AS d(id) WHERE c.namespace = $1 AND c.job_id = d.id`, ns, ended)
	return out, tx.SendBatch(ctx, b).Close()
}

// JobCancelCascade is JOB.CANCEL … CASCADE: job id, unless it ended, is
// cancelled as JobCancel cancels it, and a walk (graph_walks) is marked
// that cancels every job after it, down the graph, that has not ended. The
// walk's first batch runs in the same transaction, so that no child of the
// job is settled (released, when it runs whatever its parents did) before
// the walk reaches it; the caller carries the rest on once committed. A
// job that ended is no refusal. Its effects are JobCancel's, without the
// job's children to settle: the walk settles them once it has cancelled
// them.
func (s *Store) JobCancelCascade(ctx context.Context, id string, limit int) (records.Effects, Walked, error) {
	var fx records.Effects
	var w Walked
	if !storable(id) {
		return fx, w, records.ErrNotFound
	}
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var err error
		if fx, err = cancelIn(ctx, tx, s.ns, id, true); err != nil {
			return err
		}
		w, err = walkIn(ctx, tx, s.ns, WalkCascade, []string{id}, limit)
		return err
	})
	if err != nil {
		return records.Effects{}, Walked{}, interpretError(err)
	}
	return fx, w, nil
}
