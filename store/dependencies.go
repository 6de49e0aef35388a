package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agq/agq/records"
)

// withParents reports whether any job names parents.
func withParents(jobs []records.NewJob) bool {
	for _, j := range jobs {
		if len(j.After) > 0 {
			return true
		}
	}
	return false
}

// submitWithParents is JobsSubmit for jobs of which some name parents: one
// transaction inserts them all, then links each created child to its
// parents. A batch's error names the index of its job.
//
// The jobs are one client's, of one namespace (their own, else s's): their
// parents are looked for there.
func (s *Store) submitWithParents(ctx context.Context, jobs []records.NewJob, batch bool) ([]records.SubmitResult, error) {
	var res []records.SubmitResult
	ns := cmp.Or(jobs[0].Namespace, s.ns)
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var err error
		if res, err = insertAll(ctx, tx, jobs, batch); err != nil {
			return err
		}
		return linkParents(ctx, tx, ns, jobs, res, batch)
	})
	if isDeadlock(err) {
		// Parents locked in id order can still meet a group of reports
		// ending them in another order: sending it again settles it.
		return nil, fmt.Errorf("%w: the jobs named in after were ending meanwhile", records.ErrConflict)
	}
	if err != nil {
		return nil, interpretError(err)
	}
	return res, nil
}

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

// insertAll inserts jobs in tx, all or none: a job meeting one submitted
// concurrently with its id or unique key, or whose id another job holds,
// fails them all.
func insertAll(ctx context.Context, tx pgx.Tx, jobs []records.NewJob, batch bool) ([]records.SubmitResult, error) {
	res, err := insertJobs(ctx, txRunner(tx), jobs)
	if err != nil {
		return nil, err
	}
	for i, r := range res {
		if r.ID == "" {
			// The conflicting row committed after this statement's
			// snapshot was taken; the client's retry will find it.
			return nil, fmt.Errorf("%w: job %d conflicts with a job submitted concurrently", records.ErrConflict, i)
		}
		if !r.Same {
			return nil, indexed(batch, i, &records.JobExistsError{ID: r.ID})
		}
	}
	return res, nil
}

func indexed(batch bool, i int, err error) error {
	if batch {
		return fmt.Errorf("job %d: %w", i, err)
	}
	return err
}

// linkParents gives each job the tx created in namespace ns with an after
// its parents, jobs of ns: a
// wait for each parent not ended, and its status — pending while any
// waits, cancelled at once when a parent already failed or was cancelled
// and the job does not run on a parent's failure. A job re-sent (not
// created) is the existing job: its after is not looked at again.
//
// The parents' rows are locked, in id order, so that a parent ending at
// the same time either ends first (its status here says so) or waits for
// this commit and then sees has_children set (its end is marked).
func linkParents(ctx context.Context, tx pgx.Tx, ns string, jobs []records.NewJob, res []records.SubmitResult, batch bool) error {
	parents := parentsNamed(jobs, res)
	if len(parents) == 0 {
		return nil
	}
	status, err := lockParents(ctx, tx, ns, parents)
	if err != nil {
		return err
	}
	var l links
	marked := map[string]bool{}
	for i, j := range jobs {
		if res[i].Created && len(j.After) > 0 {
			if res[i].Status, err = l.add(j, status, marked); err != nil {
				return indexed(batch, i, err)
			}
		}
	}
	return l.send(ctx, tx, ns)
}

// parentsNamed are the parents the created jobs name, each once, in id
// order: the order every transaction locks them in.
func parentsNamed(jobs []records.NewJob, res []records.SubmitResult) []string {
	var parents []string
	seen := map[string]bool{}
	for i, j := range jobs {
		if !res[i].Created {
			continue
		}
		for _, p := range j.After {
			if !seen[p] {
				seen[p] = true
				parents = append(parents, p)
			}
		}
	}
	slices.Sort(parents)
	return parents
}

