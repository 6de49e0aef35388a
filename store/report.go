package store

import (
	"cmp"
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// JobsFinish applies final reports (completed, failed, cancelled) sent by
// different clients, gathered into one group: one statement over arrays
// applies every report that finds its job running, held by the reporter at
// that delivery and not asked to cancel — the usual case — so the group
// shares one WAL flush. Each other report (a re-send, a stale delivery,
// another owner, a cancelled job) takes the locked path on its own, and
// its refusal is its own error.
//
// Each report is about a job of its own namespace (Report.Namespace, else
// s's): the statements match jobs by namespace and id.
func (s *Store) JobsFinish(ctx context.Context, reports []records.Report) ([]error, records.Effects) {
	reports = s.reportsIn(reports)
	var fx records.Effects
	applied, err := s.finishGrouped(ctx, reports, &fx)
	_, errs, rest := lockedRest(reports, err, appliedIn(applied), s.updateAlone(ctx))
	fx.Merge(rest)
	return errs, fx
}

// updateAlone is JobUpdate for lockedRest, in each report's namespace.
func (s *Store) updateAlone(ctx context.Context) func(records.Report) (noResult, records.Effects, error) {
	return func(p records.Report) (noResult, records.Effects, error) {
		fx, err := s.In(cmp.Or(p.Namespace, s.ns)).JobUpdate(ctx, p)
		return noResult{}, fx, err
	}
}

// reportsIn is reports each naming its namespace: its own, else s's.
func (s *Store) reportsIn(reports []records.Report) []records.Report {
	return namedIn(reports, s.ns, func(p *records.Report) *string { return &p.Namespace })
}

// finishGrouped is the grouped statement of JobsFinish. A group without failures
// is one statement in one round trip. A group holding failures first locks
// the failing jobs to read what the retry policy decides on, then applies
// every report with the policy's per-report decisions, in one transaction.
func (s *Store) finishGrouped(ctx context.Context, reports []records.Report, fx *records.Effects) ([]bool, error) {
	applied := make([]bool, len(reports))
	a, failing := finishArraysOf(reports)
	// What the rows say counts only once the transaction committed.
	done := make([]finishedRow, 0, len(reports))
	scan := func(rows pgx.Rows) error {
		var f finishedRow
		if err := rows.Scan(&f.ord, &f.ns, &f.id, &f.status, &f.queue, &f.typ, &f.requires, &f.runAt, &f.hasChildren); err != nil {
			return err
		}
		done = append(done, f)
		return nil
	}
	var err error
	if len(failing) == 0 {
		err = s.hotQuery(ctx, false, nil, scan, finishGroupedSQL, a.args()...)
	} else {
		err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
			if err := s.decideFailures(ctx, tx, reports, failing, &a); err != nil {
				return err
			}
			return txRunner(tx)(ctx, scan, finishGroupedSQL, a.args()...)
		})
	}
	if err != nil {
		return applied, err
	}
	for _, f := range done {
		applied[f.ord] = true
		f.effects(fx)
	}
	return applied, nil
}

// finishArrays are the arrays finishGroupedSQL unnests, one element a
// report; retries and delays are filled in for failures by decideFailures.
type finishArrays struct {
	namespaces                       []string
	ids, workers, statuses, errTexts []string
	results, deliveries              []*string
	attempts, ords                   []int32
	retries                          []bool
	delays                           []float64
}

// finishArraysOf lays out reports, and names the jobs they fail.
func finishArraysOf(reports []records.Report) (a finishArrays, failing []jobKey) {
	n := len(reports)
	a = finishArrays{namespaces: make([]string, n), ids: make([]string, n), workers: make([]string, n), statuses: make([]string, n),
		errTexts: make([]string, n), results: make([]*string, n), deliveries: make([]*string, n),
		attempts: make([]int32, n), ords: make([]int32, n), retries: make([]bool, n), delays: make([]float64, n)}
	for i, p := range reports {
		a.namespaces[i], a.ids[i], a.statuses[i], a.errTexts[i] = p.Namespace, p.ID, p.Status, p.Error
		if !p.Admin {
			a.workers[i] = p.WorkerID
		}
		a.results[i], a.deliveries[i] = nullIfEmpty(string(p.Raw)), deliveryParam(p.Delivery)
		a.attempts[i], a.ords[i] = int32(p.Attempt), int32(i)
		if p.Status == records.StatusFailed {
			failing = append(failing, jobKey{p.Namespace, p.ID})
		}
	}
	return a, failing
}

