package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// JobsSubmit inserts jobs atomically, in one transaction.
// A job whose id, or whose unique_key held by an unfinished job, already
// exists is not inserted again: its result names the existing job with
// Created false. An id held by a job with other contents fails the batch
// (JobExistsError). The notes say which waiters the new jobs may wake; the
// caller publishes them once the commit returned.
//
// Jobs all due now go first as one COPY, the cheapest way PostgreSQL has
// to take many rows (a third less than the statement for 1,000 jobs, and
// less for any number): when an id or unique_key is held already, the COPY
// fails whole and the statement below sorts the jobs out.
func (s *Store) JobsSubmit(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, []records.ReadyNote, error) {
	return s.submitAroundHistory(ctx, s.placedIn(jobs), true, func(jobs []records.NewJob) ([]records.SubmitResult, []records.ReadyNote, error) {
		return s.jobsSubmit(ctx, jobs)
	})
}

func (s *Store) jobsSubmit(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, []records.ReadyNote, error) {
	if withParents(jobs) {
		res, err := s.submitWithParents(ctx, jobs, true)
		if err != nil {
			return nil, nil, err
		}
		return res, submittedNotes(jobs, res), nil
	}
	if dueNow(jobs) {
		err := s.copyJobs(ctx, jobs)
		if err == nil {
			res := allCreated(jobs)
			return res, submittedNotes(jobs, res), nil
		}
		if !isUniqueViolation(err) {
			return nil, nil, interpretError(err)
		}
	}
	var res []records.SubmitResult
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = insertAll(ctx, tx, jobs, true)
		return err
	})
	if err != nil {
		return nil, nil, interpretError(err)
	}
	return res, submittedNotes(jobs, res), nil
}

// JobsSubmitEach inserts independent submissions — single jobs sent by
// different clients, gathered into one group — in one transaction, so that
// they share one WAL flush. Each job has its own outcome: one that cannot
// be stored fails alone. A job offered to a waiting worker (NewJob.Hand)
// may be handed over by the lean statement of a small group; the other
// ways in insert every job as usual.
func (s *Store) JobsSubmitEach(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, []error, []records.ReadyNote) {
	return s.submitEachAroundHistory(ctx, s.placedIn(jobs), func(jobs []records.NewJob) ([]records.SubmitResult, []error, []records.ReadyNote) {
		return s.jobsSubmitEach(ctx, jobs)
	})
}

func (s *Store) jobsSubmitEach(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, []error, []records.ReadyNote) {
	if withParents(jobs) {
		return s.submitEachWithParents(ctx, jobs)
	}
	if dueNow(jobs) {
		// A large group goes as one COPY (its four round trips pay from
		// about 50 jobs), a smaller one whose jobs name ids and keys of
		// their own as the lean statement; if either fails, the statement
		// below gives each job its own outcome, and jobs the lean
		// statement skipped (an id or key held) go there.
		if len(jobs) >= copyGroupMin && s.copyJobs(ctx, jobs) == nil {
			res := allCreated(jobs)
			return res, make([]error, len(jobs)), submittedNotes(jobs, res)
		}
		if ownIDs(jobs) {
			if inserted, delivered, err := s.insertDue(ctx, jobs); err == nil {
				return s.submitRest(ctx, jobs, inserted, delivered)
			}
		}
	}
	return s.submitEachCarefully(ctx, jobs)
}

// placedIn is jobs each naming its namespace: its own (NewJob.Namespace),
// else s's. A job's id, unique key, queue and parents are its namespace's.
func (s *Store) placedIn(jobs []records.NewJob) []records.NewJob {
	return namedIn(jobs, s.ns, func(j *records.NewJob) *string { return &j.Namespace })
}

// namedIn is items each naming its namespace (the field field points at):
// its own, else ns. The items are copied only when some name none.
func namedIn[T any](items []T, ns string, field func(*T) *string) []T {
	if !slices.ContainsFunc(items, func(it T) bool { return *field(&it) == "" }) {
		return items
	}
	items = slices.Clone(items)
	for i := range items {
		f := field(&items[i])
		*f = cmp.Or(*f, ns)
	}
	return items
}

