package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// Fair share inside a queue (BRIEF §6g) is stride scheduling with the
// order settled when a job is written: each job waiting and due has a
// pass, and claims take the lowest pass of the highest priority first
// (jobs_waiting's order), so a pop stays one index scan however many keys
// wait. A job's pass is its key's last waiting pass plus its stride; a key
// with no job waiting starts level with the first waiting pass of its
// queue and priority, so a key back from idle gets no saved-up burst. Jobs
// written due now are placed by the statement that inserts them; jobs due
// later, and jobs that wait again (retries, snoozes, sleeps, releases,
// returns: the jobs_unplace trigger clears their pass), by the first claim
// of their queue once they are due.

// fairUnit is the stride of a job of weight 1: a job of weight w moves its
// key fairUnit/w along.
const fairUnit = 1_000_000

// fairBase is the pass after which the next job of a key goes, over a row
// g of queue, priority and fair_key: the key's last waiting pass, else the
// queue's first waiting pass at that priority, else 0 (nothing waits).
// Each is one probe of an index (jobs_fair_tail, jobs_waiting).
const fairBase = `coalesce(
		(SELECT w.fair_pass FROM jobs w
		 WHERE w.queue = g.queue AND w.priority = g.priority AND w.fair_key = g.fair_key
		   AND w.status IN ('queued', 'scheduled', 'retrying') AND w.fair_pass IS NOT NULL
		 ORDER BY w.fair_pass DESC LIMIT 1),
		(SELECT w.fair_pass FROM jobs w
		 WHERE w.queue = g.queue AND w.priority = g.priority
		   AND w.status IN ('queued', 'scheduled', 'retrying') AND w.fair_pass IS NOT NULL
		 ORDER BY w.fair_pass LIMIT 1),
		0)`

// fairPasses is the CTEs fair_groups, fair_bases and fair_passes: the pass
// of each row of the CTE input (columns ord, queue, priority, fair_key,
// fair_weight) for which due holds, in ord order within its key. One base
// is looked up per key, however many of its jobs are written.
func fairPasses(input, order, due string) string {
	return fmt.Sprintf(`fair_groups AS (
			SELECT DISTINCT i.queue, i.priority, i.fair_key FROM %[1]s i WHERE %[3]s
		), fair_bases AS (
			SELECT g.queue, g.priority, g.fair_key, %[4]s AS base FROM fair_groups g
		), fair_passes AS (
			SELECT i.ord, b.base + sum(%[5]d / i.fair_weight) OVER (
				PARTITION BY i.queue, i.priority, i.fair_key ORDER BY %[2]s) AS pass
			FROM %[1]s i JOIN fair_bases b ON b.queue = i.queue AND b.priority = i.priority AND b.fair_key = i.fair_key
			WHERE %[3]s
		)`, input, order, due, fairBase, fairUnit)
}

// placeDueSQL places the due jobs of queue $1 that have no pass yet, the
// oldest first, a bounded number a call (the claim that follows takes
// from them; the next claim places more). Rows another claim is placing
// are skipped. With none to place it is one probe of jobs_unplaced.
var placeDueSQL = `
	WITH due AS (
		SELECT id AS ord, queue, priority, fair_key, fair_weight, run_at, seq FROM jobs
		WHERE queue = $1 AND status IN ('queued', 'scheduled', 'retrying') AND fair_pass IS NULL AND run_at <= now()
		ORDER BY run_at, seq LIMIT 1000
		FOR UPDATE SKIP LOCKED
	), ` + fairPasses("due", "i.run_at, i.seq", "true") + `
	UPDATE jobs j SET fair_pass = p.pass FROM fair_passes p WHERE j.id = p.ord`

// placeDue is placeDueSQL queued before a claim of queue, in its
// transaction, so that the claim sees the jobs it placed.
func placeDue(queue string) *pgx.QueuedQuery {
	return &pgx.QueuedQuery{SQL: placeDueSQL, Arguments: []any{queue}}
}

// registerAndPlace registers queues and computes the passes of jobs all
// due now, which a COPY inserts: one statement looks up the base of each
// key the jobs name.
func registerAndPlace(ctx context.Context, tx pgx.Tx, queues []string, jobs []records.NewJob) ([]int64, error) {
	type group struct {
		queue    string
		priority int
		key      string
	}
	index := map[group]int{}
	var groupQueues, keys []string
	var priorities []int32
	for _, j := range jobs {
		g := group{j.Queue, j.Priority, j.FairKey}
		if _, ok := index[g]; !ok {
			index[g] = len(groupQueues)
			groupQueues, priorities, keys = append(groupQueues, g.queue), append(priorities, int32(g.priority)), append(keys, g.key)
		}
	}
	rows, err := tx.Query(ctx, `
		WITH q AS (
			INSERT INTO queues (name) SELECT unnest($4::text[]) ON CONFLICT DO NOTHING
		)
		SELECT `+fairBase+` FROM unnest($1::text[], $2::int[], $3::text[]) WITH ORDINALITY AS g(queue, priority, fair_key, n)
		ORDER BY g.n`, groupQueues, priorities, keys, queues)
	bases, err := collect(rows, err, func(row pgx.CollectableRow) (b int64, err error) {
		return b, row.Scan(&b)
	})
	if err != nil {
		return nil, err
	}
	if len(bases) != len(groupQueues) {
		return nil, fmt.Errorf("placing jobs: %d bases for %d keys", len(bases), len(groupQueues))
	}
	passes := make([]int64, len(jobs))
	for i, j := range jobs {
		n := index[group{j.Queue, j.Priority, j.FairKey}]
		bases[n] += fairUnit / int64(weightOf(j))
		passes[i] = bases[n]
	}
	return passes, nil
}

// weightOf is a job's fair_weight, 1 when it gives none.
func weightOf(j records.NewJob) int {
	return max(j.FairWeight, 1)
}
