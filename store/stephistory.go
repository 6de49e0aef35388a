package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// A step's attempts are kept in its row (job_steps.history, migration 023):
// the entries of the attempts that ended, and attempt_ended once the
// current attempt's entry is among them. Until then the current attempt's
// entry is read from the row (stepAttemptSQL), so that completing or
// failing a step writes nothing more: the entry is written when the next
// attempt begins, or when the watchdog ends the delivery with the step
// open, since only then is its outcome known (interrupted, timed_out).

// stepAttemptSQL is the entry of step row s's current attempt, read from
// the row: completed, failed with its error, or, still running, with the
// outcome the SQL expression running gives (NULL while it runs).
func stepAttemptSQL(s, running string) string {
	return `jsonb_build_object('attempt', ` + s + `.attempts, 'began_at', ` + s + `.began_at,
		'ended_at', CASE ` + s + `.status WHEN 'completed' THEN to_jsonb(` + s + `.completed_at)
			WHEN 'failed' THEN ` + s + `.errors -> -1 -> 'at' END,
		'outcome', CASE ` + s + `.status WHEN 'completed' THEN 'completed' WHEN 'failed' THEN 'failed' ELSE ` + running + ` END,
		'error', CASE WHEN ` + s + `.status = 'failed' THEN ` + s + `.errors -> -1 -> 'error' END)`
}

// stepHistorySQL is step row s's history with its current attempt's entry
// (stepAttemptSQL, a running attempt's outcome running), unless it is
// written already or the step has no attempt: a sleep, a wait, a step
// given its attempts back.
func stepHistorySQL(s, running string) string {
	return `CASE WHEN ` + s + `.kind = 'step' AND ` + s + `.attempts > 0 AND NOT ` + s + `.attempt_ended
		THEN ` + s + `.history || jsonb_build_array(` + stepAttemptSQL(s, running) + `) ELSE ` + s + `.history END`
}

// beginAttemptSQL is what a step row s begun again by delivery (a SQL
// expression) writes of its history: begun by another delivery than its
// current attempt's, that attempt's entry is written (running still, its
// delivery ended: interrupted) and the new attempt's is not.
func beginAttemptSQL(s, delivery string) string {
	return `history = CASE WHEN ` + s + `.delivery = ` + delivery + ` THEN ` + s + `.history
			ELSE ` + stepHistorySQL(s, `'interrupted'`) + ` END,
		attempt_ended = coalesce(` + s + `.delivery = ` + delivery + `, false) AND ` + s + `.attempt_ended`
}

// endOpenStepsSQL writes the entries of the attempts of steps open when
// the watchdog ended their jobs' deliveries ($1, of namespaces $3), with
// outcome $2, through their jobs' steps (job_steps_order).
const endOpenStepsSQL = `
	UPDATE job_steps s SET history = s.history || jsonb_build_array(jsonb_build_object('attempt', s.attempts,
			'began_at', s.began_at, 'ended_at', now(), 'outcome', $2::text, 'error', NULL)),
		attempt_ended = true
	FROM unnest($1::text[], $3::text[]) AS d(id, namespace), jobs j
	WHERE j.namespace = d.namespace AND j.id = d.id AND s.namespace = j.namespace AND s.job_id = j.id
	  AND s.status = 'running' AND s.kind = 'step'
	  AND s.delivery = j.delivery AND NOT s.attempt_ended`

// endOpenSteps writes the entries of the attempts open in the deliveries
// of the decided jobs that a recovery for reason ends: timed out, or
// interrupted.
func endOpenSteps(ctx context.Context, tx pgx.Tx, d retryDecisions, reason string) error {
	outcome := records.StepInterrupted
	if reason == timedOutReason {
		outcome = records.StepTimedOut
	}
	_, err := tx.Exec(ctx, endOpenStepsSQL, d.ids, outcome, d.namespaces)
	return err
}
