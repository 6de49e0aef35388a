package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// maxCascade bounds the jobs one transaction cancels down a graph: the
// last ones it reaches are parents marked by the trigger, and the next
// round carries on from them.
const maxCascade = 10000

// pendingChild is job id (a SQL expression) of namespace $1 when it is
// pending and does not run on a parent's failure: a probe of jobs_pkey.
// The statuses are tested past the fence, so that no plan takes the
// probe through jobs_parked, whose predicate they would imply, and
// reads every pending job of the namespace for each child.
func pendingChild(id string) string {
	return `SELECT k.id FROM (SELECT k.id, k.status, k.on_parent_failure FROM jobs k
		WHERE k.namespace = $1 AND k.id = ` + id + ` OFFSET 0) k
		WHERE k.status = 'pending' AND k.on_parent_failure = 'cancel'`
}

// cancelDescendantsSQL finds the pending children ($2, with their errors
// $3 and the parents $4 that cancel them), jobs of namespace $1, that do
// not run on a parent's failure, and down the graph, through the waits of
// each job found, their pending children of the same kind: a chain as
// deep as it is long in one statement. The walk counts edges (a child
// reached from two parents is one job) and stops at $5; each job keeps the
// first parent that reached it as the one whose retry restores it.
var cancelDescendantsSQL = `
	WITH RECURSIVE r(id, cause, error) AS (
		-- jobs_pkey, one probe a child.
		SELECT c.id, c.cause, c.error
		FROM unnest($2::text[], $4::text[], $3::text[]) AS c(id, cause, error)
		CROSS JOIN LATERAL (` + pendingChild("c.id") + `) k
	  UNION
		-- job_waits_pkey by its first columns, then jobs_pkey: a probe a
		-- job reached. OFFSET 0 keeps the subquery a nested loop (the
		-- planner would otherwise hash all of job_waits at every level).
		SELECT k.child_id, r.id, 'parent ' || r.id || ' cancelled'
		FROM r CROSS JOIN LATERAL (
			SELECT w.child_id FROM job_waits w CROSS JOIN LATERAL (` + pendingChild("w.child_id") + `) k
			WHERE w.namespace = $1 AND w.parent_id = r.id
			OFFSET 0) k
	)
	SELECT DISTINCT ON (id) id, cause, error FROM (SELECT * FROM r LIMIT $5) s ORDER BY id`

// cancelFoundSQL cancels the jobs cancelDescendantsSQL found, by key
// (jobs_pkey), only those still pending; the trigger marks those that are
// parents.
const cancelFoundSQL = `
	UPDATE jobs j SET status = 'cancelled', finished_at = now(), updated_at = now(), cancelled_by = c.cause,
		errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'error', c.error, 'at', now()))
	FROM unnest($2::text[], $3::text[], $4::text[]) AS c(id, cause, error)
	WHERE j.namespace = $1 AND j.id = c.id AND j.status = 'pending' AND j.on_parent_failure = 'cancel'
	RETURNING j.id, j.queue, j.attempt`

// cancelDescendants cancels kids, jobs of namespace ns (pending, cancelled
// by their parents' ends as texts and causes say), and their descendants
// of the same kind, up to maxCascade jobs; the trigger marks those that
// are parents, so their own children are settled in the next round.
func cancelDescendants(ctx context.Context, tx pgx.Tx, ns string, kids, texts, causes []string) ([]records.JobState, error) {
	rows, err := tx.Query(ctx, cancelDescendantsSQL, ns, kids, texts, causes, maxCascade)
	if err != nil {
		return nil, err
	}
	var ids, why, errs []string
	var id, cause, text string
	if _, err := pgx.ForEachRow(rows, []any{&id, &cause, &text}, func() error {
		ids, why, errs = append(ids, id), append(why, cause), append(errs, text)
		return nil
	}); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err = tx.Query(ctx, cancelFoundSQL, ns, ids, why, errs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (records.JobState, error) {
		j := records.JobState{Namespace: ns, Status: records.StatusCancelled}
		return j, r.Scan(&j.ID, &j.Queue, &j.Attempt)
	})
}
