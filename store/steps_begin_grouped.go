package store

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// StepBeginOutcome is one STEP.BEGIN of a group: its result, or why it
// was refused.
type StepBeginOutcome struct {
	Result records.StepBeginResult
	Err    error
}

// StepsBegin applies step begins sent by different clients, gathered into
// one group, so that the group shares one WAL flush. One statement serves
// each call whose job appears once in the group, runs for the delivery
// named (or the latest), is held by the caller and not asked to cancel: it
// begins a new step, begins a step again within its attempts, or answers
// the output of a step completed with an equal input, writing nothing for
// it. Each other call (a stale delivery, a refusal, a step past its
// attempts, a sleep's id, a job at MaxSteps) takes the locked path
// (StepBegin) on its own, which says why.
func (s *Store) StepsBegin(ctx context.Context, calls []records.StepBeginParams) ([]StepBeginOutcome, records.Effects) {
	served, err := s.beginStepsGrouped(ctx, s.Pool, true, calls)
	return s.beginRest(ctx, calls, served, err)
}

// beginRest answers the begins of a group that the grouped statement
// served, and takes the locked path for the others.
func (s *Store) beginRest(ctx context.Context, calls []records.StepBeginParams, served map[int]records.StepBeginResult, err error) ([]StepBeginOutcome, records.Effects) {
	res, errs, fx := lockedRest(calls, err, func(i int) (records.StepBeginResult, bool) {
		r, ok := served[i]
		return r, ok
	}, func(c records.StepBeginParams) (records.StepBeginResult, records.Effects, error) {
		return s.StepBegin(ctx, c)
	})
	out := make([]StepBeginOutcome, len(calls))
	for i := range out {
		out[i] = StepBeginOutcome{Result: res[i], Err: errs[i]}
	}
	return out, fx
}

// beginStepsGrouped is the grouped statement of StepsBegin, on q: the
// results of the calls it served, by their index. lock locks the jobs
// first; a transaction that holds their locks already need not.
func (s *Store) beginStepsGrouped(ctx context.Context, q batchSender, lock bool, calls []records.StepBeginParams) (map[int]records.StepBeginResult, error) {
	served := make(map[int]records.StepBeginResult, len(calls))
	var sc stepCalls
	var inputs []*string
	var maxAttempts []*int32
	var backoffs []*float64
	for i, c := range calls {
		if !sc.add(s.stepNamespace(c.StepParams), c.StepParams, i) {
			continue
		}
		var most *int32
		if c.MaxAttempts != nil {
			m := int32(*c.MaxAttempts)
			most = &m
		}
		inputs = append(inputs, nullIfEmpty(string(c.Input)))
		maxAttempts, backoffs = append(maxAttempts, most), append(backoffs, c.BackoffSeconds)
	}
	if len(sc.ords) == 0 {
		return served, nil
	}
	// The jobs are locked first, in a statement of their own, so that the
	// begins read their steps as the calls that held the locks before left
	// them (READ COMMITTED takes a snapshot per statement).
	var before []*pgx.QueuedQuery
	if lock {
		before = append(before, &pgx.QueuedQuery{SQL: lockStepJobsSQL, Arguments: []any{sc.namespaces, sc.jobIDs}})
	}
	err := hotQueryOn(ctx, q, false, before, func(rows pgx.Rows) error {
		var ord, attempt int32
		var answered bool
		var output []byte
		if err := rows.Scan(&ord, &answered, &attempt, &output); err != nil {
			return err
		}
		if answered {
			if len(output) == 0 {
				output = []byte("null")
			}
			served[int(ord)] = records.StepBeginResult{Output: json.RawMessage(output)}
		} else {
			served[int(ord)] = records.StepBeginResult{Execute: true, Attempt: int(attempt)}
		}
		return nil
	}, beginStepsGroupedSQL, sc.namespaces, sc.jobIDs, sc.stepIDs, sc.workers, sc.deliveries, inputs, maxAttempts, backoffs, sc.ords)
	if err != nil {
		return map[int]records.StepBeginResult{}, err
	}
	return served, nil
}

// lockStepJobsSQL locks a group's jobs through their key (namespace $1,
// id $2, pairwise), in key order, as the locked path locks each.
const lockStepJobsSQL = `
	SELECT 1 FROM unnest($1::text[], $2::text[]) AS u(namespace, id) JOIN jobs j ON j.namespace = u.namespace AND j.id = u.id
	ORDER BY j.namespace, j.id FOR UPDATE OF j`

