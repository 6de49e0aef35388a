package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// History: finished jobs leave jobs for jobs_history (their steps, log
// lines and signals for the other _history tables) a few seconds after
// they end, partitioned by the time they expire; retention drops whole
// partitions (migration 028).

// HistoryParams says which finished jobs HistoryMove takes and when they
// expire.
type HistoryParams struct {
	RetentionParams
	// After is how long a finished job stays in jobs: long enough for the
	// reads that follow an end (a waiter's, a child's pop reading its
	// parent's result) to find it there.
	After time.Duration
}

// historyWidths are the widths of history periods, widest first, each
// with how far ahead of now an expiry must lie for it: far expiries share
// a period of thirty days, near ones one of an hour, so that a period
// ends at most a little past its jobs' retention without thousands of
// partitions for long ones. Each width divides the one before, and ranges
// are aligned to their width, so two periods either nest or are apart.
var historyWidths = []struct {
	width, ahead time.Duration
	tag          string
}{
	{30 * 24 * time.Hour, 62 * 24 * time.Hour, "m"},
	{24 * time.Hour, 24 * time.Hour, "d"},
	{time.Hour, 0, "h"},
}

// period is one row of history_periods: the partitions holding the jobs
// that expire in [lo, hi).
type period struct {
	lo, hi time.Time
	suffix string
}

// periodFor is the period an expiry t belongs to: an existing one covering
// it, or the widest allowed at its distance from now that overlaps none.
func periodFor(t, now time.Time, have []period) (p period, exists bool) {
	for _, p := range have {
		if !t.Before(p.lo) && t.Before(p.hi) {
			return p, true
		}
	}
	for _, w := range historyWidths {
		if w.ahead > 0 && t.Sub(now) < w.ahead {
			continue
		}
		// Truncate aligns to multiples of the width since the zero time,
		// a UTC midnight: days and hours fall on UTC's.
		lo := t.UTC().Truncate(w.width)
		hi := lo.Add(w.width)
		free := true
		for _, q := range have {
			if q.lo.Before(hi) && lo.Before(q.hi) {
				free = false
				break
			}
		}
		if free {
			return period{lo: lo, hi: hi, suffix: lo.Format("20060102t15") + w.tag}, false
		}
	}
	panic("unreachable: an hour that no period covers overlaps none")
}

// historyTables are the partitioned tables, whose partitions a period has
// one of each.
var historyTables = []string{"jobs_history", "job_steps_history", "job_logs_history", "job_signals_history"}

// periods reads history_periods, oldest first.
func (s *Store) periods(ctx context.Context) ([]period, error) {
	rows, err := s.Pool.Query(ctx, `SELECT lo, hi, suffix FROM history_periods ORDER BY lo`)
	return collect(rows, err, func(row pgx.CollectableRow) (p period, err error) {
		return p, row.Scan(&p.lo, &p.hi, &p.suffix)
	})
}

// historyLockTimeout bounds the wait of a period's creation for its locks
// on the history tables, which only other schema changes hold (a
// detachment, an ANALYZE): it gives up, and the next sweep tries again.
const historyLockTimeout = "2s"

// partitionDetachFor bounds the wait of a partition's detachment for the
// reads that may still see it.
const partitionDetachFor = time.Minute

// unstatedColumnsSQL names the columns of each history table whose
// statistics are not gathered (migration 031): a partition does not take
// them from its table, so periodCreate sets them on each.
const unstatedColumnsSQL = `
	SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	WHERE a.attrelid = ANY ($1::text[]::regclass[]) AND a.attnum > 0 AND NOT a.attisdropped AND a.attstattarget = 0`