// lockParents reads the statuses of the parents, jobs of namespace ns,
// locking them against ending meanwhile (they may not be deleted either);
// a parent in history is ended, and read there; a parent missing, or of
// another namespace, is absent.
func lockParents(ctx context.Context, tx pgx.Tx, ns string, parents []string) (map[string]string, error) {
	status := make(map[string]string, len(parents))
	rows, err := tx.Query(ctx, `SELECT id, status FROM jobs WHERE namespace = $1 AND id = ANY($2::text[]) ORDER BY id FOR NO KEY UPDATE`,
		ns, parents)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		status[id] = st
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if missing := missingFrom(parents, status); len(missing) > 0 {
		return status, historyStatuses(ctx, tx, ns, missing, status)
	}
	return status, nil
}

// links are the rows linkParents writes: the waits of children on parents
// not yet ended, and each child's after, mode and status.
type links struct {
	waitParent, waitChild, unended                       []string
	kids, modes, kidStatus, kidError, kidCause, afterAll []string
	first, last                                          []int32
}

// add links child j to its parents as they stand, and answers its status:
// pending while one has not ended, cancelled when one failed and j does
// not run then, "" (as submitted) otherwise.
func (l *links) add(j records.NewJob, status map[string]string, marked map[string]bool) (string, error) {
	st, failed, cause := "", "", ""
	for _, p := range j.After {
		ps, ok := status[p]
		if !ok {
			return "", &records.ParentNotFoundError{ID: p}
		}
		switch {
		case !records.IsTerminal(ps):
			st = records.StatusPending
			l.waitParent, l.waitChild = append(l.waitParent, p), append(l.waitChild, j.ID)
			if !marked[p] {
				marked[p] = true
				l.unended = append(l.unended, p)
			}
		case ps != records.StatusCompleted && failed == "":
			failed, cause = parentEndedText(p, ps), p
		}
	}
	mode := cmp.Or(j.OnParentFailure, records.ParentFailureCancel)
	errText := ""
	if st == "" && failed != "" && mode == records.ParentFailureCancel {
		st, errText = records.StatusCancelled, failed
	}
	l.kids, l.modes, l.kidStatus, l.kidError = append(l.kids, j.ID), append(l.modes, mode), append(l.kidStatus, st), append(l.kidError, errText)
	l.kidCause = append(l.kidCause, cause)
	l.first = append(l.first, int32(len(l.afterAll)+1))
	l.afterAll = append(l.afterAll, j.After...)
	l.last = append(l.last, int32(len(l.afterAll)))
	return st, nil
}

// send writes the links, all in namespace ns, in one round trip.
func (l *links) send(ctx context.Context, tx pgx.Tx, ns string) error {
	b := &pgx.Batch{}
	if len(l.unended) > 0 {
		b.Queue(`UPDATE jobs SET has_children = true WHERE namespace = $1 AND id = ANY($2::text[]) AND NOT has_children`, ns, l.unended)
		// job_waits_pkey takes the rows in one probe each.
		b.Queue(`INSERT INTO job_waits (namespace, parent_id, child_id) SELECT $1, * FROM unnest($2::text[], $3::text[])
			ON CONFLICT DO NOTHING`, ns, l.waitParent, l.waitChild)
	}
	// Child rows by their key (jobs_pkey).
	b.Queue(`
		UPDATE jobs j SET after = ($1::text[])[c.first:c.last], on_parent_failure = c.mode,
			status = coalesce(nullif(c.status, ''), j.status),
			cancelled_by = CASE WHEN c.status = 'cancelled' THEN c.cause END,
			finished_at = CASE WHEN c.status = 'cancelled' THEN now() END,
			errors = CASE WHEN c.error <> '' THEN j.errors || jsonb_build_array(jsonb_build_object(
				'attempt', j.attempt, 'error', c.error, 'at', now())) ELSE j.errors END,
			updated_at = now()
		FROM unnest($2::text[], $3::int[], $4::int[], $5::text[], $6::text[], $7::text[], $8::text[])
			AS c(id, first, last, mode, status, error, cause)
		WHERE j.namespace = $9 AND j.id = c.id`, l.afterAll, l.kids, l.first, l.last, l.modes, l.kidStatus, l.kidError, l.kidCause, ns)
	return tx.SendBatch(ctx, b).Close()
}

