package store

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// StepCompletion is one STEP.COMPLETE of a group; Next, when set, is the
// step it begins once this one is complete (STEP.COMPLETE … NEXT).
type StepCompletion struct {
	records.StepParams
	Output json.RawMessage
	Next   *records.StepBeginParams
}

// StepCompleteResult is one completion's outcome; Changed when it
// completed the step; Next the begin of the next step, when the call
// named one and completed.
type StepCompleteResult struct {
	Changed bool
	Err     error
	Next    StepBeginOutcome
}

// StepsComplete applies step completions sent by different clients,
// gathered into one group: one statement over arrays completes every step
// running for its job's delivery, the job running for that delivery, held
// by the caller and not asked to cancel — the usual case — so the group
// shares one WAL flush. Each other call (a re-send, a refusal, a step not
// begun, a sleep) takes the locked path (StepComplete) on its own.
//
// A completion that names a next step begins it in the same transaction
// when the grouped statement completed its step: the two share the
// commit, and the jobs locked by the completions need no second lock. Its
// next step is begun after its completion otherwise, on the locked path.
func (s *Store) StepsComplete(ctx context.Context, calls []StepCompletion) ([]StepCompleteResult, records.Effects) {
	var applied []bool
	var nexts []records.StepBeginParams
	var nextOf []int // the call of each of nexts
	var served map[int]records.StepBeginResult
	var err error
	if !slices.ContainsFunc(calls, func(c StepCompletion) bool { return c.Next != nil }) {
		applied, err = s.completeStepsGrouped(ctx, s.Pool, calls)
	} else {
		err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
			var err error
			if applied, err = s.completeStepsGrouped(ctx, tx, calls); err != nil {
				return err
			}
			for i, c := range calls {
				if applied[i] && c.Next != nil {
					nexts, nextOf = append(nexts, *c.Next), append(nextOf, i)
				}
			}
			served, err = s.beginStepsGrouped(ctx, tx, false, nexts)
			return err
		})
		if err != nil {
			applied, served, nexts, nextOf = nil, nil, nil, nil
		}
	}
	changed, errs, fx := lockedRest(calls, err, func(i int) (bool, bool) { return true, i < len(applied) && applied[i] },
		func(c StepCompletion) (bool, records.Effects, error) {
			fx, changed, err := s.stepComplete(ctx, c.StepParams, c.Output)
			return changed, fx, err
		})
	out := make([]StepCompleteResult, len(calls))
	for i := range out {
		out[i] = StepCompleteResult{Changed: changed[i], Err: errs[i]}
	}
	// The next steps: those begun with their completions, then the
	// begins of the others whose completions the locked path accepted.
	begun, bfx := s.beginRest(ctx, nexts, served, nil)
	fx.Merge(bfx)
	for k, i := range nextOf {
		out[i].Next = begun[k]
	}
	var rest []records.StepBeginParams
	var restOf []int
	for i, c := range calls {
		if c.Next != nil && !(i < len(applied) && applied[i]) && errs[i] == nil {
			rest, restOf = append(rest, *c.Next), append(restOf, i)
		}
	}
	if len(rest) > 0 {
		begun, bfx := s.beginRest(ctx, rest, nil, nil)
		fx.Merge(bfx)
		for k, i := range restOf {
			out[i].Next = begun[k]
		}
	}
	return out, fx
}

// completeStepsGrouped is the grouped statement of StepsComplete, on q:
// applied[i] when call i completed its step.
func (s *Store) completeStepsGrouped(ctx context.Context, q batchSender, calls []StepCompletion) ([]bool, error) {
	applied := make([]bool, len(calls))
	var sc stepCalls
	var outputs []*string
	for i, c := range calls {
		if sc.add(s.stepNamespace(c.StepParams), c.StepParams, i) {
			outputs = append(outputs, nullIfEmpty(string(c.Output)))
		}
	}
	if len(sc.ords) == 0 {
		return applied, nil
	}
	var done []int32
	err := hotQueryOn(ctx, q, false, nil, func(rows pgx.Rows) error {
		var ord int32
		err := rows.Scan(&ord)
		done = append(done, ord)
		return err
	}, completeStepsGroupedSQL, sc.namespaces, sc.jobIDs, sc.stepIDs, sc.workers, sc.deliveries, outputs, sc.ords)
	if err != nil {
		return applied, err
	}
	for _, ord := range done {
		applied[ord] = true
	}
	return applied, nil
}

// completeStepsGroupedSQL completes a group's steps where the rules
// decide they complete (stepCompletesSQL). The jobs are locked
// through their key, in id order, as the locked path locks each; a step
// named twice is completed by its first call, the other finding it done.
var completeStepsGroupedSQL = `
	WITH u AS (
		SELECT DISTINCT ON (namespace, job_id, step_id) *
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[])
			AS u(namespace, job_id, step_id, worker, delivery, output, ord)
		ORDER BY namespace, job_id, step_id, ord
	), j AS (
		SELECT j.namespace, j.id, j.status, j.cancel_requested, j.worker_id, j.delivery
		FROM unnest($1::text[], $2::text[]) AS k(namespace, id) JOIN jobs j ON j.namespace = k.namespace AND j.id = k.id
		WHERE j.ack_deadline IS NULL
		ORDER BY j.namespace, j.id FOR UPDATE OF j
	)
	UPDATE job_steps s SET status = 'completed', output = coalesce(u.output::jsonb, 'null'), completed_at = now()
	FROM u, j
	WHERE j.namespace = u.namespace AND j.id = u.job_id
	  AND s.namespace = u.namespace AND s.job_id = u.job_id AND s.step_id = u.step_id AND NOT s.replaced
	  AND ` + heldBy("u.worker", "", "u.delivery") + `
	  AND ` + stepCompletesSQL("s", "s.delivery = j.delivery") + `
	RETURNING u.ord`

// stepCompletesSQL is the rules' decision of a STEP.COMPLETE held by its
// caller (records.Rules.StepComplete, engine.DecideStepComplete) in SQL:
// it holds of the step row s exactly where they decide StepCompletes;
// current is the SQL expression of whether the job's delivery began it.
// steps_rule_test.go runs every case through both.
func stepCompletesSQL(s, current string) string {
	return s + `.kind = 'step' AND ` + s + `.status = 'running' AND ` + current
}