// periodCreate creates a period's partitions, one short transaction. A
// partition is analyzed as it doubles, not as it grows by a tenth, and
// without the statistics its table does not gather: history only grows
// until it is dropped, and is read through its keys.
//
// Each is made a table of its own, then attached: an attachment locks its
// history table against other schema changes only, where a CREATE TABLE …
// PARTITION OF locks it against reads too. A read of the _all views locks
// the history tables one after another, so a creation that held one while
// waiting for the next could deadlock with it.
func (s *Store) periodCreate(ctx context.Context, p period) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+historyLockTimeout+`'`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, unstatedColumnsSQL, historyTables)
		unstated, err := collect(rows, err, func(row pgx.CollectableRow) (c [2]string, err error) {
			return c, row.Scan(&c[0], &c[1])
		})
		if err != nil {
			return err
		}
		var b pgx.Batch
		for _, t := range historyTables {
			part := t + "_" + p.suffix
			b.Queue(fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)
				WITH (autovacuum_analyze_scale_factor = 1)`, part, t))
			var cols []string
			for _, c := range unstated {
				if c[0] == t {
					cols = append(cols, "ALTER COLUMN "+pgx.Identifier{c[1]}.Sanitize()+" SET STATISTICS 0")
				}
			}
			if len(cols) > 0 {
				b.Queue(`ALTER TABLE ` + part + ` ` + strings.Join(cols, ", "))
			}
			b.Queue(fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
				t, part, p.lo.Format(time.RFC3339), p.hi.Format(time.RFC3339)))
		}
		b.Queue(`INSERT INTO history_periods (lo, hi, suffix) VALUES ($1, $2, $3)`, p.lo, p.hi, p.suffix)
		return tx.SendBatch(ctx, &b).Close()
	})
}

// periodsEnsure creates the periods the expiries (hour starts) need.
func (s *Store) periodsEnsure(ctx context.Context, hours []time.Time) error {
	if len(hours) == 0 {
		return nil
	}
	have, err := s.periods(ctx)
	if err != nil {
		return err
	}
	var now time.Time
	if err := s.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return err
	}
	for _, h := range hours {
		p, exists := periodFor(h, now, have)
		if exists {
			continue
		}
		if err := s.periodCreate(ctx, p); err != nil {
			return fmt.Errorf("history period %s: %w", p.suffix, err)
		}
		have = append(have, p)
	}
	return nil
}

// expiresAt is when a finished job of jobs (columns unqualified) expires:
// its namespace's retention ($2 completed, $3 failed or cancelled) past
// its end, and not before now, so that a job moved late goes into a period
// still to come.
const expiresAt = `greatest(finished_at + CASE WHEN status = 'completed' THEN $2::interval ELSE $3::interval END, now())`

// movable picks up to $5 finished jobs of namespace $1 ended before
// $4 ago, with nothing left to settle for them (a dependency check, a graph
// walk from them): jobs_finished, in no order, so that a long backlog is
// never sorted.
const movable = `
	SELECT id, ` + expiresAt + ` AS expires_at FROM jobs
	WHERE namespace = $1 AND status IN ('completed', 'failed', 'cancelled') AND finished_at < now() - $4::interval
	  AND NOT EXISTS (SELECT 1 FROM dependency_checks d WHERE d.namespace = $1 AND d.job_id = jobs.id)
	  AND NOT EXISTS (SELECT 1 FROM graph_walks g WHERE g.namespace = $1 AND g.job_id = jobs.id)
	LIMIT $5`

// HistoryMove moves finished jobs older than p.After into history: up to
// p.Limit in all a call, each namespace's in statements of their own, with
// their steps, log lines and signals. It answers how many it moved.
func (s *Store) HistoryMove(ctx context.Context, p HistoryParams) (int, error) {
	spans, err := s.RetentionByNamespace(ctx, p.RetentionParams)
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, r := range spans {
		if moved >= p.Limit {
			break
		}
		n, err := s.moveIn(ctx, r, p.After, p.Limit-moved)
		moved += n
		if err != nil {
			return moved, interpretError(err)
		}
	}
	return moved, nil
}

// moveIn moves up to limit finished jobs of one namespace, in one
// statement, those whose period exists. The periods a move needs almost
// always exist (the mover made them for the jobs before): only when some
// jobs found none does it create theirs and move again. A job whose period
// appeared meanwhile waits for the next call.
func (s *Store) moveIn(ctx context.Context, r NamespaceRetention, after time.Duration, limit int) (int, error) {
	args := []any{r.Namespace, r.Completed, r.Failed, after, limit}
	n, unplaced, err := s.moveStatement(ctx, args)
	if err != nil || unplaced == 0 || n >= limit {
		return n, err
	}
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT date_trunc('hour', expires_at) FROM (`+movable+`) m`, args...)
	hours, err := collect(rows, err, func(row pgx.CollectableRow) (h time.Time, err error) { return h, row.Scan(&h) })
	if err != nil || len(hours) == 0 {
		return n, err
	}
	if err := s.periodsEnsure(ctx, hours); err != nil {
		return n, err
	}
	args[4] = limit - n
	more, _, err := s.moveStatement(ctx, args)
	return n + more, err
}

