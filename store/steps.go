package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// stepJob is what a step call reads of its job, locked.
type stepJob struct {
	// ns is the job's namespace: every row the call reads or writes is
	// in it.
	ns              string
	status          string
	worker          *string
	delivery        *string
	cancelRequested bool
	unacked         bool
	attempt         int
	queue, typ      string
	requires        []string
	runAt           time.Time
}

// stepRow is what a step call reads of its step.
type stepRow struct {
	found          bool
	kind, status   string
	attempts, max  int
	backoff        float64
	sameInput      bool
	output         json.RawMessage
	delivery       *string
	wakeAt         *time.Time
	lastErrorActor *string
	// jobSteps is how many steps its job has, read for a step not found.
	jobSteps int
}

// now is the step as the engine's rules see it.
func (r stepRow) now(j stepJob) records.StepNow {
	n := records.StepNow{Found: r.found, JobSteps: r.jobSteps, Kind: r.kind, Status: r.status, Attempts: r.attempts,
		MaxAttempts: r.max, SameInput: r.sameInput, Current: r.current(j), Waking: r.wakeAt != nil}
	if r.lastErrorActor != nil {
		n.LastErrorBy = *r.lastErrorActor
	}
	return n
}

// lockStepJob reads and locks the job of a step call, through its key.
func lockStepJob(ctx context.Context, tx pgx.Tx, ns, id string) (stepJob, error) {
	j := stepJob{ns: ns}
	err := lockJob(ctx, tx, ns, id, `status, worker_id, delivery::text, cancel_requested, ack_deadline IS NOT NULL, attempt,
			queue, type, requires, run_at`,
		&j.status, &j.worker, &j.delivery, &j.cancelRequested, &j.unacked, &j.attempt,
		&j.queue, &j.typ, &j.requires, &j.runAt)
	return j, err
}

// caller is the one making call p.
func caller(p records.StepParams) records.Caller {
	return records.Caller{WorkerID: p.WorkerID, Admin: p.Admin, Delivery: p.Delivery}
}

// now is the job as the rule of holders (records.JobNow.Hold) sees it.
func (j stepJob) now() records.JobNow {
	n := records.JobNow{Status: j.status, Attempt: j.attempt, CancelRequested: j.cancelRequested}
	if j.worker != nil {
		n.Worker = *j.worker
	}
	if j.delivery != nil {
		n.Delivery = *j.delivery
	}
	return n
}

// stale reports whether the call names a delivery that is not the job's
// latest.
func (j stepJob) stale(p records.StepParams) bool {
	return j.now().Hold(caller(p)) == records.HoldStale
}

// current reports whether the step's attempt was begun by the job's latest
// delivery.
func (r stepRow) current(j stepJob) bool {
	return r.delivery != nil && j.delivery != nil && *r.delivery == *j.delivery
}

// readStepSQL reads a job's live step (job_steps_live), comparing its
// input with $4 as JSON values.
const readStepSQL = `
	SELECT kind, status, attempts, max_attempts, retry_backoff_seconds, input = coalesce($4::jsonb, 'null'),
		output, delivery::text, wake_at, errors -> -1 ->> 'worker_id'
	FROM job_steps WHERE namespace = $1 AND job_id = $2 AND step_id = $3 AND NOT replaced`

// readStep reads a job's step (through job_steps_live), comparing its input
// with input as JSON values.
func readStep(ctx context.Context, tx pgx.Tx, ns, jobID, stepID string, input json.RawMessage) (stepRow, error) {
	var r stepRow
	err := tx.QueryRow(ctx, readStepSQL, ns, jobID, stepID, nullJSON(input)).
		Scan(&r.kind, &r.status, &r.attempts, &r.max, &r.backoff, &r.sameInput, &r.output, &r.delivery, &r.wakeAt, &r.lastErrorActor)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	r.found = err == nil
	return r, err
}

