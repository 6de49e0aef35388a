package store

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// cancelledByWalkSQL finds the jobs of namespace $1 in table (jobs, or
// jobs_history for a recall) cancelled because of the jobs $2, and down
// the graph those cancelled because of them, up to $3: one probe of the
// table's cancelled_by index a job reached. OFFSET 0 keeps the step a
// nested loop over that index.
//
// The status is checked past a fence (OFFSET 0): a status = 'cancelled'
// beside the namespace would let the planner read the namespace's every
// cancelled job through jobs_finished for each job of a chain, where
// jobs_cancelled_by finds its few.
func cancelledByWalkSQL(table string) string {
	return `
	WITH RECURSIVE r(id) AS (
		SELECT k.id FROM (
			SELECT c.id, c.status FROM ` + table + ` c WHERE c.namespace = $1 AND c.cancelled_by = ANY($2::text[]) OFFSET 0) k
		WHERE k.status = 'cancelled'
	  UNION
		SELECT k.id FROM r CROSS JOIN LATERAL (
			SELECT c.id, c.status FROM ` + table + ` c WHERE c.namespace = $1 AND c.cancelled_by = r.id OFFSET 0) k
		WHERE k.status = 'cancelled'
	)
	SELECT id FROM r LIMIT $3`
}

// restoreWalkSQL is the walk of a restore through jobs.
var restoreWalkSQL = cancelledByWalkSQL("jobs")

// restoreSQL makes the jobs found pending again, with fresh attempts, by
// key (jobs_pkey).
const restoreSQL = `
	UPDATE jobs j SET status = 'pending', finished_at = NULL, cancelled_by = NULL, attempt = 0,
		worker_id = NULL, cancel_requested = false, updated_at = now()
	FROM unnest($2::text[]) AS d(id)
	WHERE j.namespace = $1 AND j.id = d.id AND j.status = 'cancelled'
	RETURNING j.id`

// restoreFound makes the jobs found pending again (restoreSQL). The
// leader's mover may have moved some of them into history since the walk
// read them (they were cancelled, unlocked): those are recalled, in a
// statement that sees the move, and restored in turn. A recalled job is
// this transaction's until it commits, out of the mover's reach.
func restoreFound(ctx context.Context, tx pgx.Tx, ns string, found []string) ([]string, error) {
	rows, err := tx.Query(ctx, restoreSQL, ns, found)
	restored, err := collect(rows, err, pgx.RowTo[string])
	if err != nil || len(restored) == len(found) {
		return restored, err
	}
	done := make(map[string]bool, len(restored))
	for _, id := range restored {
		done[id] = true
	}
	moved, err := recall(ctx, tx, ns, slices.DeleteFunc(slices.Clone(found), func(id string) bool { return done[id] }))
	if err != nil || len(moved) == 0 {
		return restored, err
	}
	rows, err = tx.Query(ctx, restoreSQL, ns, moved)
	more, err := collect(rows, err, pgx.RowTo[string])
	return append(restored, more...), err
}

