package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// The fast ways in for jobs due now, with nothing to sort out: a COPY for
// batches and large groups, a lean statement for small groups. Either
// leaves what it cannot insert (an id or unique_key held) to the statement
// that answers each job (insertJobs).

// allCreated is the outcome of jobs all inserted.
func allCreated(jobs []records.NewJob) []records.SubmitResult {
	res := make([]records.SubmitResult, len(jobs))
	for i, j := range jobs {
		res[i] = records.SubmitResult{ID: j.ID, Created: true, Queue: j.Queue, Same: true}
	}
	return res
}

// dueNow reports whether every job is to run at once and none records its
// submitter: those are the jobs a COPY can insert, their status, run_at and
// submitted_by being the defaults.
func dueNow(jobs []records.NewJob) bool {
	for _, j := range jobs {
		if !j.RunAt.IsZero() || j.SubmittedBy != "" {
			return false
		}
	}
	return true
}

// copyGroupMin is the least group of single submissions sent by COPY:
// smaller ones are faster as the one-round-trip statement (statement
// against COPY, store alone: 1 job 0.26 / 0.34 ms, 16 jobs 0.48 / 0.59,
// 48 jobs 1.09-1.42 / 0.81-1.21, 256 jobs 5.3 / 3.3).
const copyGroupMin = 48

// MaxHandoffGroup is the largest group of single submissions that may hand
// jobs over (NewJob.Hand): larger ones go by COPY.
const MaxHandoffGroup = copyGroupMin - 1

// copyColumns are the columns copyJobs fills; the others take their
// defaults (run_at and the timestamps now(), the status queued).
// tracedCopyColumns add the trace context, sent only when a job has one.
var (
	copyColumns = []string{"id", "queue", "type", "requires", "plan", "inputs", "payload", "priority", "status",
		"max_attempts", "retry_backoff_seconds", "timeout_seconds", "unique_key", "fair_key", "fair_weight", "fair_pass",
		"namespace"}
	tracedCopyColumns = append(slices.Clip(copyColumns), "traceparent", "tracestate")
)

// copyPassColumn is where fair_pass stands in copyColumns.
const copyPassColumn = 15

// submitted reports whether any job records its submitter.
func submitted(jobs []records.NewJob) bool {
	for _, j := range jobs {
		if j.SubmittedBy != "" {
			return true
		}
	}
	return false
}

// traced reports whether any job carries trace context.
func traced(jobs []records.NewJob) bool {
	for _, j := range jobs {
		if j.TraceParent != "" {
			return true
		}
	}
	return false
}

// traceArrays are the jobs' trace context as statement arrays, nil (SQL
// NULL: every job NULL) when none has any.
func traceArrays(jobs []records.NewJob) (parents, states []string) {
	if !traced(jobs) {
		return nil, nil
	}
	parents, states = make([]string, len(jobs)), make([]string, len(jobs))
	for i, j := range jobs {
		parents[i], states[i] = j.TraceParent, j.TraceState
	}
	return parents, states
}

// copyJobs inserts jobs due now with one COPY, in their order (their seq
// follows it), placed among their keys, and registers their queues, in one
// transaction. A job whose
// id or unique_key is held already fails it whole with a unique violation.
func (s *Store) copyJobs(ctx context.Context, jobs []records.NewJob) error {
	rows := make([][]any, len(jobs))
	columns, withTrace := copyColumns, traced(jobs)
	if withTrace {
		columns = tracedCopyColumns
	}
	namespaces := make([]string, len(jobs))
	for i, j := range jobs {
		namespaces[i] = j.Namespace
		rows[i] = []any{j.ID, j.Queue, j.Type, cmpOrEmpty(j.Requires), nullJSON(j.Plan), nullJSON(j.Inputs),
			nullJSON(j.Payload), int32(j.Priority), records.StatusQueued, int32(j.MaxAttempts), j.RetryBackoffSeconds,
			int32(j.TimeoutSeconds), textOrNull(j.UniqueKey), j.FairKey, int32(weightOf(j)), nil, j.Namespace}
		if withTrace {
			rows[i] = append(rows[i], textOrNull(j.TraceParent), textOrNull(j.TraceState))
		}
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		passes, err := registerAndPlace(ctx, tx, namespaces, jobs)
		if err != nil {
			return err
		}
		for i, p := range passes {
			rows[i][copyPassColumn] = p
		}
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"jobs"}, columns, pgx.CopyFromRows(rows))
		return err
	})
}