func (a *finishArrays) args() []any {
	return []any{a.ids, a.workers, a.statuses, a.attempts, a.deliveries, a.results, a.errTexts, a.retries, a.delays, a.ords,
		a.namespaces}
}

// jobKey names a job: its namespace and id.
type jobKey struct{ ns, id string }

// decideFailures locks the running jobs the group fails and asks the rules
// whether each failure runs again, and when.
func (s *Store) decideFailures(ctx context.Context, tx pgx.Tx, reports []records.Report, failing []jobKey, a *finishArrays) error {
	locked := map[jobKey]records.Failure{}
	namespaces, ids := make([]string, len(failing)), make([]string, len(failing))
	for i, k := range failing {
		namespaces[i], ids[i] = k.ns, k.id
	}
	b := &pgx.Batch{}
	b.Queue(genericPlan)
	b.Queue(lockFailingSQL, ids, namespaces).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k jobKey
			var f records.Failure
			if err := rows.Scan(&k.ns, &k.id, &f.Attempt, &f.MaxAttempts, &f.BackoffSeconds); err != nil {
				return err
			}
			locked[k] = f
		}
		return rows.Err()
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	for i, p := range reports {
		f, ok := locked[jobKey{p.Namespace, p.ID}]
		if p.Status != records.StatusFailed || !ok {
			continue // not a failure, or a report the statement will not apply
		}
		f.Retryable = p.Retryable
		retry, delay, err := s.nextRetry(f)
		if err != nil {
			return err
		}
		a.retries[i], a.delays[i] = retry, delay.Seconds()
	}
	return nil
}

// finishedRow is a job finishGroupedSQL moved out of running.
type finishedRow struct {
	ord                        int32
	ns, id, status, queue, typ string
	requires                   []string
	runAt                      time.Time
	hasChildren                bool
}

// effects adds what moving f means to fx: a retry is ready again, an end
// done, with its children to settle when it has any.
func (f finishedRow) effects(fx *records.Effects) {
	fx.Moved = append(fx.Moved, f.id)
	fx.Freed.AddIn(f.ns, f.queue, f.typ, 1)
	if f.status == records.StatusRetrying {
		fx.Ready = append(fx.Ready, records.ReadyNote{Namespace: f.ns, Queue: f.queue, N: 1, Requires: f.requires, At: dueMillis(f.runAt)})
		return
	}
	fx.Done = append(fx.Done, f.id)
	if f.hasChildren {
		fx.Parents = append(fx.Parents, f.id)
	}
}

// lockFailingSQL locks the running jobs a group of final reports fails
// (ids $1 of namespaces $2), by their key (jobs_pkey), and reads what their
// retry decisions need. In key order, so two groups failing the same jobs
// cannot deadlock.
const lockFailingSQL = `
	SELECT j.namespace, ` + decideColumns + ` FROM jobs j
	JOIN (SELECT DISTINCT * FROM unnest($1::text[], $2::text[]) AS f(id, ns)) f ON j.namespace = f.ns AND j.id = f.id
	WHERE j.status = 'running'
	ORDER BY j.namespace, j.id FOR UPDATE OF j`

// finishGroupedSQL applies a group of final reports, each carrying the retry
// policy's decision when it is a failure (retry, delay seconds).
var finishGroupedSQL = `
	WITH u AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[],
			$8::bool[], $9::float8[], $10::int[], $11::text[])
			AS u(id, worker, status, attempt, delivery, result, error, retry, delay, ord, ns)
	), r AS (
		-- A report sent twice in one group is applied once; the
		-- other copy finds it done on the locked path.
		SELECT DISTINCT ON (ns, id) * FROM u ORDER BY ns, id, ord
	)
	UPDATE jobs j SET
		status = CASE WHEN r.retry THEN 'retrying' ELSE r.status END,
		result = CASE WHEN r.retry THEN j.result ELSE coalesce(r.result::jsonb, j.result) END,
		errors = CASE WHEN r.status = 'failed' THEN ` + withError("r.error") + ` ELSE j.errors END,
		worker_id = CASE WHEN r.retry THEN NULL ELSE j.worker_id END,
		run_at = CASE WHEN r.retry THEN now() + make_interval(secs => r.delay) ELSE j.run_at END,
		finished_at = CASE WHEN r.retry THEN NULL ELSE now() END,
		` + clearRunning + `, updated_at = now()
	FROM r
	WHERE j.namespace = r.ns AND j.id = r.id AND ` + heldBy("r.worker", "r.attempt", "r.delivery") + `
	RETURNING r.ord, j.namespace, j.id, j.status, j.queue, j.type, j.requires, j.run_at, j.has_children`

