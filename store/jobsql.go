package store

// Fragments shared by the statements that take a job out of running: a
// report, a sweep, a worker leaving. Each is written once so that every
// path records a failure and leaves running the same way; a column added to
// a running job is cleared everywhere by changing one line. They expect the
// jobs row aliased j and are joined into the statements when the package
// is initialised, so the text pgx prepares and caches never changes.

// clearRunning empties what only a running job has: the deadline of its
// acknowledgement, its lease and the deadline of its timeout.
const clearRunning = `ack_deadline = NULL, lease_expires_at = NULL, deadline_at = NULL`

// clearDelivery is clearRunning for a delivery given back without counting
// its attempt: it never started either.
const clearDelivery = clearRunning + `, started_at = NULL`

// withError is j's error history with an entry for its current attempt
// appended; errText is a SQL expression giving the message.
func withError(errText string) string {
	return `j.errors || jsonb_build_array(jsonb_build_object(
		'attempt', j.attempt, 'worker_id', j.worker_id, 'error', ` + errText + `, 'at', now()))`
}

// decided joins the retry decisions of a sweep (retryDecisions), passed as
// its first four parameters, to the jobs they are about, by their key: a
// sweep spans namespaces, each job in its own.
const decided = `unnest($1::text[], $2::bool[], $3::float8[], $4::text[]) AS d(id, retry, delay, namespace)`

// retryAt is when a job the policy retries is due again (d.delay seconds
// from now, 0 for a job given back at once), on the database's clock.
const retryAt = `now() + make_interval(secs => d.delay)`

// Given back by a sweep (decided), a lost worker's job ends cancelled when
// its cancellation was asked, failed when the policy says so, else waits
// again: queued when due at once, as a job whose worker left always was.
const (
	givenBackStatus = `CASE WHEN j.cancel_requested THEN 'cancelled' WHEN NOT d.retry THEN 'failed'
		WHEN d.delay > 0 THEN 'retrying' ELSE 'queued' END`
	givenBackFinished = `CASE WHEN j.cancel_requested OR NOT d.retry THEN now() END`
)

// runningByIndex names the running jobs so that jobs_running (worker_id)
// WHERE status = 'running' serves a statement that finds them across
// namespaces: a running job always has its worker.
const runningByIndex = `j.status = 'running' AND j.worker_id IS NOT NULL`

// movedColumns is what notifyMoved reads of each job a statement moved out
// of running, its namespace first: a retrying job is announced as queued, due at the time it
// returns (NULL when due now); and the trace context of the delivery it
// ended (its start NULL when the delivery is given back unstarted).
const movedColumns = `j.namespace, j.id, CASE WHEN j.status = 'retrying' THEN 'queued' ELSE j.status END, j.queue, j.type,
	j.requires, j.attempt, CASE WHEN j.run_at > now() THEN j.run_at END,
	coalesce(j.traceparent, ''), coalesce(j.tracestate, ''), coalesce(j.delivery::text, ''), j.started_at`

// lostJobsSQL gives back, through their key, running jobs a lost worker
// held (the attempt counted, as the decisions $1-$4 say), their error
// errText; cond narrows the jobs.
func lostJobsSQL(errText, cond string) string {
	return `
	UPDATE jobs j SET
		status = ` + givenBackStatus + `,
		finished_at = ` + givenBackFinished + `,
		errors = CASE WHEN j.cancel_requested THEN j.errors
		         ELSE ` + withError(errText) + ` END,
		step_failures = CASE WHEN j.cancel_requested THEN j.step_failures ELSE ` + stepFailuresCounted + ` END,
		worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
		run_at = ` + retryAt + `, ` + clearRunning + `, updated_at = now()` + fromDecided(cond)
}

// fromDecided ends a statement that moves decided jobs (decided) out of
// running: those still running, and meeting cond, move, each answering
// movedColumns.
func fromDecided(cond string) string {
	return `
	FROM ` + decided + `
	WHERE j.namespace = d.namespace AND j.id = d.id AND j.status = 'running' ` + cond + `
	RETURNING ` + movedColumns
}