// submitEachCarefully is JobsSubmitEach by the statement that sorts out
// every job: held ids and keys, due times, a job the database refuses.
func (s *Store) submitEachCarefully(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, []error, []records.ReadyNote) {
	results := make([]records.SubmitResult, len(jobs))
	errs := make([]error, len(jobs))
	res, err := insertJobs(ctx, s.durableRunner(), jobs)
	if err != nil {
		if len(jobs) == 1 || errors.Is(interpretError(err), records.ErrUnavailable) {
			for i := range errs {
				errs[i] = interpretError(err)
			}
			return results, errs, nil
		}
		// One job the database refuses must not fail the others: each
		// goes again on its own.
		for i := range jobs {
			r, err := insertJobs(ctx, s.durableRunner(), jobs[i:i+1])
			if err != nil {
				errs[i] = interpretError(err)
				continue
			}
			results[i] = r[0]
		}
	} else {
		results = res
	}
	created := make([]records.SubmitResult, len(jobs))
	for i, r := range results {
		if errs[i] == nil && r.ID == "" {
			errs[i] = fmt.Errorf("%w: job conflicts with a job submitted concurrently", records.ErrConflict)
		}
		if errs[i] == nil && !r.Same {
			errs[i] = &records.JobExistsError{ID: r.ID}
		}
		if errs[i] == nil {
			created[i] = r
		}
	}
	return results, errs, submittedNotes(jobs, created)
}

// runner runs one statement, calling scan for each row it returns.
type runner func(ctx context.Context, scan func(pgx.Rows) error, sql string, args ...any) error