// stepCount is how many steps a job has: its highest order
// (job_steps_order).
func stepCount(ctx context.Context, tx pgx.Tx, ns, jobID string) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT coalesce(max(ord), 0) FROM job_steps WHERE namespace = $1 AND job_id = $2`, ns, jobID).Scan(&n)
	return n, err
}

// nextStepOrd is the order of a job's next new step; StepLimitError when it
// has MaxSteps.
func nextStepOrd(ctx context.Context, tx pgx.Tx, ns, jobID string) (int, error) {
	n, err := stepCount(ctx, tx, ns, jobID)
	if err != nil {
		return 0, err
	}
	if n >= records.MaxSteps {
		return 0, &records.StepLimitError{}
	}
	return n + 1, nil
}

// stepNamespace is the namespace of step call p: its own, else s's.
func (s *Store) stepNamespace(p records.StepParams) string {
	if p.Namespace != "" {
		return p.Namespace
	}
	return s.ns
}

// stepTx runs a step call in a transaction on its job, locked (body), in
// the call's namespace (stepNamespace).
// When body says so, the job ends cancelled — its holder now knows, as
// with JOB.UPDATE — and the call answers ErrJobCancelled.
func (s *Store) stepTx(ctx context.Context, p records.StepParams,
	body func(tx pgx.Tx, j stepJob, fx *records.Effects) (cancel bool, err error)) (records.Effects, error) {
	var fx records.Effects
	if !storable(p.JobID, p.StepID, p.WorkerID) {
		return fx, records.ErrNotFound
	}
	cancelled := false
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		fx = records.Effects{}
		j, err := lockStepJob(ctx, tx, s.stepNamespace(p), p.JobID)
		if err != nil {
			return err
		}
		if cancelled, err = body(tx, j, &fx); err != nil || !cancelled {
			return err
		}
		fx = records.Effects{}
		fx.Ended(p.JobID)
		fx.Moved = []string{p.JobID}
		fx.Freed.AddIn(j.ns, j.queue, j.typ, 1)
		return finish(ctx, tx, j.ns, p.JobID, records.StatusCancelled, nil)
	})
	if cancelled && err == nil {
		return fx, records.ErrJobCancelled
	}
	if err != nil {
		return records.Effects{}, interpretError(err)
	}
	return fx, nil
}

// acknowledge makes the first call of a delivery acknowledge it.
func acknowledge(ctx context.Context, tx pgx.Tx, j stepJob, id string) error {
	if !j.unacked || j.status != records.StatusRunning {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE jobs SET ack_deadline = NULL WHERE namespace = $1 AND id = $2`, j.ns, id)
	return err
}

// stepCall runs one wait call (STEP.WAIT) in a transaction: run gets the
// job locked and let go on by the rules (records.Rules.StepWait). pre,
// when set, may answer the call before them (a call sent again after it
// moved the job out of running).
func (s *Store) stepCall(ctx context.Context, p records.StepParams,
	pre func(tx pgx.Tx, j stepJob) (bool, error), run func(tx pgx.Tx, j stepJob, fx *records.Effects) error) (records.Effects, error) {
	if s.rules == nil {
		return records.Effects{}, ErrNoRules
	}
	return s.stepTx(ctx, p, func(tx pgx.Tx, j stepJob, fx *records.Effects) (bool, error) {
		if pre != nil && !j.stale(p) {
			if answered, err := pre(tx, j); answered || err != nil {
				return false, err
			}
		}
		switch d, err := s.rules.StepWait(j.now(), records.StepNow{}, p); {
		case d.Verdict == records.StepCancels:
			return true, nil
		case err != nil:
			return false, err
		}
		if err := acknowledge(ctx, tx, j, p.JobID); err != nil {
			return false, err
		}
		return false, run(tx, j, fx)
	})
}

// decidedStep is a step call as the rules decided it: the step as read,
// the decision, and its error (a refusal, or the failure of a job whose
// step is past its attempts).
type decidedStep struct {
	row stepRow
	records.StepDecision
	err error
}