// textOrNull is text as COPY sends it: NULL when empty.
func textOrNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// insertDue inserts jobs due now, each naming its own id, with one lean
// statement, in their order, and answers which it inserted: a job whose id
// or unique_key is held already is skipped. A job offered to a waiting
// worker (NewJob.Hand) is inserted running for it when the worker may take
// it at once (see Handoff); delivered holds those. It commits when it
// returns without an error.
func (s *Store) insertDue(ctx context.Context, jobs []records.NewJob) (inserted []bool, delivered []*records.Job, err error) {
	n := len(jobs)
	namespaces := make([]string, n)
	ids, queues, types, plans, inputs, payloads, keys := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	priorities, attempts, timeouts, ords := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	backoffs := make([]float64, n)
	handTo, fairKeys, weights := make([]string, n), make([]string, n), make([]int32, n)
	var fair fairPlaces
	var ack, lease time.Duration
	var offered bool
	// Every job's requirements in one array; a job's are the slice from
	// its first to its last (an empty slice when it has none).
	var reqs []string
	first, last := make([]int32, n), make([]int32, n)
	for i, j := range jobs {
		namespaces[i] = j.Namespace
		ids[i], queues[i], types[i], keys[i] = j.ID, j.Queue, j.Type, j.UniqueKey
		plans[i], inputs[i], payloads[i] = string(j.Plan), string(j.Inputs), string(j.Payload)
		priorities[i], attempts[i], timeouts[i], backoffs[i], ords[i] = int32(j.Priority), int32(j.MaxAttempts),
			int32(j.TimeoutSeconds), j.RetryBackoffSeconds, int32(i)
		fairKeys[i], weights[i] = j.FairKey, int32(weightOf(j))
		fair.add(j.Namespace, j, true)
		first[i] = int32(len(reqs) + 1)
		reqs = append(reqs, j.Requires...)
		last[i] = int32(len(reqs))
		if j.Hand != nil {
			handTo[i], ack, lease, offered = j.Hand.Worker, j.Hand.AckTimeout, j.Hand.Lease, true
		}
	}
	// Rows are told apart by namespace and id.
	done := make(map[string]bool, n)
	handed := map[string]*records.Job{}
	traceParents, traceStates := traceArrays(jobs)
	sql, args := insertDueSQL, []any{ids, queues, types, first, last, plans, inputs, payloads, keys, priorities,
		attempts, timeouts, cmpOrEmpty(reqs), backoffs, ords, traceParents, traceStates, fairKeys, weights,
		fair.group, fair.offset, fair.queues, fair.priorities, fair.keys}
	scan := func(rows pgx.Rows) error {
		var ns, id string
		err := rows.Scan(&ns, &id)
		done[ns+"\x00"+id] = true
		return err
	}
	switch {
	case offered:
		// The statement that hands jobs over costs a third more: it runs
		// only for groups with jobs to offer.
		sql, args = handDueSQL, append(args, handTo, ack, lease, namespaces, fair.namespaces)
		scan = func(rows pgx.Rows) error {
			var ns, id string
			var d records.Job
			if err := rows.Scan(&ns, &id, &d.Delivery, &d.Seq, &d.RunAt, &d.Plan, &d.Inputs, &d.Payload); err != nil {
				return err
			}
			done[ns+"\x00"+id] = true
			if d.Delivery != nil {
				handed[ns+"\x00"+id] = &d
			}
			return nil
		}
	case !slices.ContainsFunc(jobs, func(j records.NewJob) bool { return j.FairKey != "" }):
		sql, args = plainDueSQL, append(args[:21], namespaces)
	default:
		args = append(args, namespaces, fair.namespaces)
	}
	err = s.hotQuery(ctx, false, nil, scan, sql, args...)
	if err != nil {
		return nil, nil, err
	}
	inserted = make([]bool, n)
	delivered = make([]*records.Job, n)
	for i, j := range jobs {
		inserted[i] = done[j.Namespace+"\x00"+j.ID]
		if d := handed[j.Namespace+"\x00"+j.ID]; d != nil && j.Hand != nil {
			d.Namespace, d.ID, d.Queue, d.Type, d.Requires, d.Priority = j.Namespace, j.ID, j.Queue, j.Type, cmpOrEmpty(j.Requires), j.Priority
			d.Status, d.Attempt, d.MaxAttempts, d.TimeoutSeconds = records.StatusRunning, 1, j.MaxAttempts, j.TimeoutSeconds
			d.RetryBackoffSeconds, d.WorkerID = j.RetryBackoffSeconds, &j.Hand.Worker
			d.TraceParent, d.TraceState, d.FairKey = j.TraceParent, j.TraceState, j.FairKey
			delivered[i] = d
		}
	}
	return inserted, delivered, nil
}