// stepBeginDecisionSQL is the rules' decision of a STEP.BEGIN held by its
// caller (records.Rules.StepBegin, engine.DecideStepBegin) in SQL, for the
// grouped statement that decides without asking: the verdict (a
// records.StepVerdict) and the attempt it runs, of a row c with columns
// found, kind, status, attempts, step_max (the call's max_attempts, else
// the step's), same_input, current (begun by the job's delivery) and
// last_ord (the job's steps). steps_rule_test.go runs every case through
// both.
func stepBeginDecisionSQL(c string) (verdict, attempt string) {
	v := func(s records.StepVerdict) string { return strconv.Itoa(int(s)) }
	verdict = `CASE
		WHEN NOT ` + c + `.found THEN CASE WHEN ` + c + `.last_ord < ` + strconv.Itoa(records.MaxSteps) +
		` THEN ` + v(records.StepBegins) + ` ELSE ` + v(records.StepRefused) + ` END
		WHEN ` + c + `.kind <> 'step' THEN ` + v(records.StepRefused) + `
		WHEN ` + c + `.status = 'completed' AND ` + c + `.same_input THEN ` + v(records.StepAnswersOutput) + `
		WHEN ` + c + `.status = 'running' AND ` + c + `.current OR ` + c + `.status = 'completed' THEN ` + v(records.StepRuns) + `
		WHEN ` + c + `.attempts >= ` + c + `.step_max THEN ` + v(records.StepExhausted) + `
		ELSE ` + v(records.StepRuns) + ` END`
	attempt = `CASE
		WHEN NOT ` + c + `.found OR ` + c + `.status = 'completed' THEN 1
		WHEN ` + c + `.status = 'running' AND ` + c + `.current THEN ` + c + `.attempts
		ELSE ` + c + `.attempts + 1 END`
	return verdict, attempt
}

// beginStepsGroupedSQL begins a group's steps as the rules decide
// (stepBeginDecisionSQL), reading each job through its key, each step
// through job_steps_live and each job's last order through
// job_steps_order: a new step is its job's next; a step begun again is
// written with its attempt; a step completed with an equal input answers
// its output and is not written. Any other decision is left to the locked
// path. The jobs' first calls of their deliveries acknowledge them.
//
// c is materialized so that each job's last order is looked up once, not
// once for each use of it. The insert takes no ON CONFLICT: the jobs are
// locked, so no other call adds their steps meanwhile, and a conflict
// would fail the statement, leaving every call of the group to the locked
// path; a speculative insertion costs a WAL record and five buffers a row.
var beginStepsGroupedSQL = func() string {
	verdict, attempt := stepBeginDecisionSQL("c")
	v := func(s records.StepVerdict) string { return strconv.Itoa(int(s)) }
	return `
	WITH u AS (
		SELECT *, count(*) OVER (PARTITION BY namespace, job_id) AS calls
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[], $8::float8[], $9::int[])
			AS u(namespace, job_id, step_id, worker, delivery, input, max_attempts, backoff, ord)
	), c AS MATERIALIZED (
		SELECT u.*, j.delivery AS job_delivery, j.ack_deadline IS NOT NULL AS unacked,
			coalesce(u.max_attempts, j.max_attempts) AS new_max, coalesce(u.backoff, j.retry_backoff_seconds) AS new_backoff,
			s.step_id IS NOT NULL AS found, s.kind, s.status, s.attempts, coalesce(u.max_attempts, s.max_attempts) AS step_max,
			s.input = coalesce(u.input::jsonb, 'null') AS same_input, s.output, s.delivery = j.delivery AS current,
			(SELECT coalesce(max(m.ord), 0) FROM job_steps m WHERE m.namespace = u.namespace AND m.job_id = u.job_id) AS last_ord
		FROM u
		JOIN jobs j ON j.namespace = u.namespace AND j.id = u.job_id
		LEFT JOIN job_steps s ON s.namespace = u.namespace AND s.job_id = u.job_id AND s.step_id = u.step_id AND NOT s.replaced
		WHERE u.calls = 1 AND ` + heldBy("u.worker", "", "u.delivery") + `
	), d AS (
		SELECT * FROM (SELECT c.*, ` + verdict + ` AS verdict, ` + attempt + ` AS attempt FROM c) c
		WHERE c.verdict IN (` + v(records.StepBegins) + `, ` + v(records.StepRuns) + `, ` + v(records.StepAnswersOutput) + `)
	), added AS (
		INSERT INTO job_steps (namespace, job_id, step_id, ord, kind, status, attempts, max_attempts, retry_backoff_seconds, input, delivery)
		SELECT d.namespace, d.job_id, d.step_id, d.last_ord + 1, 'step', 'running', 1, d.new_max, d.new_backoff,
			coalesce(d.input::jsonb, 'null'), d.job_delivery
		FROM d WHERE d.verdict = ` + v(records.StepBegins) + `
		RETURNING namespace, job_id
	), again AS (
		UPDATE job_steps s SET status = 'running', attempts = d.attempt, max_attempts = d.step_max,
			retry_backoff_seconds = coalesce(d.backoff, s.retry_backoff_seconds), input = coalesce(d.input::jsonb, 'null'),
			` + beginAttemptSQL("s", "d.job_delivery") + `,
			delivery = d.job_delivery, began_at = CASE WHEN s.delivery = d.job_delivery THEN s.began_at ELSE now() END,
			completed_at = NULL
		FROM d
		WHERE d.verdict = ` + v(records.StepRuns) + ` AND s.namespace = d.namespace AND s.job_id = d.job_id
		  AND s.step_id = d.step_id AND NOT s.replaced
		RETURNING s.namespace, s.job_id
	), acked AS (
		UPDATE jobs j SET ack_deadline = NULL
		FROM d WHERE d.unacked AND j.namespace = d.namespace AND j.id = d.job_id
	)
	SELECT d.ord, d.verdict = ` + v(records.StepAnswersOutput) + `, d.attempt, d.output FROM d
	WHERE d.verdict = ` + v(records.StepAnswersOutput) + `
	   OR (d.namespace, d.job_id) IN (SELECT namespace, job_id FROM added UNION ALL SELECT namespace, job_id FROM again)`
}()