// ruledStepCall runs a step call the engine's rules decide
// (Config.Rules): it reads the step (comparing its input with input), asks
// decide, and applies the decision (apply) unless the call is refused or
// the job ends cancelled. A decision's error that comes with changes (a
// step past its attempts fails the job) is answered once they commit.
func (s *Store) ruledStepCall(ctx context.Context, p records.StepParams, input json.RawMessage,
	decide func(records.JobNow, records.StepNow) (records.StepDecision, error),
	apply func(tx pgx.Tx, j stepJob, d decidedStep, fx *records.Effects) error) (records.Effects, error) {
	if s.rules == nil {
		return records.Effects{}, ErrNoRules
	}
	var answer error
	fx, err := s.stepTx(ctx, p, func(tx pgx.Tx, j stepJob, fx *records.Effects) (bool, error) {
		answer = nil
		r, err := readStep(ctx, tx, j.ns, p.JobID, p.StepID, input)
		if err == nil && !r.found {
			r.jobSteps, err = stepCount(ctx, tx, j.ns, p.JobID)
		}
		if err != nil {
			return false, err
		}
		d := decidedStep{row: r}
		d.StepDecision, d.err = decide(j.now(), r.now(j))
		switch d.Verdict {
		case records.StepCancels:
			return true, nil
		case records.StepRefused:
			return false, d.err
		}
		if err := acknowledge(ctx, tx, j, p.JobID); err != nil {
			return false, err
		}
		answer = d.err
		return false, apply(tx, j, d, fx)
	})
	if err == nil {
		err = answer
	}
	return fx, err
}

// StepBegin begins a step, or answers the output it completed with before
// for an equal input, as the rules decide (records.Rules.StepBegin). Past
// its attempts the job fails (StepAttemptsError, with the failure's
// effects).
func (s *Store) StepBegin(ctx context.Context, p records.StepBeginParams) (records.StepBeginResult, records.Effects, error) {
	var res records.StepBeginResult
	decide := func(j records.JobNow, r records.StepNow) (records.StepDecision, error) {
		return s.rules.StepBegin(j, r, p)
	}
	fx, err := s.ruledStepCall(ctx, p.StepParams, p.Input, decide, func(tx pgx.Tx, j stepJob, d decidedStep, fx *records.Effects) error {
		res = records.StepBeginResult{}
		switch d.Verdict {
		case records.StepAnswersOutput:
			res.Output = d.row.output
			if len(res.Output) == 0 {
				res.Output = json.RawMessage("null")
			}
			return nil
		case records.StepExhausted:
			if _, err := tx.Exec(ctx, recordErrorSQL, p.JobID, d.err.Error(), j.ns); err != nil {
				return err
			}
			fx.Ended(p.JobID)
			fx.Moved = []string{p.JobID}
			fx.Freed.AddIn(j.ns, j.queue, j.typ, 1)
			return finish(ctx, tx, j.ns, p.JobID, records.StatusFailed, nil)
		case records.StepBegins:
			res = records.StepBeginResult{Execute: true, Attempt: 1}
			_, err := tx.Exec(ctx, `
				INSERT INTO job_steps (namespace, job_id, step_id, ord, kind, status, attempts, max_attempts, retry_backoff_seconds, input, delivery)
				SELECT j.namespace, j.id, $3, $4, 'step', 'running', 1, coalesce($5, j.max_attempts), coalesce($6, j.retry_backoff_seconds),
					coalesce($7::jsonb, 'null'), j.delivery
				FROM jobs j WHERE j.namespace = $1 AND j.id = $2`,
				j.ns, p.JobID, p.StepID, d.row.jobSteps+1, p.MaxAttempts, p.BackoffSeconds, nullJSON(p.Input))
			return err
		}
		res = records.StepBeginResult{Execute: true, Attempt: d.Attempt}
		_, err := tx.Exec(ctx, `
			UPDATE job_steps s SET status = 'running', attempts = $4, max_attempts = $5,
				retry_backoff_seconds = coalesce($6, s.retry_backoff_seconds), input = coalesce($7::jsonb, 'null'),
				`+beginAttemptSQL("s", "$8::uuid")+`,
				delivery = $8::uuid, began_at = CASE WHEN s.delivery = $8::uuid THEN s.began_at ELSE now() END,
				completed_at = NULL
			WHERE s.namespace = $1 AND s.job_id = $2 AND s.step_id = $3 AND NOT s.replaced`,
			j.ns, p.JobID, p.StepID, d.Attempt, d.MaxAttempts, p.BackoffSeconds, nullJSON(p.Input), j.delivery)
		return err
	})
	if err != nil {
		res = records.StepBeginResult{}
	}
	return res, fx, err
}

