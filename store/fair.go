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
// g of namespace, queue, priority, fair_key and keyed (whether a job of g's queue in
// the same statement names a key): the key's last waiting pass, else the
// queue's first waiting pass at that priority, else 0 (nothing waits).
// Each is one probe of an index (jobs_fair_tail, jobs_waiting). In a plain
// queue, one no job ever named a key in, a keyless job has no base (NULL):
// it stands at pass 0, the order by due time alone, with no probe of jobs
// and no entry in jobs_fair_tail.
const fairBase = `CASE WHEN g.fair_key = '' AND NOT g.keyed
		AND NOT coalesce((SELECT f.fair FROM queues f WHERE f.namespace = g.namespace AND f.name = g.queue), false) THEN NULL
	ELSE coalesce(
		(SELECT w.fair_pass FROM jobs w
		 WHERE w.namespace = g.namespace AND w.queue = g.queue AND w.priority = g.priority AND w.fair_key = g.fair_key
		   AND w.status IN ('queued', 'scheduled', 'retrying') AND w.fair_pass > 0
		 ORDER BY w.fair_pass DESC LIMIT 1),
		(SELECT w.fair_pass FROM jobs w
		 WHERE w.namespace = g.namespace AND w.queue = g.queue AND w.priority = g.priority
		   AND w.status IN ('queued', 'scheduled', 'retrying') AND w.fair_pass IS NOT NULL
		 ORDER BY w.fair_pass LIMIT 1),
		0) END`

// registerQueues are the CTEs q and fq of a statement writing jobs whose
// namespaces, queues and fair keys are the arrays namespaces, queues and
// keys (SQL expressions): q registers new queues, fair when one of the
// jobs names a key; fq turns a plain queue fair for good once a job of it
// names one (one write in a queue's life: later statements find it fair
// and write nothing).
func registerQueues(namespaces, queues, keys string) string {
	return fmt.Sprintf(`q AS (
			INSERT INTO queues (namespace, name, fair)
			SELECT ns, queue, bool_or(fair_key <> '') FROM unnest(%[1]s, %[2]s, %[3]s) AS x(ns, queue, fair_key)
			GROUP BY ns, queue
			ON CONFLICT DO NOTHING
		), fq AS (
			UPDATE queues f SET fair = true
			FROM (SELECT DISTINCT ns, queue FROM unnest(%[1]s, %[2]s, %[3]s) AS x(ns, queue, fair_key)
			      WHERE fair_key <> '') x
			WHERE f.namespace = x.ns AND f.name = x.queue AND NOT f.fair
		)`, namespaces, queues, keys)
}

// placeDueSQL places the due jobs of queue $1 of namespace $2 that have no
// pass yet, the
// oldest first, a bounded number a call (the claim that follows takes
// from them; the next claim places more), each key's after its last, in
// due order. Rows another claim is placing are skipped. With none to
// place it is one probe of jobs_unplaced.
var placeDueSQL = fmt.Sprintf(`
	WITH due AS (
		SELECT id, namespace, queue, priority, fair_key, fair_weight, run_at, seq FROM jobs
		WHERE namespace = $2 AND queue = $1 AND status IN ('queued', 'scheduled', 'retrying') AND fair_pass IS NULL
		  AND run_at <= now()
		ORDER BY run_at, seq LIMIT 1000
		FOR UPDATE SKIP LOCKED
	), fair_bases AS MATERIALIZED (
		SELECT g.priority, g.fair_key, %s AS base
		FROM (SELECT k.*, bool_or(k.fair_key <> '') OVER () AS keyed
		      FROM (SELECT DISTINCT namespace, queue, priority, fair_key FROM due) k) g
	), placed AS (
		SELECT d.id, coalesce(b.base + sum(%d / d.fair_weight) OVER (
			PARTITION BY d.priority, d.fair_key ORDER BY d.run_at, d.seq), 0) AS pass
		FROM due d JOIN fair_bases b ON b.priority = d.priority AND b.fair_key = d.fair_key
	)
	UPDATE jobs j SET fair_pass = p.pass FROM placed p WHERE j.namespace = $2 AND j.id = p.id`, fairBase, fairUnit)