// txRunner runs statements in tx.
func txRunner(tx pgx.Tx) runner {
	return func(ctx context.Context, scan func(pgx.Rows) error, sql string, args ...any) error {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
}

// durableRunner runs each statement as a hot statement of its own
// transaction, which commits when it returns without an error.
func (s *Store) durableRunner() runner {
	return func(ctx context.Context, scan func(pgx.Rows) error, sql string, args ...any) error {
		return s.hotQuery(ctx, false, nil, scan, sql, args...)
	}
}

// insertJobs inserts jobs with one statement over arrays. Registering the
// queues, inserting unless a unique index objects, and finding the job that
// holds an id or key already are one round trip. Jobs repeating an id or
// unique_key of an earlier job of the same call are not sent: they share
// its outcome, as a repeated submission would. A result with an empty ID
// conflicts with a row committed after the statement began.
func insertJobs(ctx context.Context, run runner, jobs []records.NewJob) ([]records.SubmitResult, error) {
	results := make([]records.SubmitResult, len(jobs))
	firstOf, cols := columnsOf(jobs)
	got := 0
	err := run(ctx, func(rows pgx.Rows) error {
		var ord int32
		var r records.SubmitResult
		if err := rows.Scan(&ord, &r.ID, &r.Created, &r.Same); err != nil {
			return err
		}
		r.Queue = jobs[ord].Queue
		results[ord] = r
		got++
		return nil
	}, insertJobsSQL, cols.id, cols.queue, cols.typ, cols.requires, cols.plan, cols.inputs, cols.payload, cols.key,
		cols.priority, cols.maxAttempts, cols.timeout, cols.backoff, cols.runAt, cols.ord, cols.reqSets,
		cols.traceParent, cols.traceState, cols.fairKey, cols.fairWeight, cols.afterFirst, cols.afterLast, cols.mode, cols.afterAll,
		cols.fair.group, cols.fair.offset, cols.fair.queues, cols.fair.priorities, cols.fair.keys, cols.submittedBy,
		cols.ns, cols.fair.namespaces)
	if err != nil {
		return nil, err
	}
	if got != len(cols.id) {
		return nil, fmt.Errorf("inserting jobs: %d results for %d jobs", got, len(cols.id))
	}
	for i, k := range firstOf {
		if k != i {
			same := results[k].Same && (jobs[i].ID != jobs[k].ID || sameSubmission(jobs[i], jobs[k]))
			results[i] = records.SubmitResult{ID: results[k].ID, Queue: results[k].Queue, Same: same}
		}
	}
	return results, nil
}

// submitColumns are the arrays insertJobsSQL unnests, one element a job sent.
type submitColumns struct {
	ns, id, queue, typ, plan, inputs, payload, key []string
	requires                                       []int32
	priority, maxAttempts, timeout                 []int32
	fairKey                                        []string
	fairWeight                                     []int32
	backoff                                        []float64
	runAt                                          []*time.Time
	ord                                            []int32
	traceParent, traceState                        []string
	// submittedBy is each job's submitter, nil (SQL NULL: every job NULL)
	// when no job names one.
	submittedBy []string
	// Each job's after, afterAll[afterFirst-1:afterLast] (none when
	// afterLast < afterFirst), and its on_parent_failure: nil when no job
	// names parents.
	afterFirst, afterLast []int32
	mode, afterAll        []string
	// The distinct requirement lists, sent once each (most batches have
	// one): a job names its list by position.
	reqSets  []string
	reqIndex map[string]int32
	// fair places the jobs due at now among their keys.
	fair fairPlaces
	now  time.Time
}

// columnsOf lays out the jobs to send. A job repeating an earlier one's id
// or unique key in its namespace is not sent: firstOf[i] is the index of
// the job whose outcome job i shares (i itself for a job sent).
func columnsOf(jobs []records.NewJob) (firstOf []int, cols submitColumns) {
	firstOf = make([]int, len(jobs))
	byID := make(map[string]int, len(jobs))
	byKey := map[string]int{}
	cols.reqIndex, cols.now = map[string]int32{}, time.Now()
	withTrace, withAfter, withSubmitter := traced(jobs), withParents(jobs), submitted(jobs)
	for i, j := range jobs {
		id, key := j.Namespace+"\x00"+j.ID, j.Namespace+"\x00"+j.UniqueKey
		if k, dup := byID[id]; dup {
			firstOf[i] = k
			continue
		}
		if k, dup := byKey[key]; dup && j.UniqueKey != "" {
			firstOf[i] = k
			continue
		}
		firstOf[i] = i
		byID[id] = i
		if j.UniqueKey != "" {
			byKey[key] = i
		}
		cols.add(j, i, withTrace)
		if withSubmitter {
			cols.submittedBy = append(cols.submittedBy, j.SubmittedBy)
		}
		if withAfter {
			cols.addAfter(j)
		}
	}
	return firstOf, cols
}

// add lays out job j, the ord-th of its call.
func (c *submitColumns) add(j records.NewJob, ord int, withTrace bool) {
	req, _ := json.Marshal(cmpOrEmpty(j.Requires))
	r, ok := c.reqIndex[string(req)]
	if !ok {
		r = int32(len(c.reqSets) + 1)
		c.reqIndex[string(req)] = r
		c.reqSets = append(c.reqSets, string(req))
	}
	var runAt *time.Time
	if !j.RunAt.IsZero() {
		runAt = &j.RunAt
	}
	c.ns = append(c.ns, j.Namespace)
	c.id = append(c.id, j.ID)
	c.queue = append(c.queue, j.Queue)
	c.typ = append(c.typ, j.Type)
	c.requires = append(c.requires, r)
	c.plan = append(c.plan, string(j.Plan))
	c.inputs = append(c.inputs, string(j.Inputs))
	c.payload = append(c.payload, string(j.Payload))
	c.key = append(c.key, j.UniqueKey)
	c.priority = append(c.priority, int32(j.Priority))
	c.maxAttempts = append(c.maxAttempts, int32(j.MaxAttempts))
	c.timeout = append(c.timeout, int32(j.TimeoutSeconds))
	c.backoff = append(c.backoff, j.RetryBackoffSeconds)
	c.runAt = append(c.runAt, runAt)
	c.ord = append(c.ord, int32(ord))
	c.fairKey = append(c.fairKey, j.FairKey)
	c.fairWeight = append(c.fairWeight, int32(weightOf(j)))
	c.fair.add(j.Namespace, j, !j.RunAt.After(c.now))
	if withTrace {
		c.traceParent = append(c.traceParent, j.TraceParent)
		c.traceState = append(c.traceState, j.TraceState)
	}
}

// addAfter lays out job j's after and on_parent_failure.
func (c *submitColumns) addAfter(j records.NewJob) {
	c.afterFirst = append(c.afterFirst, int32(len(c.afterAll)+1))
	c.afterAll = append(c.afterAll, j.After...)
	c.afterLast = append(c.afterLast, int32(len(c.afterAll)))
	c.mode = append(c.mode, cmp.Or(j.OnParentFailure, records.ParentFailureCancel))
}

// insertJobsSQL inserts the jobs of submitColumns that no job of their
// namespace holds the id or unique key of, and answers for each its
// outcome: created, or the job that holds its id or key, and whether that
// is the same submission.
var insertJobsSQL = `
		WITH reqs AS MATERIALIZED (
			SELECT n, ARRAY(SELECT jsonb_array_elements_text(r::jsonb)) AS requires
			FROM unnest($15::text[]) WITH ORDINALITY AS r(r, n)
		), input AS MATERIALIZED (
			SELECT i.*, reqs.requires FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[],
				$8::text[], $9::int[], $10::int[], $11::int[], $12::float8[], $13::timestamptz[], $14::int[],
				$16::text[], $17::text[], $18::text[], $19::int[], $20::int[], $21::int[], $22::text[], $24::int[], $25::int8[],
				$29::text[], $30::text[])
				AS i(id, queue, type, req, plan, inputs, payload, unique_key, priority, max_attempts,
				     timeout_seconds, backoff, run_at, ord, traceparent, tracestate, fair_key, fair_weight,
				     after_first, after_last, mode, fair_group, fair_offset, submitted_by, namespace)
			JOIN reqs ON reqs.n = i.req
		), ` + registerQueues("$30::text[]", "$2::text[]", "$18::text[]") + `, ` + fairBases(31, 26, 27, 28) + `, ins AS (
			INSERT INTO jobs (namespace, id, queue, type, requires, plan, inputs, payload, priority, status, max_attempts,
				retry_backoff_seconds, timeout_seconds, run_at, unique_key, traceparent, tracestate,
				fair_key, fair_weight, fair_pass, submitted_by)
			SELECT namespace, id, queue, type, requires,
				nullif(plan, '')::jsonb, nullif(inputs, '')::jsonb, nullif(payload, '')::jsonb, priority,
				CASE WHEN run_at > now() THEN 'scheduled' ELSE 'queued' END, max_attempts, backoff,
				timeout_seconds, coalesce(run_at, now()), nullif(unique_key, ''),
				nullif(traceparent, ''), nullif(tracestate, ''), fair_key, fair_weight,
				CASE WHEN b.n IS NOT NULL THEN ` + fairPass("b.base", "fair_offset") + ` END,
				nullif(submitted_by, '')
			FROM input LEFT JOIN fair_bases b ON b.n = fair_group ORDER BY ord
			ON CONFLICT DO NOTHING
			RETURNING namespace, id
		)
		SELECT i.ord, coalesce(ins.id, held.id, ''), ins.id IS NOT NULL, coalesce(held.same, true)
		FROM input i
		LEFT JOIN ins ON ins.namespace = i.namespace AND ins.id = i.id
		LEFT JOIN LATERAL (
			-- The job that holds the id or the key. A job holding the id
			-- must be this very submission sent again (run_at aside: a
			-- re-sent delay_seconds names a later time), with the same
			-- set of parents (linkParents stores them after this).
			SELECT j.id, j.id <> i.id OR (j.queue = i.queue AND j.type = i.type
				AND j.requires = i.requires
				AND j.plan IS NOT DISTINCT FROM nullif(i.plan, '')::jsonb
				AND j.inputs IS NOT DISTINCT FROM nullif(i.inputs, '')::jsonb
				AND j.payload IS NOT DISTINCT FROM nullif(i.payload, '')::jsonb
				AND j.priority = i.priority AND j.max_attempts = i.max_attempts
				AND j.retry_backoff_seconds = i.backoff AND j.timeout_seconds = i.timeout_seconds
				AND j.unique_key IS NOT DISTINCT FROM nullif(i.unique_key, '')
				AND j.fair_key = i.fair_key AND j.fair_weight = i.fair_weight
				AND CASE WHEN coalesce(i.after_last < i.after_first, true) THEN j.after IS NULL
					ELSE coalesce(j.after, '{}') @> ($23::text[])[i.after_first:i.after_last]
						AND coalesce(j.after, '{}') <@ ($23::text[])[i.after_first:i.after_last]
						AND j.on_parent_failure = i.mode END) AS same
			FROM jobs j
			WHERE ins.id IS NULL AND j.namespace = i.namespace
			  AND (j.id = i.id OR (j.unique_key = nullif(i.unique_key, '') AND j.status IN ('pending', 'queued', 'scheduled', 'running', 'retrying', 'awaiting')))
			ORDER BY j.id = i.id DESC LIMIT 1
		) held ON true`

// sameSubmission reports whether two submissions of one id in one call
// ask for the same job.
func sameSubmission(a, b records.NewJob) bool {
	return a.Queue == b.Queue && a.Type == b.Type && slices.Equal(a.Requires, b.Requires) &&
		bytes.Equal(a.Plan, b.Plan) && bytes.Equal(a.Inputs, b.Inputs) && bytes.Equal(a.Payload, b.Payload) &&
		a.Priority == b.Priority && a.MaxAttempts == b.MaxAttempts && a.RetryBackoffSeconds == b.RetryBackoffSeconds &&
		a.TimeoutSeconds == b.TimeoutSeconds && a.UniqueKey == b.UniqueKey &&
		a.FairKey == b.FairKey && weightOf(a) == weightOf(b) && sameParents(a, b)
}

// sameParents reports whether two submissions name the same set of parents
// and, if any, the same on_parent_failure.
func sameParents(a, b records.NewJob) bool {
	if len(a.After) == 0 || len(b.After) == 0 {
		return len(a.After) == len(b.After)
	}
	pa, pb := slices.Sorted(slices.Values(a.After)), slices.Sorted(slices.Values(b.After))
	return slices.Equal(pa, pb) &&
		cmp.Or(a.OnParentFailure, records.ParentFailureCancel) == cmp.Or(b.OnParentFailure, records.ParentFailureCancel)
}

func cmpOrEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// submittedNotes is one ReadyNote per distinct (queue, requires, due time)
// among the created jobs, so listeners wake as many waiters as there are
// new jobs and no more.
func submittedNotes(jobs []records.NewJob, results []records.SubmitResult) []records.ReadyNote {
	type groupKey struct {
		ns, queue, requires string
		at                  int64
	}
	counts := map[groupKey]int{}
	var notes []records.ReadyNote
	now := time.Now()
	for i, j := range jobs {
		if !results[i].Created || results[i].Delivered != nil || results[i].Status != "" {
			continue
		}
		var at int64
		if j.RunAt.After(now) {
			at = dueMillis(j.RunAt)
		}
		k := groupKey{j.Namespace, j.Queue, strings.Join(j.Requires, "\x00"), at}
		if n, ok := counts[k]; ok {
			notes[n].N++
			continue
		}
		counts[k] = len(notes)
		notes = append(notes, records.ReadyNote{Namespace: j.Namespace, Queue: j.Queue, N: 1, Requires: slices.Clone(j.Requires), At: at})
	}
	return notes
}