// StepComplete keeps a step's output; completing it again succeeds and
// changes nothing. changed reports whether this call completed it.
func (s *Store) StepComplete(ctx context.Context, p records.StepParams, output json.RawMessage) (changed bool, err error) {
	_, changed, err = s.stepComplete(ctx, p, output)
	return changed, err
}

// stepComplete is StepComplete with its effects: a job whose cancellation
// was asked ends cancelled.
func (s *Store) stepComplete(ctx context.Context, p records.StepParams, output json.RawMessage) (fx records.Effects, changed bool, err error) {
	decide := func(j records.JobNow, r records.StepNow) (records.StepDecision, error) {
		return s.rules.StepComplete(j, r, p)
	}
	fx, err = s.ruledStepCall(ctx, p, nil, decide, func(tx pgx.Tx, j stepJob, d decidedStep, _ *records.Effects) error {
		changed = d.Verdict == records.StepCompletes
		if !changed {
			return nil
		}
		_, err := tx.Exec(ctx, `
			UPDATE job_steps SET status = 'completed', output = coalesce($4::jsonb, 'null'), completed_at = now()
			WHERE namespace = $1 AND job_id = $2 AND step_id = $3 AND NOT replaced`, j.ns, p.JobID, p.StepID, nullJSON(output))
		return err
	})
	return fx, changed && err == nil, err
}

// StepFail ends the job's current attempt with its open step's failure,
// as the rules decide (records.Rules.StepFail). The retry policy decides
// with the step's attempts and backoff (RetryAfter replaces the backoff):
// the job waits as retrying, its completed steps kept, or fails, its error
// history naming the step. Sent again by the same delivery, it answers as
// the first time. changed reports whether this call failed the step.
func (s *Store) StepFail(ctx context.Context, p records.StepFailParams) (res records.StepFailResult, changed bool, fx records.Effects, err error) {
	decide := func(j records.JobNow, r records.StepNow) (records.StepDecision, error) {
		return s.rules.StepFail(j, r, p.StepParams)
	}
	fx, err = s.ruledStepCall(ctx, p.StepParams, nil, decide, func(tx pgx.Tx, j stepJob, d decidedStep, fx *records.Effects) error {
		res, changed = records.StepFailResult{}, false
		if d.Verdict == records.StepRepeated {
			if d.Retry {
				res = records.StepFailResult{Retry: true, RetryAt: j.runAt}
			}
			return nil
		}
		changed = true
		return s.failStep(ctx, tx, p, j, d.row, &res, fx)
	})
	return res, changed && err == nil, fx, err
}

// failStep applies a step's failure: the step records it, the job's
// attempt ends, retried or failed as the retry policy decides.
func (s *Store) failStep(ctx context.Context, tx pgx.Tx, p records.StepFailParams, j stepJob, r stepRow,
	res *records.StepFailResult, fx *records.Effects) error {
	retry, delay, err := s.nextRetry(records.Failure{Attempt: r.attempts, MaxAttempts: r.max,
		BackoffSeconds: r.backoff, Retryable: !p.NonRetryable})
	if err != nil {
		return err
	}
	if retry && p.RetryAfter != nil {
		delay = *p.RetryAfter
	}
	if _, err := tx.Exec(ctx, `
		UPDATE job_steps s SET status = 'failed', errors = s.errors || jsonb_build_array(jsonb_build_object(
			'attempt', s.attempts, 'worker_id', j.worker_id, 'error', $4::text, 'at', now()))
		FROM jobs j WHERE j.namespace = s.namespace AND j.id = s.job_id
		  AND s.namespace = $1 AND s.job_id = $2 AND s.step_id = $3 AND NOT s.replaced`,
		j.ns, p.JobID, p.StepID, p.Message); err != nil {
		return err
	}
	// The failure counts against the step's attempts, not the job's.
	if _, err := tx.Exec(ctx, `UPDATE jobs SET step_failures = step_failures + 1 WHERE namespace = $1 AND id = $2`,
		j.ns, p.JobID); err != nil {
		return err
	}
	var runAt time.Time
	message := "step " + p.StepID + ": " + p.Message
	if err := tx.QueryRow(ctx, failAttemptSQL, p.JobID, message, retry, delay, j.ns).Scan(&runAt); err != nil {
		return err
	}
	fx.Moved = []string{p.JobID}
	fx.Freed.AddIn(j.ns, j.queue, j.typ, 1)
	if retry {
		*res = records.StepFailResult{Retry: true, RetryAt: runAt}
		fx.Ready = []records.ReadyNote{{Queue: j.queue, N: 1, Requires: j.requires, At: dueMillis(runAt)}}
		return nil
	}
	fx.Ended(p.JobID)
	return finish(ctx, tx, j.ns, p.JobID, records.StatusFailed, nil)
}