// dueInput is the CTE i of the lean statements: the jobs sent, one
// element of each array a job, their namespaces in $ns.
func dueInput(ns int) string {
	return fmt.Sprintf(`i AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[], $6::text[], $7::text[],
				$8::text[], $9::text[], $10::int[], $11::int[], $12::int[], $14::float8[], $15::int[], $16::text[], $17::text[],
				$18::text[], $19::int[], $20::int[], $21::int8[], $%d::text[])
				AS i(id, queue, type, first, last, plan, inputs, payload, unique_key, priority, max_attempts,
				     timeout_seconds, backoff, ord, traceparent, tracestate, fair_key, fair_weight, fair_group, fair_offset,
				     namespace)
		)`, ns)
}

// dueInsert inserts the jobs of i, each at pass (an SQL expression), read
// from from, in their order, skipping those whose id or key is held.
func dueInsert(pass, from string) string {
	return `
		INSERT INTO jobs (namespace, id, queue, type, requires, plan, inputs, payload, priority, status, max_attempts,
			retry_backoff_seconds, timeout_seconds, unique_key, traceparent, tracestate, fair_key, fair_weight, fair_pass)
		SELECT i.namespace, i.id, i.queue, i.type, ($13::text[])[i.first:i.last], nullif(i.plan, '')::jsonb,
			nullif(i.inputs, '')::jsonb, nullif(i.payload, '')::jsonb, i.priority, 'queued', i.max_attempts,
			i.backoff, i.timeout_seconds, nullif(i.unique_key, ''), nullif(i.traceparent, ''), nullif(i.tracestate, ''),
			i.fair_key, i.fair_weight, ` + pass + `
		FROM ` + from + `
		ORDER BY i.ord
		ON CONFLICT DO NOTHING
		RETURNING namespace, id`
}

// insertDueSQL is insertDue's statement: each key's place looked up (the
// jobs' namespaces in $25, the keys' in $26).
var insertDueSQL = `
		WITH ` + registerQueues("$25::text[]", "$2::text[]", "$18::text[]") + `, ` + dueInput(25) + `, ` + fairBases(26, 22, 23, 24) +
	dueInsert(fairPass("b.base", "i.fair_offset"), "i JOIN fair_bases b ON b.n = i.fair_group")