// moveStatement moves the jobs movable picks (its arguments args) whose
// period exists, with their steps, log lines and signals, and answers how
// many it moved and how many it picked but left for want of a period.
func (s *Store) moveStatement(ctx context.Context, args []any) (moved, unplaced int, err error) {
	err = s.Pool.QueryRow(ctx, `
		WITH picked AS (`+movable+` FOR UPDATE SKIP LOCKED
		), placed AS (
			SELECT * FROM picked m
			WHERE EXISTS (SELECT 1 FROM history_periods p WHERE m.expires_at >= p.lo AND m.expires_at < p.hi)
		), moved AS (
			DELETE FROM jobs j USING placed m WHERE j.namespace = $1 AND j.id = m.id RETURNING m.expires_at, j.*
		), kept AS (
			INSERT INTO jobs_history SELECT * FROM moved
		), counted AS (
			`+countIntoPeriods("moved")+`
		), steps AS (
			DELETE FROM job_steps s USING moved m WHERE s.namespace = $1 AND s.job_id = m.id RETURNING m.expires_at, s.*
		), steps_kept AS (
			INSERT INTO job_steps_history SELECT * FROM steps
		), logs AS (
			DELETE FROM job_logs l USING moved m WHERE l.namespace = $1 AND l.job_id = m.id RETURNING m.expires_at, l.*
		), logs_kept AS (
			INSERT INTO job_logs_history SELECT * FROM logs
		), signals AS (
			DELETE FROM job_signals g USING moved m WHERE g.namespace = $1 AND g.job_id = m.id RETURNING m.expires_at, g.*
		), signals_kept AS (
			INSERT INTO job_signals_history SELECT * FROM signals
		)
		SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM picked) - (SELECT count(*) FROM placed)`, args...).Scan(&moved, &unplaced)
	return moved, unplaced, err
}

// HistoryExpire drops the periods whose time has passed, oldest first, up
// to limit of them (periodDrop), each after carrying into the current
// period the jobs of it a child not yet ended still needs (a parent is
// kept while its results may be delivered). It answers how many
// jobs the dropped periods held (as the statistics count them).
func (s *Store) HistoryExpire(ctx context.Context, limit int) (int, error) {
	// None while a changed retention is being applied to history
	// (HistoryReexpire): a job it keeps longer may still be in a due period.
	rows, err := s.Pool.Query(ctx, `
		SELECT lo, hi, suffix FROM history_periods
		WHERE hi <= now() AND NOT EXISTS (SELECT 1 FROM history_retention WHERE cursor IS NOT NULL)
		ORDER BY lo LIMIT $1`, limit)
	due, err := collect(rows, err, func(row pgx.CollectableRow) (p period, err error) {
		return p, row.Scan(&p.lo, &p.hi, &p.suffix)
	})
	if err != nil || len(due) == 0 {
		return 0, err
	}
	var now time.Time
	if err := s.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return 0, interpretError(err)
	}
	// Jobs carried forward go into the period of now (plus a little, so
	// that a carry at an hour's end does not land in a period as good as
	// gone); it must exist before the carry.
	carryTo := now.Add(time.Minute)
	if err := s.periodsEnsure(ctx, []time.Time{carryTo.Truncate(time.Hour)}); err != nil {
		return 0, interpretError(err)
	}
	expired := 0
	for _, p := range due {
		n, err := s.periodDrop(ctx, p, carryTo)
		if err != nil {
			return expired, interpretError(fmt.Errorf("history period %s: %w", p.suffix, err))
		}
		expired += n
	}
	return expired, nil
}