// parentEndedText is the error of a job cancelled because of its parent.
func parentEndedText(parent, status string) string {
	return "parent " + parent + " " + status
}

// Released is a pending job made claimable, queued or scheduled, or an
// awaiting one woken (Woken) by its last awaited job's end.
type Released struct {
	Namespace         string
	ID, Queue, Status string
	Requires          []string
	RunAt             time.Time
	Woken             bool
}

// Settled is what settling dependencies did, in one namespace: jobs
// released, jobs cancelled because of a parent (each in the queue named),
// and whether marks were left for another round.
type Settled struct {
	Namespace string
	Released  []Released
	Cancelled []records.JobState
	More      bool
}

// maxSettleWaits bounds the waits one settling transaction deletes: a
// parent of a million children is settled in many short transactions.
const maxSettleWaits = 10000

// check is one row of dependency_checks with its job's status ("" when
// the job is gone).
type check struct {
	id     int64
	job    string
	status string
}

// DependenciesSettle looks at the marks of dependency_checks: those of the
// jobs named, jobs of s's namespace, or, with ids nil, the oldest up to
// limit of the namespace of the oldest mark (the leader's sweep, for marks
// left by a crash or by a path that does not settle at once: a round
// settles one namespace, the one Settled names, and the next ones the
// others). A parent is settled in its own namespace: only the children
// that named it there wait for it. Marks another caller holds are skipped. For each parent that
// ended it deletes the waits for it, cancels the children that it ending
// failed or cancelled cancels, and marks the others; then, in a second
// transaction that sees the first committed, it releases every marked
// pending job no wait is left for. Siblings settling one child at once
// each delete only their own waits, and the last to commit sees all of
// them gone. Cancelled children that are parents are marked by the
// trigger: the caller settles them in the next round.
func (s *Store) DependenciesSettle(ctx context.Context, ids []string, limit int) (Settled, error) {
	var out Settled
	var toRelease []int64
	ns := s.ns
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		out, toRelease = Settled{}, nil
		if err := s.noJIT(ctx, tx); err != nil {
			return err
		}
		var rows pgx.Rows
		var err error
		if ids != nil {
			// dependency_checks_job finds a job's marks.
			rows, err = tx.Query(ctx, `
				SELECT c.id, c.job_id, coalesce(j.status, '') FROM dependency_checks c
				LEFT JOIN jobs j ON j.namespace = c.namespace AND j.id = c.job_id
				WHERE c.namespace = $1 AND c.job_id = ANY($2::text[]) LIMIT $3 FOR UPDATE OF c SKIP LOCKED`, ns, ids, limit)
		} else {
			// The oldest mark by the primary key names the namespace.
			if err := tx.QueryRow(ctx, `SELECT namespace FROM dependency_checks ORDER BY id LIMIT 1`).Scan(&ns); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				return err
			}
			rows, err = tx.Query(ctx, `
				SELECT c.id, c.job_id, coalesce(j.status, '') FROM dependency_checks c
				LEFT JOIN jobs j ON j.namespace = c.namespace AND j.id = c.job_id
				WHERE c.namespace = $1 ORDER BY c.id LIMIT $2 FOR UPDATE OF c SKIP LOCKED`, ns, limit)
		}
		if err != nil {
			return err
		}
		checks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (check, error) {
			var c check
			return c, r.Scan(&c.id, &c.job, &c.status)
		})
		if err != nil {
			return err
		}
		if err := lockEnded(ctx, tx, ns, checks); err != nil {
			return err
		}
		out.More = len(checks) >= limit
		ended := map[string]string{}
		var endedIDs []string
		var drop []int64
		for _, c := range checks {
			switch {
			case records.IsTerminal(c.status):
				if _, ok := ended[c.job]; !ok {
					ended[c.job] = c.status
					endedIDs = append(endedIDs, c.job)
				}
			case c.status == records.StatusPending, c.status == records.StatusAwaiting:
				toRelease = append(toRelease, c.id)
			case c.status == lockedAway:
			default:
				drop = append(drop, c.id)
			}
		}
		if len(endedIDs) > 0 {
			more, released, cancelled, err := settleEnded(ctx, tx, ns, ended, endedIDs)
			if err != nil {
				return err
			}
			out.Cancelled = cancelled
			toRelease = append(toRelease, released...)
			if more {
				out.More = true
			} else {
				for _, c := range checks {
					if records.IsTerminal(c.status) {
						drop = append(drop, c.id)
					}
				}
			}
		}
		if len(drop) > 0 {
			_, err = tx.Exec(ctx, `DELETE FROM dependency_checks WHERE id = ANY($1::bigint[])`, drop)
		}
		return err
	})
	out.Namespace = ns
	if err != nil || len(toRelease) == 0 {
		return out, interpretError(err)
	}
	released, err := s.releaseChecked(ctx, ns, toRelease)
	out.Released = released
	return out, interpretError(err)
}

