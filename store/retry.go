package store

import (
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// nextRetry asks the store's policy about one failed attempt.
func (s *Store) nextRetry(f records.Failure) (bool, time.Duration, error) {
	if s.rules == nil {
		return false, 0, ErrNoRules
	}
	retry, delay := s.rules.NextRetry(f)
	if !retry {
		return false, 0, nil
	}
	return true, max(delay, 0), nil
}

// retryDecisions are a policy's answers for a set of jobs, as the arrays a
// set-based UPDATE unnests: job id, whether it runs again, after how many
// seconds (on the database's clock, like every other time of a job), and
// the job's namespace (a sweep's jobs may be of any).
type retryDecisions struct {
	ids        []string
	retry      []bool
	delays     []float64
	namespaces []string
}

func (d *retryDecisions) add(ns, id string, retry bool, delay time.Duration) {
	d.ids = append(d.ids, id)
	d.retry = append(d.retry, retry)
	d.delays = append(d.delays, delay.Seconds())
	d.namespaces = append(d.namespaces, ns)
}

// args are the decisions as the first four parameters of a statement
// joining decided.
func (d *retryDecisions) args() []any { return []any{d.ids, d.retry, d.delays, d.namespaces} }

// decideColumns is what a sweep reads of each job it locks to end its
// attempt: the facts of the retry decision, then whether the move counts
// the attempt at all. Deliveries ended by their steps' failures count
// against the steps, not against the job.
const decideColumns = `j.id, j.attempt - j.step_failures, j.max_attempts, j.retry_backoff_seconds`

// openStep is a column of the step the job's current delivery left open
// (through job_steps_order), the latest begun; NULL when none is.
func openStep(col string) string {
	return `(SELECT s.` + col + ` FROM job_steps s WHERE s.namespace = j.namespace AND s.job_id = j.id AND s.status = 'running'
		AND s.delivery = j.delivery ORDER BY s.began_at DESC LIMIT 1)`
}

// lostDecideColumns is decideColumns for deliveries lost or timed out: one
// that ends with a step open is decided by that step's attempts and
// backoff, and counts against the step, not against the job.
var lostDecideColumns = `j.id, coalesce(` + openStep("attempts") + `, j.attempt - j.step_failures),
	coalesce(` + openStep("max_attempts") + `, j.max_attempts),
	coalesce(` + openStep("retry_backoff_seconds") + `, j.retry_backoff_seconds)`

// stepFailuresCounted is j.step_failures once a sweep ended its delivery
// as failed: one more when a step was open (see lostDecideColumns).
var stepFailuresCounted = `j.step_failures + CASE WHEN ` + openStep("step_id") + ` IS NULL THEN 0 ELSE 1 END`

// decideRows reads rows of (namespace, decideColumns, counts) and asks the policy about
// each job whose attempt the move counts, as base describes the failure;
// the others are given back at once (or cancelled) and need no decision. It
// closes rows.
func (s *Store) decideRows(rows pgx.Rows, base records.Failure) (retryDecisions, error) {
	defer rows.Close()
	var d retryDecisions
	for rows.Next() {
		var ns, id string
		var counts bool
		f := base
		if err := rows.Scan(&ns, &id, &f.Attempt, &f.MaxAttempts, &f.BackoffSeconds, &counts); err != nil {
			return d, err
		}
		if !counts {
			d.add(ns, id, true, 0)
			continue
		}
		retry, delay, err := s.nextRetry(f)
		if err != nil {
			return d, err
		}
		d.add(ns, id, retry, delay)
	}
	return d, rows.Err()
}