// periodDrop carries a due period's still-needed parents forward and
// stops counting the period's jobs, then drops its partitions, then
// forgets the period. Each partition is detached first, concurrently: the
// detachment locks its history table against other schema changes only,
// where a DROP TABLE of a partition locks it against reads, and a read of
// the _all views, which locks the history tables one after another, could
// deadlock with a drop that held one while waiting for the next. A drop
// cut short is taken up again the same way: every step is skipped once
// done.
func (s *Store) periodDrop(ctx context.Context, p period, carryTo time.Time) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// Carried already when a detachment has begun.
		var attached bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1) AND NOT inhdetachpending)`,
			"jobs_history_"+p.suffix).Scan(&attached); err != nil || !attached {
			return err
		}
		// The carry moves rows within the partitioned tables; it takes no
		// lock the moves or reads would wait on.
		_, err := tx.Exec(ctx, `
			WITH needed AS (
				SELECT h.namespace, h.id FROM jobs_history_`+p.suffix+` h
				WHERE h.has_children AND 0 < (SELECT count(*) FROM jobs c WHERE c.after @> ARRAY[h.id] AND c.after IS NOT NULL
					AND c.namespace = h.namespace AND c.status NOT IN ('completed', 'failed', 'cancelled'))
			), jobs_carried AS (
				UPDATE jobs_history j SET expires_at = $1 FROM needed n
				WHERE j.namespace = n.namespace AND j.id = n.id AND j.expires_at >= $2 AND j.expires_at < $3
				RETURNING j.namespace, j.queue, j.status, j.expires_at
			), counted AS (
				`+countIntoPeriods("jobs_carried")+`
			), steps_carried AS (
				UPDATE job_steps_history s SET expires_at = $1 FROM needed n
				WHERE s.namespace = n.namespace AND s.job_id = n.id AND s.expires_at >= $2 AND s.expires_at < $3
			), signals_carried AS (
				UPDATE job_signals_history g SET expires_at = $1 FROM needed n
				WHERE g.namespace = n.namespace AND g.job_id = n.id AND g.expires_at >= $2 AND g.expires_at < $3
			)
			UPDATE job_logs_history l SET expires_at = $1 FROM needed n
			WHERE l.namespace = n.namespace AND l.job_id = n.id AND l.expires_at >= $2 AND l.expires_at < $3`,
			carryTo, p.lo, p.hi)
		if err != nil {
			return err
		}
		// The period's jobs are counted no more: those carried are in
		// the current period's counts, the others are about to go.
		if _, err := tx.Exec(ctx, `DELETE FROM history_counts WHERE period_lo = $1`, p.lo); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE relname = $1`,
			"jobs_history_"+p.suffix).Scan(&n)
	})
	if err != nil {
		return 0, err
	}
	for _, t := range historyTables {
		if err := s.partitionDrop(ctx, t, t+"_"+p.suffix); err != nil {
			return 0, err
		}
	}
	_, err = s.Pool.Exec(ctx, `DELETE FROM history_periods WHERE lo = $1`, p.lo)
	return n, err
}