// plainDueSQL is insertDueSQL for jobs none of which names a key (its
// arguments the first 21, then the jobs' namespaces): no place is looked
// up. In a plain queue they
// stand at pass 0; in a fair one they are written unplaced, and the next
// claim of the queue places them behind its jobs without a key.
var plainDueSQL = `
		WITH q AS (
			INSERT INTO queues (namespace, name) SELECT DISTINCT * FROM unnest($22::text[], $2::text[]) ON CONFLICT DO NOTHING
		), ` + dueInput(22) +
	dueInsert(`CASE WHEN coalesce((SELECT f.fair FROM queues f WHERE f.namespace = i.namespace AND f.name = i.queue), false)
		THEN NULL ELSE 0 END`, "i")

// handDueSQL is insertDueSQL for a group with jobs to hand over (their
// workers in $25, empty for the others; the jobs' namespaces in $28, the
// keys' in $29). The worker, the limits, the pause and the jobs ahead are
// those of the job's namespace. A job is handed over (h) only
// where a claim would have given it to that worker now: the worker ACTIVE
// with capabilities that cover it, nothing in the queue before it that
// the worker could claim, no limits on its queue or on its own type (a
// type has a row only while it has limits; jobs of limited types ahead of
// it count as jobs before it, so a full type never lets it pass them
// either), the queue not paused. A queue with 64 jobs or more waiting at
// the job's priority or above (scheduled ones, and ones for other
// workers, included) hands nothing over: its jobs are claimed as usual.
var handDueSQL = `
		WITH ` + registerQueues("$28::text[]", "$2::text[]", "$18::text[]") + `, i AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[], $6::text[], $7::text[],
				$8::text[], $9::text[], $10::int[], $11::int[], $12::int[], $14::float8[], $15::int[], $16::text[], $17::text[],
				$18::text[], $19::int[], $20::int[], $21::int8[], $25::text[], $28::text[])
				AS i(id, queue, type, first, last, plan, inputs, payload, unique_key, priority, max_attempts,
				     timeout_seconds, backoff, ord, traceparent, tracestate, fair_key, fair_weight, fair_group, fair_offset, hand_to,
				     namespace)
		), ` + fairBases(29, 22, 23, 24) + `, h AS (
			SELECT i.ord, i.hand_to AS worker_id FROM i
			-- The worker's row by its key, one probe a job (LIMIT keeps
			-- it a probe: a join would read every ACTIVE worker under the
			-- generic plan).
			CROSS JOIN LATERAL (
				SELECT w.capabilities AS caps FROM workers w
				WHERE w.worker_id = i.hand_to AND w.state = 'ACTIVE' AND w.namespace = i.namespace LIMIT 1) k
			WHERE i.hand_to <> ''
			  AND ($13::text[])[i.first:i.last] <@ k.caps
			  AND NOT EXISTS (SELECT 1 FROM job_types t WHERE t.namespace = i.namespace AND t.name = i.type)
			  AND NOT EXISTS (SELECT 1 FROM namespaces n WHERE n.name = i.namespace AND n.max_running IS NOT NULL)
			  AND NOT EXISTS (SELECT 1 FROM queues l WHERE l.namespace = i.namespace AND l.name = i.queue
			                  AND (l.paused OR l.max_running IS NOT NULL OR l.rate_limit IS NOT NULL
			                       OR l.max_running_per_key IS NOT NULL))
			  -- Nothing the worker could claim ahead of it: among the
			  -- queue's first waiting jobs of its priority or above, none
			  -- due that the worker can run (those it cannot run it would
			  -- not claim either), and no more than those (jobs due later
			  -- come after those due, priority by priority: a bounded look,
			  -- however many are scheduled).
			  AND (SELECT count(*) < 64 AND count(*) FILTER (WHERE a.run_at <= now() AND a.requires <@ k.caps) = 0
			       FROM (SELECT c.run_at, c.requires FROM jobs c
			             WHERE c.namespace = i.namespace AND c.queue = i.queue AND c.status IN ('queued', 'scheduled', 'retrying')
			               AND c.priority >= i.priority
			             ORDER BY c.priority DESC, c.fair_pass, c.run_at, c.seq LIMIT 64) a)
		)
		INSERT INTO jobs (namespace, id, queue, type, requires, plan, inputs, payload, priority, status, max_attempts,
			retry_backoff_seconds, timeout_seconds, unique_key, traceparent, tracestate, fair_key, fair_weight, fair_pass,
			worker_id, attempt, delivery, started_at, ack_deadline, lease_expires_at, deadline_at)
		SELECT i.namespace, i.id, i.queue, i.type, ($13::text[])[i.first:i.last], nullif(i.plan, '')::jsonb,
			nullif(i.inputs, '')::jsonb, nullif(i.payload, '')::jsonb, i.priority,
			CASE WHEN h.worker_id IS NULL THEN 'queued' ELSE 'running' END, i.max_attempts,
			i.backoff, i.timeout_seconds, nullif(i.unique_key, ''), nullif(i.traceparent, ''), nullif(i.tracestate, ''),
			i.fair_key, i.fair_weight, ` + fairPass("b.base", "i.fair_offset") + `,
			h.worker_id, CASE WHEN h.worker_id IS NULL THEN 0 ELSE 1 END,
			CASE WHEN h.worker_id IS NOT NULL THEN gen_random_uuid() END,
			CASE WHEN h.worker_id IS NOT NULL THEN statement_timestamp() END,
			CASE WHEN h.worker_id IS NOT NULL THEN statement_timestamp() + $26::interval END,
			CASE WHEN h.worker_id IS NOT NULL THEN statement_timestamp() + $27::interval END,
			CASE WHEN h.worker_id IS NOT NULL THEN statement_timestamp() + make_interval(secs => i.timeout_seconds) END
		FROM i JOIN fair_bases b ON b.n = i.fair_group LEFT JOIN h ON h.ord = i.ord
		ORDER BY i.ord
		ON CONFLICT DO NOTHING
		RETURNING namespace, id, delivery::text, seq, run_at,
			CASE WHEN delivery IS NOT NULL THEN plan END,
			CASE WHEN delivery IS NOT NULL THEN inputs END,
			CASE WHEN delivery IS NOT NULL THEN payload END`

