package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// restoreWalkSQL finds the jobs cancelled because of the jobs $1, and down
// the graph those cancelled because of them, up to $2: one probe of
// jobs_cancelled_by a job reached. OFFSET 0 keeps the step a nested loop
// over that index.
const restoreWalkSQL = `
	WITH RECURSIVE r(id) AS (
		SELECT c.id FROM jobs c WHERE c.cancelled_by = ANY($1::text[]) AND c.status = 'cancelled'
	  UNION
		SELECT k.id FROM r CROSS JOIN LATERAL (
			SELECT c.id FROM jobs c WHERE c.cancelled_by = r.id AND c.status = 'cancelled' OFFSET 0) k
	)
	SELECT id FROM r LIMIT $2`

// restoreSQL makes the jobs found pending again, with fresh attempts, by
// key (jobs_pkey).
const restoreSQL = `
	UPDATE jobs j SET status = 'pending', finished_at = NULL, cancelled_by = NULL, attempt = 0,
		worker_id = NULL, cancel_requested = false, updated_at = now()
	FROM unnest($1::text[]) AS d(id)
	WHERE j.id = d.id AND j.status = 'cancelled'
	RETURNING j.id`

// restoreBatch restores, down the graph from the marks' jobs, the jobs
// cancelled because of them. A mark whose job failed or was cancelled
// again meanwhile restores nothing: what it cancelled stays cancelled.
func restoreBatch(ctx context.Context, tx pgx.Tx, marks []mark) (Walked, error) {
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
	rows, err := tx.Query(ctx, restoreWalkSQL, from, maxCascade)
	if err != nil {
		return out, err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(found) == 0 {
		return out, err
	}
	if rows, err = tx.Query(ctx, restoreSQL, found); err != nil {
		return out, err
	}
	if out.Restored, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return out, err
	}
	// A job restored by an earlier batch of this walk may be a pending
	// child of one restored now: only then are children looked for.
	if err := waitAgain(ctx, tx, out.Restored, resumed); err != nil {
		return out, err
	}
	b := &pgx.Batch{}
	// Where the walk stopped: jobs reached (or marked) of which some job
	// cancelled because of them is left (jobs_cancelled_by).
	b.Queue(`SELECT DISTINCT c.cancelled_by FROM unnest($1::text[]) AS w(id)
		JOIN jobs c ON c.cancelled_by = w.id AND c.status = 'cancelled'`,
		append(from, out.Restored...)).Query(func(rows pgx.Rows) error {
		out.Next, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	// Restored jobs no parent holds (theirs completed meanwhile) are
	// marked, to be released once committed (job_waits_child).
	b.Queue(`INSERT INTO dependency_checks (job_id)
		SELECT d.id FROM unnest($1::text[]) AS d(id) WHERE NOT EXISTS (SELECT 1 FROM job_waits w WHERE w.child_id = d.id)
		RETURNING job_id`, out.Restored).Query(func(rows pgx.Rows) error {
		out.Check, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return out, tx.SendBatch(ctx, b).Close()
}

// waitAgain makes the jobs of waiting, back from an end, wait again for
// each of their parents not ended, and, with children, their pending
// children wait for them. The parents are locked first, in id order as a
// submission locks them, so that a parent's end either comes first or sees
// has_children.
func waitAgain(ctx context.Context, tx pgx.Tx, waiting []string, children bool) error {
	b := &pgx.Batch{}
	// The jobs by jobs_pkey, their parents likewise; the list joined as a
	// set, not searched for each row.
	b.Queue(`SELECT p.id FROM unnest($1::text[]) AS w(id) JOIN jobs c ON c.id = w.id
		CROSS JOIN LATERAL unnest(c.after) AS a(id) JOIN jobs p ON p.id = a.id
		ORDER BY p.id FOR NO KEY UPDATE OF p`, waiting)
	b.Queue(`
		WITH ins AS (
			INSERT INTO job_waits (parent_id, child_id)
			SELECT p.id, c.id FROM unnest($1::text[]) AS w(id) JOIN jobs c ON c.id = w.id
				CROSS JOIN LATERAL unnest(c.after) AS a(id) JOIN jobs p ON p.id = a.id
			WHERE p.status NOT IN ('completed', 'failed', 'cancelled')
			UNION
			-- The children through jobs_children: a probe a job.
			SELECT w.id, k.id FROM unnest($1::text[]) AS w(id) CROSS JOIN LATERAL (
				SELECT c.id FROM jobs c WHERE $2 AND c.after @> ARRAY[w.id] AND c.after IS NOT NULL AND c.status = 'pending'
				OFFSET 0) k
			ON CONFLICT DO NOTHING
			RETURNING parent_id
		)
		UPDATE jobs SET has_children = true WHERE id IN (SELECT parent_id FROM ins) AND NOT has_children`, waiting, children)
	return tx.SendBatch(ctx, b).Close()
}