// partitionDrop detaches partition part from its history table, unless it
// is detached already, and drops it. A detachment cut short is finished.
// A detachment waits for the transactions that may still read the
// partition; one that waits past partitionDetachFor is cut short, and
// finished at the next expiry.
func (s *Store) partitionDrop(ctx context.Context, table, part string) error {
	ctx, cancel := context.WithTimeout(ctx, partitionDetachFor)
	defer cancel()
	var pending bool
	err := s.Pool.QueryRow(ctx, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = to_regclass($1)`, part).Scan(&pending)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err = nil // detached already
	case err != nil:
		return err
	case pending:
		_, err = s.Pool.Exec(ctx, `ALTER TABLE `+table+` DETACH PARTITION `+part+` FINALIZE`)
	default:
		_, err = s.Pool.Exec(ctx, `ALTER TABLE `+table+` DETACH PARTITION `+part+` CONCURRENTLY`)
	}
	if err != nil {
		return err
	}
	_, err = s.Pool.Exec(ctx, `DROP TABLE IF EXISTS `+part)
	return err
}

// historyStatuses reads the statuses of the jobs among ids that are in
// history (all of them ended), into status.
func historyStatuses(ctx context.Context, q pgx.Tx, ns string, ids []string, status map[string]string) error {
	rows, err := q.Query(ctx, `SELECT id, status FROM jobs_history WHERE namespace = $1 AND id = ANY($2::text[])`, ns, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			return err
		}
		status[id] = st
	}
	return rows.Err()
}

// missingFrom is the ids that status has no entry for.
func missingFrom(ids []string, status map[string]string) []string {
	var out []string
	for _, id := range ids {
		if _, ok := status[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// countIntoPeriods is the statement that adds the jobs of rows (columns
// namespace, queue, status, expires_at) to the counts of the history
// periods they are in (history_counts), in key order, so that two such
// statements take the rows' locks in the same order.
func countIntoPeriods(rows string) string {
	return `INSERT INTO history_counts (namespace, queue, status, period_lo, n)
		SELECT r.namespace, r.queue, r.status, p.lo, count(*)
		FROM ` + rows + ` r JOIN history_periods p ON r.expires_at >= p.lo AND r.expires_at < p.hi
		GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
		ON CONFLICT (namespace, queue, status, period_lo) DO UPDATE SET n = history_counts.n + excluded.n`
}

// recallSQL brings jobs of namespace $1 (ids $2) back from history into
// jobs, with their steps, log lines and signals: a job a write changes again (a
// retry, a restore) lives among the unfinished. Rows go back column by
// column through their JSON form, which leaves out expires_at; the record
// is built once a row in a LATERAL call (a (f(x)).* would call f once a
// column). job_steps derives two columns from a step's status, which an
// insert may not write: its steps go back by the columns it stores
// (stepStoredColumns).
var recallSQL = `
	WITH back AS (
		DELETE FROM jobs_history WHERE namespace = $1 AND id = ANY($2::text[]) RETURNING *
	), uncounted AS (
		UPDATE history_counts c SET n = c.n - g.n
		FROM (SELECT b.namespace, b.queue, b.status, p.lo, count(*) AS n
		      FROM back b JOIN history_periods p ON b.expires_at >= p.lo AND b.expires_at < p.hi
		      GROUP BY 1, 2, 3, 4) g
		WHERE c.namespace = g.namespace AND c.queue = g.queue AND c.status = g.status AND c.period_lo = g.lo
	), jobs_back AS (
		INSERT INTO jobs OVERRIDING SYSTEM VALUE
		SELECT r.* FROM back b CROSS JOIN LATERAL jsonb_populate_record(NULL::jobs, to_jsonb(b) - 'expires_at') r
	), steps_back AS (
		DELETE FROM job_steps_history WHERE namespace = $1 AND job_id = ANY($2::text[]) RETURNING *
	), steps_in AS (
		INSERT INTO job_steps (` + strings.Join(stepStoredColumns, ", ") + `) OVERRIDING SYSTEM VALUE
		SELECT r.` + strings.Join(stepStoredColumns, ", r.") + `
		FROM steps_back s CROSS JOIN LATERAL jsonb_populate_record(NULL::job_steps, to_jsonb(s) - 'expires_at') r
	), logs_back AS (
		DELETE FROM job_logs_history WHERE namespace = $1 AND job_id = ANY($2::text[]) RETURNING *
	), logs_in AS (
		INSERT INTO job_logs OVERRIDING SYSTEM VALUE
		SELECT r.* FROM logs_back l CROSS JOIN LATERAL jsonb_populate_record(NULL::job_logs, to_jsonb(l) - 'expires_at') r
	), signals_back AS (
		DELETE FROM job_signals_history WHERE namespace = $1 AND job_id = ANY($2::text[]) RETURNING *
	), signals_in AS (
		INSERT INTO job_signals OVERRIDING SYSTEM VALUE
		SELECT r.* FROM signals_back g CROSS JOIN LATERAL jsonb_populate_record(NULL::job_signals, to_jsonb(g) - 'expires_at') r
	)
	SELECT id FROM back`

// stepStoredColumns are the columns of job_steps but those generated
// from others (replaced and awaiting, of the status: migration 033).
var stepStoredColumns = []string{"job_id", "step_id", "ord", "kind", "status", "attempts", "max_attempts",
	"retry_backoff_seconds", "input", "output", "errors", "delivery", "began_at", "completed_at", "wake_at",
	"wait_signal", "wait_jobs", "history", "attempt_ended", "namespace"}

// recall brings the jobs ids of namespace ns that are in history back
// into jobs (recallSQL), answering those it brought.
//
// jobs is small and changes fast: its statistics may say it is empty
// while a recall puts thousands of rows into it, and the statements of the
// same transaction (a restore's walk) would then probe it by namespace
// alone for each job, O(n²). A recall that grows jobs by a tenth or more
// (autovacuum's rule for an analyze), and by recallAnalyzeAt jobs at
// least, has jobs analyzed first, rows of this transaction counted. For a
// role that does not own jobs, ANALYZE only warns.
func recall(ctx context.Context, tx pgx.Tx, ns string, ids []string) ([]string, error) {
	rows, err := tx.Query(ctx, recallSQL, ns, ids)
	back, err := collect(rows, err, pgx.RowTo[string])
	if err != nil || len(back) < recallAnalyzeAt {
		return back, err
	}
	var tuples float64
	if err := tx.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass`).Scan(&tuples); err != nil {
		return nil, err
	}
	if float64(len(back)) >= tuples/10 {
		if _, err := tx.Exec(ctx, `ANALYZE jobs`); err != nil {
			return nil, err
		}
	}
	return back, nil
}