// placeDue is placeDueSQL queued before a claim of queue of namespace ns,
// in its transaction, so that the claim sees the jobs it placed.
func placeDue(ns, queue string) *pgx.QueuedQuery {
	return &pgx.QueuedQuery{SQL: placeDueSQL, Arguments: []any{queue, ns}}
}

// fairPlaces are the places of a statement's jobs among their keys, laid
// out here so that the statement only looks up one base a key (fairBases)
// and adds: the distinct keys (namespace, queue, priority, fair_key) of the jobs
// placed now, and for each job its key's number (from 1; 0: placed by a
// claim once due) and its offset, the strides of its key's jobs up to and
// including it, in the statement's order.
type fairPlaces struct {
	namespaces   []string
	queues, keys []string
	priorities   []int32
	group        []int32
	offset       []int64
	index        map[fairKey]int32
	sums         []int64
}

type fairKey struct {
	ns       string
	queue    string
	priority int
	key      string
}

// add places j, of namespace ns, next: now, or (now false) once it is due.
func (f *fairPlaces) add(ns string, j records.NewJob, now bool) {
	if !now {
		f.group, f.offset = append(f.group, 0), append(f.offset, 0)
		return
	}
	if f.index == nil {
		f.index = map[fairKey]int32{}
	}
	k := fairKey{ns, j.Queue, j.Priority, j.FairKey}
	n, ok := f.index[k]
	if !ok {
		f.namespaces = append(f.namespaces, ns)
		f.queues, f.priorities, f.keys = append(f.queues, j.Queue), append(f.priorities, int32(j.Priority)), append(f.keys, j.FairKey)
		f.sums = append(f.sums, 0)
		n = int32(len(f.queues))
		f.index[k] = n
	}
	f.sums[n-1] += fairUnit / int64(weightOf(j))
	f.group, f.offset = append(f.group, n), append(f.offset, f.sums[n-1])
}

// fairBases is the CTE fair_bases: the base (fairBase) of each key of a
// fairPlaces sent as $ns, $q, $p and $k, numbered n from 1. A job's pass
// is fairPass of its base and offset. Materialized, so that each key's
// base is looked up once, not once for each of its jobs.
func fairBases(ns, q, p, k int) string {
	return fmt.Sprintf(`fair_bases AS MATERIALIZED (
			SELECT g.n, %s AS base
			FROM (SELECT u.*, bool_or(u.fair_key <> '') OVER (PARTITION BY u.namespace, u.queue) AS keyed
			      FROM unnest($%d::text[], $%d::int[], $%d::text[], $%d::text[])
			           WITH ORDINALITY AS u(queue, priority, fair_key, namespace, n)) g
		)`, fairBase, q, p, k, ns)
}

// fairPass is the pass of a job placed now from its base and offset: 0 in
// a plain queue (no base).
func fairPass(base, offset string) string {
	return fmt.Sprintf("coalesce(%s + %s, 0)", base, offset)
}

// registerAndPlace registers the queues of jobs all due now, which a COPY
// inserts, and computes their passes: one statement looks up the base of
// each key the jobs name (0 for all in a plain queue).
func registerAndPlace(ctx context.Context, tx pgx.Tx, ns []string, jobs []records.NewJob) ([]int64, error) {
	var f fairPlaces
	for i, j := range jobs {
		f.add(ns[i], j, true)
	}
	rows, err := tx.Query(ctx, `
		WITH `+registerQueues("$4::text[]", "$1::text[]", "$3::text[]")+`, `+fairBases(4, 1, 2, 3)+`
		SELECT base FROM fair_bases ORDER BY n`, f.queues, f.priorities, f.keys, f.namespaces)
	bases, err := collect(rows, err, func(row pgx.CollectableRow) (b *int64, err error) {
		return b, row.Scan(&b)
	})
	if err != nil {
		return nil, err
	}
	if len(bases) != len(f.queues) {
		return nil, fmt.Errorf("placing jobs: %d bases for %d keys", len(bases), len(f.queues))
	}
	passes := make([]int64, len(jobs))
	for i := range jobs {
		if b := bases[f.group[i]-1]; b != nil {
			passes[i] = *b + f.offset[i]
		}
	}
	return passes, nil
}

// weightOf is a job's fair_weight, 1 when it gives none.
func weightOf(j records.NewJob) int {
	return max(j.FairWeight, 1)
}