// ownIDs reports whether no two jobs of one namespace name one id or one
// unique_key: what insertDue's answer needs to say which job each
// inserted row is.
func ownIDs(jobs []records.NewJob) bool {
	seen := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		id, key := j.Namespace+"\x00"+j.ID, j.Namespace+"\x01"+j.UniqueKey
		if seen[id] || j.UniqueKey != "" && seen[key] {
			return false
		}
		seen[id] = true
		if j.UniqueKey != "" {
			seen[key] = true
		}
	}
	return true
}

// submitRest completes JobsSubmitEach after insertDue: the jobs it skipped
// get their outcomes from the statement that sorts them out.
func (s *Store) submitRest(ctx context.Context, jobs []records.NewJob, inserted []bool, delivered []*records.Job) ([]records.SubmitResult, []error, []records.ReadyNote) {
	results := allCreated(jobs)
	for i, d := range delivered {
		results[i].Delivered = d
	}
	errs := make([]error, len(jobs))
	var rest []records.NewJob
	var at []int
	for i, j := range jobs {
		if !inserted[i] {
			rest, at = append(rest, j), append(at, i)
		}
	}
	if len(rest) == 0 {
		return results, errs, submittedNotes(jobs, results)
	}
	res, restErrs, _ := s.submitEachCarefully(ctx, rest)
	created := slices.Clone(results)
	for k, i := range at {
		results[i], errs[i], created[i] = res[k], restErrs[k], records.SubmitResult{}
		if restErrs[k] == nil {
			created[i] = res[k]
		}
	}
	return results, errs, submittedNotes(jobs, created)
}