// JobsAck applies acknowledgements and progress reports (JOB.UPDATE with
// status running or none) gathered from different clients: one statement
// over arrays, committed without waiting for the WAL flush, since losing
// one in a crash only means a redelivery. A report it does not apply — the
// job is not running for this delivery, or its cancellation was asked —
// takes the locked path on its own, which says why; a job whose
// cancellation it finds leaves running, ended, and is counted in the
// effects.
func (s *Store) JobsAck(ctx context.Context, reports []records.Report) ([]error, records.Effects) {
	reports = s.reportsIn(reports)
	n := len(reports)
	namespaces := make([]string, n)
	ids, workers, progress, deliveries := make([]string, n), make([]string, n), make([]*string, n), make([]*string, n)
	attempts, ords := make([]int32, n), make([]int32, n)
	for i, p := range reports {
		namespaces[i], ids[i], attempts[i], ords[i] = p.Namespace, p.ID, int32(p.Attempt), int32(i)
		if !p.Admin {
			workers[i] = p.WorkerID
		}
		if p.Status == "" {
			progress[i] = nullIfEmpty(string(p.Raw))
		}
		deliveries[i] = deliveryParam(p.Delivery)
	}
	applied := make([]bool, n)
	done := map[jobKey]bool{}
	err := s.asyncQuery(ctx, func(rows pgx.Rows) error {
		var k jobKey
		err := rows.Scan(&k.ns, &k.id)
		done[k] = true
		return err
	}, `
		WITH r AS (
			-- The last report of a job in the group names the delivery
			-- tested (reports of another take the locked path); the
			-- progress kept is the last that delivery gave, since an
			-- acknowledgement after it carries none.
			SELECT DISTINCT ON (ns, id) ns, id, worker, attempt, delivery,
				(array_agg(progress) FILTER (WHERE progress IS NOT NULL) OVER (
					PARTITION BY ns, id, worker, attempt, delivery ORDER BY ord DESC
					ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING))[1] AS progress
			FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::int[], $7::text[])
				AS u(id, worker, attempt, delivery, progress, ord, ns)
			ORDER BY ns, id, ord DESC
		)
		UPDATE jobs j SET ack_deadline = NULL, progress = coalesce(r.progress::jsonb, j.progress), updated_at = now()
		FROM r
		WHERE j.namespace = r.ns AND j.id = r.id AND `+heldBy("r.worker", "r.attempt", "r.delivery")+`
		RETURNING r.ns, r.id`, ids, workers, attempts, deliveries, progress, ords, namespaces)
	if err == nil {
		// Every report of an applied job matched it: the statement's
		// conditions are the same for all reports of one delivery.
		for i, p := range reports {
			applied[i] = done[jobKey{p.Namespace, p.ID}] && sameDelivery(p, reports, i)
		}
	}
	// An acknowledgement the statement did not apply leaves the job
	// running: no effect, unless it found the job's cancellation asked.
	_, errs, fx := lockedRest(reports, err, appliedIn(applied), s.updateAlone(ctx))
	return errs, fx
}

// sameDelivery reports whether report i names the same worker and delivery
// as the last report of its job in the group, the one the statement tested.
func sameDelivery(p records.Report, reports []records.Report, i int) bool {
	for k := len(reports) - 1; k > i; k-- {
		q := reports[k]
		if q.ID == p.ID && q.Namespace == p.Namespace {
			return q.WorkerID == p.WorkerID && q.Admin == p.Admin && q.Attempt == p.Attempt && q.Delivery == p.Delivery
		}
	}
	return true
}