// StepSleep puts the job to sleep until a wake time it records, as the
// rules decide (records.Rules.StepSleep): scheduled, its attempt given
// back (not counted among snoozes). Sent again by the same delivery it
// answers the same wake time; in a later delivery the sleep is over and
// the worker carries on. changed reports whether this call put the job to
// sleep.
func (s *Store) StepSleep(ctx context.Context, p records.StepSleepParams) (res records.StepSleepResult, changed bool, fx records.Effects, err error) {
	decide := func(j records.JobNow, r records.StepNow) (records.StepDecision, error) {
		return s.rules.StepSleep(j, r, p.StepParams)
	}
	fx, err = s.ruledStepCall(ctx, p.StepParams, nil, decide, func(tx pgx.Tx, j stepJob, d decidedStep, fx *records.Effects) error {
		res, changed = records.StepSleepResult{}, false
		switch d.Verdict {
		case records.StepRepeated:
			res = records.StepSleepResult{Sleeping: true, WakeAt: *d.row.wakeAt}
			return nil
		case records.StepCarriesOn:
			return nil
		case records.StepWakes:
			// The delivery after the sleep carries on.
			_, err := tx.Exec(ctx, `
				UPDATE job_steps SET status = 'completed', completed_at = now()
				WHERE namespace = $1 AND job_id = $2 AND step_id = $3 AND NOT replaced`, j.ns, p.JobID, p.StepID)
			return err
		}
		changed = true
		return sleep(ctx, tx, p, j, d.row.jobSteps+1, &res, fx)
	})
	return res, changed && err == nil, fx, err
}

// sleep records a new sleep, the job's step ord, and puts the job to sleep
// until its wake time.
func sleep(ctx context.Context, tx pgx.Tx, p records.StepSleepParams, j stepJob, ord int,
	res *records.StepSleepResult, fx *records.Effects) error {
	var wake time.Time
	if err := tx.QueryRow(ctx, `
		INSERT INTO job_steps (namespace, job_id, step_id, ord, kind, status, max_attempts, retry_backoff_seconds, delivery, wake_at)
		SELECT j.namespace, j.id, $3, $4, 'sleep', 'sleeping', j.max_attempts, j.retry_backoff_seconds, j.delivery, now() + $5::interval
		FROM jobs j WHERE j.namespace = $1 AND j.id = $2
		RETURNING wake_at`, j.ns, p.JobID, p.StepID, ord, p.For).Scan(&wake); err != nil {
		return err
	}
	// Like a snooze, the attempt is given back and the delivery token
	// stays until the next delivery, so a re-sent call is recognised.
	if _, err := tx.Exec(ctx, `
		UPDATE jobs j SET status = 'scheduled', worker_id = NULL, attempt = greatest(j.attempt - 1, 0),
			run_at = $3, `+clearDelivery+`, updated_at = now()
		WHERE j.namespace = $1 AND j.id = $2`, j.ns, p.JobID, wake); err != nil {
		return err
	}
	*res = records.StepSleepResult{Sleeping: true, WakeAt: wake}
	fx.Moved = []string{p.JobID}
	fx.Freed.AddIn(j.ns, j.queue, j.typ, 1)
	fx.Ready = []records.ReadyNote{{Queue: j.queue, N: 1, Requires: j.requires, At: dueMillis(wake)}}
	return nil
}

