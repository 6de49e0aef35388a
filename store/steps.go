package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// Step kinds and the statuses a step row stores; JOB.STEPS shows a running
// step whose delivery ended as StepInterrupted.
const (
	StepKindStep    = "step"
	StepKindSleep   = "sleep"
	StepRunning     = "running"
	StepCompleted   = "completed"
	StepFailed      = "failed"
	StepSleeping    = "sleeping"
	StepInterrupted = "interrupted"
)

// stepJob is what a step call reads of its job, locked.
type stepJob struct {
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
}

// errCancelNow is a holder's call finding its job's cancellation asked:
// the job ends cancelled, and the holder is told.
var errCancelNow = errors.New("cancel now")

// lockStepJob reads and locks the job of a step call, through its key.
func lockStepJob(ctx context.Context, tx pgx.Tx, id string) (stepJob, error) {
	var j stepJob
	err := tx.QueryRow(ctx, `
		SELECT status, worker_id, delivery::text, cancel_requested, ack_deadline IS NOT NULL, attempt,
			queue, type, requires, run_at
		FROM jobs WHERE id = $1 FOR UPDATE`, id).
		Scan(&j.status, &j.worker, &j.delivery, &j.cancelRequested, &j.unacked, &j.attempt,
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

// hold checks what JOB.UPDATE checks: the job runs for this delivery, at
// this worker (or the caller is an admin), and is not being cancelled.
func (j stepJob) hold(p records.StepParams) error {
	now := j.now()
	switch now.Hold(caller(p)) {
	case records.HoldStale:
		return &records.StaleDeliveryError{Attempt: j.attempt}
	case records.HoldCancelled:
		return records.ErrJobCancelled
	case records.HoldNotRunning:
		return &records.StateError{Status: "not running"}
	case records.HoldOtherWorker:
		return &records.NotOwnerError{Owner: now.Worker}
	case records.HoldCancelAsked:
		return errCancelNow
	}
	return nil
}

// runningFor says how a call ending step id finds it: completed already,
// or running for the job's latest delivery (false, nil); any other step —
// not begun, begun by an earlier delivery, a sleep — refuses the call.
func (r stepRow) runningFor(j stepJob, id string) (completed bool, err error) {
	switch {
	case !r.found:
		return false, &records.StepNotBegunError{StepID: id}
	case r.kind != StepKindStep:
		return false, &records.StepKindError{StepID: id, Kind: r.kind}
	case r.status == StepCompleted:
		return true, nil
	case r.status != StepRunning || !r.current(j):
		return false, &records.StepNotBegunError{StepID: id}
	}
	return false, nil
}

// current reports whether the step's attempt was begun by the job's latest
// delivery.
func (r stepRow) current(j stepJob) bool {
	return r.delivery != nil && j.delivery != nil && *r.delivery == *j.delivery
}

// readStep reads a job's step (through job_steps' key), comparing its input
// with input as JSON values.
func readStep(ctx context.Context, tx pgx.Tx, jobID, stepID string, input json.RawMessage) (stepRow, error) {
	var r stepRow
	err := tx.QueryRow(ctx, `
		SELECT kind, status, attempts, max_attempts, retry_backoff_seconds, input = coalesce($3::jsonb, 'null'),
			output, delivery::text, wake_at, errors -> -1 ->> 'worker_id'
		FROM job_steps WHERE job_id = $1 AND step_id = $2`, jobID, stepID, nullJSON(input)).
		Scan(&r.kind, &r.status, &r.attempts, &r.max, &r.backoff, &r.sameInput, &r.output, &r.delivery, &r.wakeAt, &r.lastErrorActor)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	r.found = err == nil
	return r, err
}

// nextStepOrd is the order of a job's next new step; StepLimitError when it
// has MaxSteps. The count is the highest order (job_steps_order).
func nextStepOrd(ctx context.Context, tx pgx.Tx, jobID string) (int, error) {
	var n int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(ord), 0) FROM job_steps WHERE job_id = $1`, jobID).Scan(&n); err != nil {
		return 0, err
	}
	if n >= records.MaxSteps {
		return 0, &records.StepLimitError{}
	}
	return n + 1, nil
}

// stepCall runs one step call in a transaction: run gets the job locked
// and checked for the call. A job whose cancellation was asked ends
// cancelled (its holder now knows), as with JOB.UPDATE. pre, when set,
// may answer the call before the checks (a call sent again after it moved
// the job out of running).
func (s *Store) stepCall(ctx context.Context, p records.StepParams,
	pre func(tx pgx.Tx, j stepJob) (bool, error), run func(tx pgx.Tx, j stepJob, fx *records.Effects) error) (records.Effects, error) {
	var fx records.Effects
	if !storable(p.JobID, p.StepID, p.WorkerID) {
		return fx, records.ErrNotFound
	}
	cancelled := false
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		fx, cancelled = records.Effects{}, false
		j, err := lockStepJob(ctx, tx, p.JobID)
		if err != nil {
			return err
		}
		if pre != nil && !j.stale(p) {
			if answered, err := pre(tx, j); answered || err != nil {
				return err
			}
		}
		switch err := j.hold(p); {
		case errors.Is(err, errCancelNow):
			cancelled = true
			fx.Ended(p.JobID)
			fx.Moved = []string{p.JobID}
			fx.Freed.Add(j.queue, j.typ, 1)
			return finish(ctx, tx, p.JobID, records.StatusCancelled, nil)
		case err != nil:
			return err
		}
		if j.unacked {
			// The first call of a delivery acknowledges it.
			if _, err := tx.Exec(ctx, `UPDATE jobs SET ack_deadline = NULL WHERE id = $1`, p.JobID); err != nil {
				return err
			}
		}
		return run(tx, j, &fx)
	})
	if cancelled && err == nil {
		return fx, records.ErrJobCancelled
	}
	if err != nil {
		return records.Effects{}, interpretError(err)
	}
	return fx, nil
}

// StepBegin begins a step, or answers the output it completed with before
// for an equal input. A step begun again after its attempt failed, or after
// the delivery that began it was lost, counts another attempt; past its
// attempts the job fails (StepAttemptsError, with the failure's effects).
func (s *Store) StepBegin(ctx context.Context, p records.StepBeginParams) (records.StepBeginResult, records.Effects, error) {
	var res records.StepBeginResult
	var failed *records.StepAttemptsError
	fx, err := s.stepCall(ctx, p.StepParams, nil, func(tx pgx.Tx, j stepJob, fx *records.Effects) error {
		res, failed = records.StepBeginResult{}, nil
		r, err := readStep(ctx, tx, p.JobID, p.StepID, p.Input)
		if err != nil {
			return err
		}
		if !r.found {
			ord, err := nextStepOrd(ctx, tx, p.JobID)
			if err != nil {
				return err
			}
			res = records.StepBeginResult{Execute: true, Attempt: 1}
			_, err = tx.Exec(ctx, `
				INSERT INTO job_steps (job_id, step_id, ord, kind, status, attempts, max_attempts, retry_backoff_seconds, input, delivery)
				SELECT j.id, $2, $3, 'step', 'running', 1, coalesce($4, j.max_attempts), coalesce($5, j.retry_backoff_seconds),
					coalesce($6::jsonb, 'null'), j.delivery
				FROM jobs j WHERE j.id = $1`,
				p.JobID, p.StepID, ord, p.MaxAttempts, p.BackoffSeconds, nullJSON(p.Input))
			return err
		}
		if r.kind != StepKindStep {
			return &records.StepKindError{StepID: p.StepID, Kind: r.kind}
		}
		maxAttempts := r.max
		if p.MaxAttempts != nil {
			maxAttempts = *p.MaxAttempts
		}
		attempts := r.attempts + 1
		switch {
		case r.status == StepCompleted && r.sameInput:
			res = records.StepBeginResult{Output: r.output}
			if len(res.Output) == 0 {
				res.Output = json.RawMessage("null")
			}
			return nil
		case r.status == StepRunning && r.current(j):
			// The same BEGIN again, by the delivery that began it.
			attempts = r.attempts
		case r.status == StepCompleted:
			attempts = 1 // another input: a new run
		case r.attempts >= maxAttempts:
			failed = &records.StepAttemptsError{StepID: p.StepID, Attempts: r.attempts}
			if _, err := tx.Exec(ctx, recordErrorSQL, p.JobID, failed.Error()); err != nil {
				return err
			}
			fx.Ended(p.JobID)
			fx.Moved = []string{p.JobID}
			fx.Freed.Add(j.queue, j.typ, 1)
			return finish(ctx, tx, p.JobID, records.StatusFailed, nil)
		}
		res = records.StepBeginResult{Execute: true, Attempt: attempts}
		_, err = tx.Exec(ctx, `
			UPDATE job_steps s SET status = 'running', attempts = $3, max_attempts = $4,
				retry_backoff_seconds = coalesce($5, s.retry_backoff_seconds), input = coalesce($6::jsonb, 'null'),
				delivery = $7::uuid, began_at = CASE WHEN s.delivery = $7::uuid THEN s.began_at ELSE now() END,
				completed_at = NULL
			WHERE s.job_id = $1 AND s.step_id = $2`,
			p.JobID, p.StepID, attempts, maxAttempts, p.BackoffSeconds, nullJSON(p.Input), j.delivery)
		return err
	})
	if err == nil && failed != nil {
		err = failed
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
	fx, err = s.stepCall(ctx, p, nil, func(tx pgx.Tx, j stepJob, _ *records.Effects) error {
		changed = false
		r, err := readStep(ctx, tx, p.JobID, p.StepID, nil)
		if err != nil {
			return err
		}
		if completed, err := r.runningFor(j, p.StepID); completed || err != nil {
			return err
		}
		changed = true
		_, err = tx.Exec(ctx, `
			UPDATE job_steps SET status = 'completed', output = coalesce($3::jsonb, 'null'), completed_at = now()
			WHERE job_id = $1 AND step_id = $2`, p.JobID, p.StepID, nullJSON(output))
		return err
	})
	return fx, changed, err
}

// StepFail ends the job's current attempt with its open step's failure.
// The retry policy decides with the step's attempts and backoff
// (RetryAfter replaces the backoff): the job waits as retrying, its
// completed steps kept, or fails, its error history naming the step. Sent
// again by the same delivery, it answers as the first time. changed
// reports whether this call failed the step.
func (s *Store) StepFail(ctx context.Context, p records.StepFailParams) (res records.StepFailResult, changed bool, fx records.Effects, err error) {
	again := func(tx pgx.Tx, j stepJob) (bool, error) {
		r, err := readStep(ctx, tx, p.JobID, p.StepID, nil)
		if err != nil || !r.found || r.kind != StepKindStep || r.status != StepFailed || !r.current(j) ||
			!p.Admin && (r.lastErrorActor == nil || *r.lastErrorActor != p.WorkerID) {
			return false, err
		}
		switch j.status {
		case records.StatusRetrying:
			res = records.StepFailResult{Retry: true, RetryAt: j.runAt}
			return true, nil
		case records.StatusFailed:
			res = records.StepFailResult{}
			return true, nil
		}
		return false, nil
	}
	fx, err = s.stepCall(ctx, p.StepParams, again, func(tx pgx.Tx, j stepJob, fx *records.Effects) error {
		res, changed = records.StepFailResult{}, false
		r, err := readStep(ctx, tx, p.JobID, p.StepID, nil)
		if err != nil {
			return err
		}
		if completed, err := r.runningFor(j, p.StepID); completed || err != nil {
			return cmp.Or(err, error(&records.StepNotBegunError{StepID: p.StepID})) // a completed step fails no more
		}
		retry, delay, err := s.nextRetry(records.Failure{Attempt: r.attempts, MaxAttempts: r.max,
			BackoffSeconds: r.backoff, Retryable: !p.NonRetryable})
		if err != nil {
			return err
		}
		if retry && p.RetryAfter != nil {
			delay = *p.RetryAfter
		}
		changed = true
		if _, err := tx.Exec(ctx, `
			UPDATE job_steps s SET status = 'failed', errors = s.errors || jsonb_build_array(jsonb_build_object(
				'attempt', s.attempts, 'worker_id', j.worker_id, 'error', $3::text, 'at', now()))
			FROM jobs j WHERE j.id = s.job_id AND s.job_id = $1 AND s.step_id = $2`,
			p.JobID, p.StepID, p.Message); err != nil {
			return err
		}
		// The failure counts against the step's attempts, not the job's.
		if _, err := tx.Exec(ctx, `UPDATE jobs SET step_failures = step_failures + 1 WHERE id = $1`, p.JobID); err != nil {
			return err
		}
		var runAt time.Time
		message := "step " + p.StepID + ": " + p.Message
		if err := tx.QueryRow(ctx, failAttemptSQL, p.JobID, message, retry, delay).Scan(&runAt); err != nil {
			return err
		}
		fx.Moved = []string{p.JobID}
		fx.Freed.Add(j.queue, j.typ, 1)
		if retry {
			res = records.StepFailResult{Retry: true, RetryAt: runAt}
			fx.Ready = []records.ReadyNote{{Queue: j.queue, N: 1, Requires: j.requires, At: dueMillis(runAt)}}
			return nil
		}
		fx.Ended(p.JobID)
		return finish(ctx, tx, p.JobID, records.StatusFailed, nil)
	})
	return res, changed, fx, err
}

// StepSleep puts the job to sleep until a wake time it records: scheduled,
// its attempt given back (not counted among snoozes). Sent again by the
// same delivery it answers the same wake time; in a later delivery the
// sleep is over and the worker carries on. changed reports whether this
// call put the job to sleep.
func (s *Store) StepSleep(ctx context.Context, p records.StepSleepParams) (res records.StepSleepResult, changed bool, fx records.Effects, err error) {
	again := func(tx pgx.Tx, j stepJob) (bool, error) {
		r, err := readStep(ctx, tx, p.JobID, p.StepID, nil)
		if err != nil || !r.found || r.kind != StepKindSleep || r.status != StepSleeping || !r.current(j) ||
			j.status != records.StatusScheduled || r.wakeAt == nil {
			return false, err
		}
		res = records.StepSleepResult{Sleeping: true, WakeAt: *r.wakeAt}
		return true, nil
	}
	fx, err = s.stepCall(ctx, p.StepParams, again, func(tx pgx.Tx, j stepJob, fx *records.Effects) error {
		res, changed = records.StepSleepResult{}, false
		r, err := readStep(ctx, tx, p.JobID, p.StepID, nil)
		switch {
		case err != nil:
			return err
		case r.found && r.kind != StepKindSleep:
			return &records.StepKindError{StepID: p.StepID, Kind: r.kind}
		case r.found && r.status == StepCompleted:
			return nil
		case r.found:
			// Woken: the delivery after the sleep carries on.
			_, err := tx.Exec(ctx, `
				UPDATE job_steps SET status = 'completed', completed_at = now()
				WHERE job_id = $1 AND step_id = $2`, p.JobID, p.StepID)
			return err
		}
		ord, err := nextStepOrd(ctx, tx, p.JobID)
		if err != nil {
			return err
		}
		var wake time.Time
		if err := tx.QueryRow(ctx, `
			INSERT INTO job_steps (job_id, step_id, ord, kind, status, max_attempts, retry_backoff_seconds, delivery, wake_at)
			SELECT j.id, $2, $3, 'sleep', 'sleeping', j.max_attempts, j.retry_backoff_seconds, j.delivery, now() + $4::interval
			FROM jobs j WHERE j.id = $1
			RETURNING wake_at`, p.JobID, p.StepID, ord, p.For).Scan(&wake); err != nil {
			return err
		}
		// Like a snooze, the attempt is given back and the delivery token
		// stays until the next delivery, so a re-sent call is recognised.
		if _, err := tx.Exec(ctx, `
			UPDATE jobs j SET status = 'scheduled', worker_id = NULL, attempt = greatest(j.attempt - 1, 0),
				run_at = $2, `+clearDelivery+`, updated_at = now()
			WHERE j.id = $1`, p.JobID, wake); err != nil {
			return err
		}
		changed = true
		res = records.StepSleepResult{Sleeping: true, WakeAt: wake}
		fx.Moved = []string{p.JobID}
		fx.Freed.Add(j.queue, j.typ, 1)
		fx.Ready = []records.ReadyNote{{Queue: j.queue, N: 1, Requires: j.requires, At: dueMillis(wake)}}
		return nil
	})
	return res, changed, fx, err
}

// JobSteps reads a page of a job's steps (job_steps_order). A step still
// running when its delivery ended reads as interrupted. ErrNotHolder when
// Holder does not hold the job.
func (s *Store) JobSteps(ctx context.Context, p records.JobStepsParams) ([]records.Step, error) {
	if !storable(p.JobID, p.Holder) {
		return nil, records.ErrNotFound
	}
	var worker *string
	if err := s.Pool.QueryRow(ctx, `SELECT worker_id FROM jobs WHERE id = $1`, p.JobID).Scan(&worker); err != nil {
		return nil, interpretError(err)
	}
	if p.Holder != "" && (worker == nil || *worker != p.Holder) {
		return nil, records.ErrNotHolder
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT s.step_id, s.kind,
			CASE WHEN s.status = 'running' AND (j.status <> 'running' OR j.delivery IS DISTINCT FROM s.delivery)
				  OR s.status = 'awaiting' AND j.status <> 'awaiting'
				THEN 'interrupted' ELSE s.status END,
			s.attempts, s.input, s.output, s.errors, s.began_at, s.completed_at,
			CASE WHEN s.kind <> 'wait' THEN s.wake_at END, CASE WHEN s.kind = 'wait' THEN s.wake_at END,
			s.wait_signal, s.wait_jobs
		FROM job_steps s JOIN jobs j ON j.id = s.job_id
		WHERE s.job_id = $1 AND s.ord > $2
		ORDER BY s.ord LIMIT $3`, p.JobID, p.After, p.Limit)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []records.Step
	for rows.Next() {
		var st records.Step
		if err := rows.Scan(&st.StepID, &st.Kind, &st.Status, &st.Attempts, &st.Input, &st.Output, &st.Errors,
			&st.BeganAt, &st.CompletedAt, &st.WakeAt, &st.Deadline, &st.Signal, &st.Jobs); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, st)
	}
	return out, interpretError(rows.Err())
}

// jobRetryStepsSQL gives a retried job's unfinished steps their attempts
// back (job_steps' key); its completed steps are kept.
const jobRetryStepsSQL = `
	UPDATE job_steps SET attempts = 0
	WHERE job_id = $1 AND status <> 'completed' AND attempts > 0`