// lockEnded locks the jobs of the checks that ended (FOR SHARE, in id
// order) and reads their statuses again. A restore makes a cancelled
// parent pending again and gives it its waits again (waitAgain): one that
// committed since the checks were read is seen here, its job now a
// pending one's check, and one that comes later waits for this
// transaction. Without the lock, a restore committing between the read
// and settleEnded would have its new waits deleted, and the children
// released or cancelled while their parent is pending. A job another
// transaction holds (a restore under way) is skipped rather than waited
// for — a restore locks its jobs in no set order — and its check left
// (lockedAway) for the leader's sweep, within a second.
func lockEnded(ctx context.Context, tx pgx.Tx, ns string, checks []check) error {
	var ids []string
	for _, c := range checks {
		if records.IsTerminal(c.status) {
			ids = append(ids, c.job)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT id, status FROM jobs WHERE namespace = $1 AND id = ANY($2::text[])
		ORDER BY id FOR SHARE SKIP LOCKED`, ns, ids)
	if err != nil {
		return err
	}
	now := map[string]string{}
	var id, status string
	if _, err := pgx.ForEachRow(rows, []any{&id, &status}, func() error {
		now[id] = status
		return nil
	}); err != nil {
		return err
	}
	for i, c := range checks {
		if records.IsTerminal(c.status) {
			st, ok := now[c.job]
			if !ok {
				st = lockedAway
			}
			checks[i].status = st
		}
	}
	return nil
}

// lockedAway is the status lockEnded gives a check whose job another
// transaction held: it is left as it is.
const lockedAway = "-"

// settleEnded deletes the waits for the ended parents, jobs of namespace
// ns (up to maxSettleWaits), cancels the children a failed or cancelled
// parent cancels, and marks the other children to be released; it answers
// the marks' ids and whether waits were left.
func settleEnded(ctx context.Context, tx pgx.Tx, ns string, ended map[string]string, ids []string) (more bool, marks []int64, cancelled []records.JobState, err error) {
	// job_waits_pkey: the parent's waits, by the key's first columns.
	rows, err := tx.Query(ctx, `
		DELETE FROM job_waits w USING (
			SELECT parent_id, child_id FROM job_waits WHERE namespace = $1 AND parent_id = ANY($2::text[]) LIMIT $3) s
		WHERE w.namespace = $1 AND w.parent_id = s.parent_id AND w.child_id = s.child_id
		RETURNING w.parent_id, w.child_id`, ns, ids, maxSettleWaits)
	if err != nil {
		return false, nil, nil, err
	}
	type wait struct{ parent, child string }
	waits, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wait, error) {
		var w wait
		return w, r.Scan(&w.parent, &w.child)
	})
	if err != nil {
		return false, nil, nil, err
	}
	more = len(waits) >= maxSettleWaits
	var failKids, failTexts, failCauses, kids []string
	failing := map[string]bool{}
	for _, w := range waits {
		if st := ended[w.parent]; st != records.StatusCompleted {
			if !failing[w.child] {
				failing[w.child] = true
				failKids, failTexts = append(failKids, w.child), append(failTexts, parentEndedText(w.parent, st))
				failCauses = append(failCauses, w.parent)
			}
		}
	}
	if len(failKids) > 0 {
		if cancelled, err = cancelDescendants(ctx, tx, ns, failKids, failTexts, failCauses); err != nil {
			return false, nil, nil, err
		}
	}
	gone := make(map[string]bool, len(cancelled))
	for _, c := range cancelled {
		gone[c.ID] = true
	}
	marked := map[string]bool{}
	for _, w := range waits {
		if !gone[w.child] && !marked[w.child] {
			marked[w.child] = true
			kids = append(kids, w.child)
		}
	}
	if len(kids) == 0 {
		return more, nil, cancelled, nil
	}
	rows, err = tx.Query(ctx, `INSERT INTO dependency_checks (namespace, job_id) SELECT $1, unnest($2::text[]) RETURNING id`, ns, kids)
	if err != nil {
		return false, nil, nil, err
	}
	marks, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	return more, marks, cancelled, err
}

// releaseChecked consumes the marks of pending jobs and releases each that
// no wait is left for: queued, or scheduled while its run_at is to come;
// released now, it takes its place among jobs of its priority by the
// release time. An awaiting job no wait is left for (STEP.WAIT JOBS) is
// woken likewise: its wait completes, its output read by the next
// delivery's call. The deletion and the release commit together. The
// marks are of namespace ns.
func (s *Store) releaseChecked(ctx context.Context, ns string, marks []int64) ([]Released, error) {
	rows, err := s.Pool.Query(ctx, `
		WITH d AS (
			DELETE FROM dependency_checks WHERE id = ANY($2::bigint[]) AND namespace = $1 RETURNING job_id
		), w AS (
			-- job_steps_awaiting: the job's open wait, if it waits for jobs.
			UPDATE job_steps s SET status = 'completed', completed_at = now()
			FROM jobs j
			WHERE s.namespace = $1 AND s.job_id IN (SELECT job_id FROM d) AND s.awaiting AND s.wait_jobs IS NOT NULL
			  AND j.namespace = $1 AND j.id = s.job_id AND j.status = 'awaiting'
			  AND NOT EXISTS (SELECT 1 FROM job_waits w WHERE w.namespace = $1 AND w.child_id = s.job_id)
			RETURNING s.job_id
		)
		UPDATE jobs j SET status = CASE WHEN j.run_at > now() AND j.status = 'pending' THEN 'scheduled' ELSE 'queued' END,
			run_at = CASE WHEN j.status = 'pending' THEN greatest(j.run_at, now()) ELSE now() END, updated_at = now()
		WHERE j.namespace = $1 AND j.id IN (SELECT job_id FROM d)
		  AND (j.status = 'pending' OR j.id IN (SELECT job_id FROM w))
		  -- job_waits_child: one probe.
		  AND NOT EXISTS (SELECT 1 FROM job_waits w WHERE w.namespace = $1 AND w.child_id = j.id)
		RETURNING j.id, j.queue, j.status, j.requires, j.run_at, j.id IN (SELECT job_id FROM w)`, ns, marks)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Released, error) {
		j := Released{Namespace: ns}
		return j, r.Scan(&j.ID, &j.Queue, &j.Status, &j.Requires, &j.RunAt, &j.Woken)
	})
}

// ReleasedNotes are the notes that wake pops for released jobs.
func ReleasedNotes(rel []Released) []records.ReadyNote {
	notes := make([]records.ReadyNote, 0, len(rel))
	for _, r := range rel {
		n := records.ReadyNote{Queue: r.Queue, N: 1, Requires: r.Requires}
		if r.Status == records.StatusScheduled {
			n.At = dueMillis(r.RunAt)
		}
		notes = append(notes, n)
	}
	return notes
}

// PendingParents counts the parents of a job not yet ended.
func (s *Store) PendingParents(ctx context.Context, id string) (int, error) {
	var n int
	// job_waits_child.
	err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM job_waits WHERE namespace = $1 AND child_id = $2`, s.ns, id).Scan(&n)
	return n, interpretError(err)
}

// JobChildren reads the jobs whose after names job id, after cursor, in
// id order, up to limit, with their statuses (JOB.CHILDREN, the
// dashboard's job page). ErrNotFound when job id does not exist.
func (s *Store) JobChildren(ctx context.Context, id, cursor string, limit int) ([]records.JobState, error) {
	if !storable(id, cursor) {
		return nil, records.ErrNotFound
	}
	// The job by jobs_pkey; its children through jobs_children, each page
	// reading them all and sorting them (a GIN index keeps no order). The
	// fence keeps the planner from walking jobs_pkey in id order instead,
	// which it would guess cheaper from after's missing statistics and
	// which reads the whole table for a job with few children. The GIN
	// index cannot lead with the namespace: it is filtered beside it, so
	// that a job of another namespace naming the same id is no child —
	// past the fence, or the planner would AND the children with every
	// entry of jobs_pkey in the namespace past the cursor.
	rows, err := s.Pool.Query(ctx, `
		WITH c AS MATERIALIZED (
			SELECT namespace, id, queue, status, attempt, worker_id FROM jobs_all
			WHERE after @> ARRAY[$2::text] AND after IS NOT NULL AND id > $3
		)
		SELECT k.id, k.queue, k.status, k.attempt, k.worker_id
		FROM (SELECT * FROM jobs_all WHERE namespace = $1 AND id = $2 LIMIT 1) p LEFT JOIN LATERAL (SELECT * FROM c WHERE c.namespace = $1 ORDER BY c.id LIMIT $4) k ON true
		WHERE p.namespace = $1 AND p.id = $2`, s.ns, id, cursor, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	found := false
	out := make([]records.JobState, 0, min(limit, 1000))
	for rows.Next() {
		found = true
		var k struct {
			id, queue, status *string
			attempt           *int
			worker            *string
		}
		if err := rows.Scan(&k.id, &k.queue, &k.status, &k.attempt, &k.worker); err != nil {
			return nil, interpretError(err)
		}
		if k.id != nil { // nil: the job has no children past cursor
			out = append(out, records.JobState{ID: *k.id, Queue: *k.queue, Status: *k.status, Attempt: *k.attempt, WorkerID: k.worker})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	if !found {
		return nil, records.ErrNotFound
	}
	return out, nil
}

// submitEachWithParents is JobsSubmitEach for a group of which some jobs
// name parents: the others go first, the usual way, then each child in a
// transaction of its own, in order, so that a child may name a job sent
// before it in the same pipeline and one child's refusal is its own.
func (s *Store) submitEachWithParents(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, []error, []records.ReadyNote) {
	results := make([]records.SubmitResult, len(jobs))
	errs := make([]error, len(jobs))
	var plain []records.NewJob
	var at []int
	for i, j := range jobs {
		if len(j.After) == 0 {
			plain, at = append(plain, j), append(at, i)
		}
	}
	var notes []records.ReadyNote
	if len(plain) > 0 {
		res, perr, n := s.jobsSubmitEach(ctx, plain)
		for k, i := range at {
			results[i], errs[i] = res[k], perr[k]
		}
		notes = n
	}
	for i, j := range jobs {
		if len(j.After) == 0 {
			continue
		}
		j.Hand = nil
		res, err := s.submitWithParents(ctx, []records.NewJob{j}, false)
		if err != nil {
			errs[i] = err
			continue
		}
		results[i] = res[0]
		notes = append(notes, submittedNotes([]records.NewJob{j}, res)...)
	}
	return results, errs, notes
}

// JobParentsOf reads the parents named for a delivery of a job of
// namespace ns, jobs of ns: their statuses, and their results while the
// results' total is within budget bytes; truncated when it is not
// (statuses only). Parents deleted since are left out.
func (s *Store) JobParentsOf(ctx context.Context, ns string, after []string, budget int64) (map[string]records.ParentState, bool, error) {
	// jobs_pkey, one probe a parent.
	rows, err := s.Pool.Query(ctx, `
		WITH p AS (SELECT id, status, result FROM jobs_all WHERE namespace = $1 AND id = ANY($2::text[])),
		t AS (SELECT coalesce(sum(octet_length(result::text)), 0) AS total FROM p)
		SELECT p.id, p.status, CASE WHEN t.total <= $3 THEN p.result END, t.total > $3 FROM p, t`, ns, after, budget)
	if err != nil {
		return nil, false, interpretError(err)
	}
	defer rows.Close()
	out := make(map[string]records.ParentState, len(after))
	truncated := false
	for rows.Next() {
		var id string
		var p records.ParentState
		if err := rows.Scan(&id, &p.Status, &p.Result, &truncated); err != nil {
			return nil, false, interpretError(err)
		}
		out[id] = p
	}
	return out, truncated, interpretError(rows.Err())
}

// ParentRow is one parent of a page of JOB.PARENTS.
type ParentRow struct {
	ID string
	records.ParentState
}

// JobParentsPage reads the parents of job id after cursor, in id order,
// up to limit, with their results.
func (s *Store) JobParentsPage(ctx context.Context, id, cursor string, limit int) ([]ParentRow, error) {
	if !storable(id, cursor) {
		return nil, nil
	}
	// The child by jobs_pkey, each parent likewise.
	rows, err := s.Pool.Query(ctx, `
		SELECT j.id, j.status, j.result
		FROM jobs_all c CROSS JOIN LATERAL unnest(c.after) AS p(id) JOIN jobs_all j ON j.namespace = c.namespace AND j.id = p.id
		WHERE c.namespace = $1 AND c.id = $2 AND p.id > $3
		ORDER BY p.id LIMIT $4`, s.ns, id, cursor, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ParentRow, error) {
		var p ParentRow
		return p, r.Scan(&p.ID, &p.Status, &p.Result)
	})
	return out, interpretError(err)
}

// retryInGraph completes JobRetry of job id (locked, made queued by tx)
// when it has parents or children: it waits again, pending, for the
// parents not ended, and its pending children wait for it again. The
// jobs its end cancelled, and theirs down the graph, are restored by a
// walk (graph_walks) marked here and carried on after the commit. It
// answers whether the job itself waits.
func retryInGraph(ctx context.Context, tx pgx.Tx, ns, id string) (pending bool, err error) {
	if err := waitAgain(ctx, tx, ns, []string{id}, true); err != nil {
		return false, err
	}
	b := &pgx.Batch{}
	// job_waits_child: one probe.
	b.Queue(`UPDATE jobs j SET status = 'pending'
		WHERE j.namespace = $1 AND j.id = $2 AND EXISTS (SELECT 1 FROM job_waits w WHERE w.namespace = $1 AND w.child_id = j.id)
		RETURNING true`, ns, id).QueryRow(func(r pgx.Row) error {
		err := r.Scan(&pending)
		if err == pgx.ErrNoRows {
			return nil
		}
		return err
	})
	// jobs_cancelled_by (and its history's): is anything to restore?
	b.Queue(`INSERT INTO graph_walks (namespace, job_id, kind)
		SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM (
			SELECT status FROM jobs_all WHERE namespace = $1 AND cancelled_by = $2 OFFSET 0) k WHERE k.status = 'cancelled')`,
		ns, id, WalkRestore)
	return pending, tx.SendBatch(ctx, b).Close()
}