// jobStepsSQL reads a page of a job's steps, rows $2 on ($3 of them), by
// their order (job_steps_order), replaced ones too.
var jobStepsSQL = `
		SELECT s.step_id, s.kind,
			CASE WHEN s.status = 'running' AND (j.status <> 'running' OR j.delivery IS DISTINCT FROM s.delivery)
				  OR s.status = 'awaiting' AND j.status <> 'awaiting'
				THEN 'interrupted' ELSE s.status END,
			s.attempts, s.input, s.output, s.errors, s.began_at, s.completed_at,
			CASE WHEN s.kind <> 'wait' THEN s.wake_at END, CASE WHEN s.kind = 'wait' THEN s.wake_at END,
			s.wait_signal, s.wait_jobs,
			` + stepHistorySQL("s", `CASE WHEN j.status <> 'running' OR j.delivery IS DISTINCT FROM s.delivery
				THEN 'interrupted' END`) + `
		FROM job_steps_all s JOIN jobs_all j ON j.namespace = s.namespace AND j.id = s.job_id
		WHERE s.namespace = $1 AND s.job_id = $2 AND s.ord > $3
		ORDER BY s.ord LIMIT $4`

// JobSteps reads a page of a job's steps (job_steps_order). A step still
// running when its delivery ended reads as interrupted. ErrNotHolder when
// Holder does not hold the job.
func (s *Store) JobSteps(ctx context.Context, p records.JobStepsParams) ([]records.Step, error) {
	if !storable(p.JobID, p.Holder) {
		return nil, records.ErrNotFound
	}
	var worker *string
	if err := s.Pool.QueryRow(ctx, `SELECT worker_id FROM jobs_all WHERE namespace = $1 AND id = $2 LIMIT 1`, s.ns, p.JobID).Scan(&worker); err != nil {
		return nil, interpretError(err)
	}
	if p.Holder != "" && (worker == nil || *worker != p.Holder) {
		return nil, records.ErrNotHolder
	}
	rows, err := s.Pool.Query(ctx, jobStepsSQL, s.ns, p.JobID, p.After, p.Limit)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []records.Step
	for rows.Next() {
		var st records.Step
		if err := rows.Scan(&st.StepID, &st.Kind, &st.Status, &st.Attempts, &st.Input, &st.Output, &st.Errors,
			&st.BeganAt, &st.CompletedAt, &st.WakeAt, &st.Deadline, &st.Signal, &st.Jobs, &st.History); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, st)
	}
	return out, interpretError(rows.Err())
}

// jobRetryStepsSQL gives a retried job's unfinished steps their attempts
// back (job_steps_order), their last attempts' entries written; its
// completed steps are kept.
var jobRetryStepsSQL = `
	UPDATE job_steps s SET history = ` + stepHistorySQL("s", `'interrupted'`) + `, attempt_ended = true, attempts = 0
	WHERE s.namespace = $1 AND s.job_id = $2 AND s.status NOT IN ('completed', 'replaced') AND s.attempts > 0`

// replaceStepsFrom forgets the job's step from and every step begun after
// it (job_steps_live, then job_steps_order): their rows stay, replaced,
// each current attempt's entry written in its history. StepNotBegunError
// when the job has no step from.
func replaceStepsFrom(ctx context.Context, tx pgx.Tx, ns, jobID, from string) error {
	tag, err := tx.Exec(ctx, `
		UPDATE job_steps s SET status = 'replaced', history = `+stepHistorySQL("s", `'interrupted'`)+`,
			attempt_ended = true
		FROM (SELECT ord FROM job_steps WHERE namespace = $1 AND job_id = $2 AND step_id = $3 AND NOT replaced) f
		WHERE s.namespace = $1 AND s.job_id = $2 AND s.ord >= f.ord AND NOT s.replaced`, ns, jobID, from)
	if err == nil && tag.RowsAffected() == 0 {
		return &records.StepNotBegunError{StepID: from}
	}
	return err
}