// restoreBatch restores, down the graph from the marks' jobs, jobs of
// namespace ns, the jobs cancelled because of them. A mark whose job
// failed or was cancelled again meanwhile restores nothing: what it
// cancelled stays cancelled.
func restoreBatch(ctx context.Context, tx pgx.Tx, ns string, marks []mark) (Walked, error) {
	var out Walked
	var from []string
	resumed := false
	for _, m := range marks {
		resumed = resumed || m.resumed
		if m.status != "" && m.status != records.StatusFailed && m.status != records.StatusCancelled {
			from = append(from, m.job)
		}
	}
	if len(from) == 0 {
		return out, nil
	}
	if err := recallCancelledBy(ctx, tx, ns, from, maxCascade); err != nil {
		return out, err
	}
	rows, err := tx.Query(ctx, restoreWalkSQL, ns, from, maxCascade)
	if err != nil {
		return out, err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(found) == 0 {
		return out, err
	}
	if out.Restored, err = restoreFound(ctx, tx, ns, found); err != nil {
		return out, err
	}
	// A job restored by an earlier batch of this walk may be a pending
	// child of one restored now: only then are children looked for.
	if err := waitAgain(ctx, tx, ns, out.Restored, resumed); err != nil {
		return out, err
	}
	b := &pgx.Batch{}
	// Where the walk stopped: jobs reached (or marked) of which some job
	// cancelled because of them is left (jobs_cancelled_by, in jobs or
	// history).
	b.Queue(`SELECT DISTINCT k.cancelled_by FROM unnest($2::text[]) AS w(id) CROSS JOIN LATERAL (
			SELECT c.cancelled_by, c.status FROM jobs_all c WHERE c.namespace = $1 AND c.cancelled_by = w.id OFFSET 0) k
		WHERE k.status = 'cancelled'`,
		ns, append(from, out.Restored...)).Query(func(rows pgx.Rows) error {
		out.Next, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	// Restored jobs no parent holds (theirs completed meanwhile) are
	// marked, to be released once committed (job_waits_child).
	b.Queue(`INSERT INTO dependency_checks (namespace, job_id)
		SELECT $1, d.id FROM unnest($2::text[]) AS d(id)
		WHERE NOT EXISTS (SELECT 1 FROM job_waits w WHERE w.namespace = $1 AND w.child_id = d.id)
		RETURNING job_id`, ns, out.Restored).Query(func(rows pgx.Rows) error {
		out.Check, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return out, tx.SendBatch(ctx, b).Close()
}

// waitAgain makes the jobs of waiting, jobs of namespace ns back from an
// end, wait again for each of their parents not ended, and, with
// children, their pending children wait for them. The parents are locked
// first, in id order as a submission locks them, so that a parent's end
// either comes first or sees has_children.
func waitAgain(ctx context.Context, tx pgx.Tx, ns string, waiting []string, children bool) error {
	b := &pgx.Batch{}
	// The jobs by jobs_pkey, their parents likewise; the list joined as a
	// set, not searched for each row.
	b.Queue(`SELECT p.id FROM unnest($2::text[]) AS w(id) JOIN jobs c ON c.namespace = $1 AND c.id = w.id
		CROSS JOIN LATERAL unnest(c.after) AS a(id) JOIN jobs p ON p.namespace = $1 AND p.id = a.id
		ORDER BY p.id FOR NO KEY UPDATE OF p`, ns, waiting)
	b.Queue(`
		WITH ins AS (
			INSERT INTO job_waits (namespace, parent_id, child_id)
			SELECT $1, p.id, c.id FROM unnest($2::text[]) AS w(id) JOIN jobs c ON c.namespace = $1 AND c.id = w.id
				CROSS JOIN LATERAL unnest(c.after) AS a(id) JOIN jobs p ON p.namespace = $1 AND p.id = a.id
			WHERE p.status NOT IN ('completed', 'failed', 'cancelled')
			UNION
			-- The children through jobs_children, a probe a job, the
			-- namespace and the status filtered past the fence (as
			-- childrenOf does): status = 'pending' inside would have the
			-- probe intersect jobs_parked's every pending job.
			SELECT $1, w.id, k.id FROM unnest($2::text[]) AS w(id) CROSS JOIN LATERAL (
				SELECT c.namespace, c.id, c.status FROM jobs c WHERE $3 AND c.after @> ARRAY[w.id] AND c.after IS NOT NULL
				OFFSET 0) k
			WHERE k.namespace = $1 AND k.status = 'pending'
			ON CONFLICT DO NOTHING
			RETURNING parent_id
		)
		UPDATE jobs SET has_children = true WHERE namespace = $1 AND id IN (SELECT parent_id FROM ins) AND NOT has_children`,
		ns, waiting, children)
	return tx.SendBatch(ctx, b).Close()
}