// recallAnalyzeAt is the fewest jobs a recall brings back for which jobs'
// statistics may be renewed (recall).
const recallAnalyzeAt = 1000

// recallWalkSQL is restoreWalkSQL's walk through history.
var recallWalkSQL = cancelledByWalkSQL("jobs_history")

// recallCancelledBy brings back from history, for a restore, the jobs of
// namespace ns cancelled because of the jobs from, and down the graph
// those cancelled because of them, up to limit (recallWalkSQL).
func recallCancelledBy(ctx context.Context, tx pgx.Tx, ns string, from []string, limit int) error {
	rows, err := tx.Query(ctx, recallWalkSQL, ns, from, limit)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		return err
	}
	_, err = recall(ctx, tx, ns, ids)
	return err
}

// lockJob reads cols of job id of namespace ns into dest, locking its row
// of jobs; a job in history is read there, unlocked: it ended, and only a
// recall (in a transaction that locks nothing of it first) changes it.
func lockJob(ctx context.Context, tx pgx.Tx, ns, id, cols string, dest ...any) error {
	err := tx.QueryRow(ctx, `SELECT `+cols+` FROM jobs WHERE namespace = $1 AND id = $2 FOR UPDATE`, ns, id).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		err = tx.QueryRow(ctx, `SELECT `+cols+` FROM jobs_history WHERE namespace = $1 AND id = $2 LIMIT 1`, ns, id).Scan(dest...)
	}
	return err
}
