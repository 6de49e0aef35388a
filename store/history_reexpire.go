package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A job's history period follows from its namespace's retention when it
// moves. A retention changed later (NAMESPACE.CONFIG, or the server's
// AGQ_RETAIN_*) is applied to the jobs already in history by a walk of the
// namespace's history in id order, a batch a statement, that moves each job
// whose period changes into its new one (history_retention, migration
// 030). Periods are not dropped while a walk is under way (HistoryExpire):
// a longer retention reaches every job before its old period ends.

// reexpireBatch is how many jobs of history one statement of a walk reads.
const reexpireBatch = 5000

// HistoryReexpire records each namespace's retention (p's where it sets
// none), starts a walk of its history where it changed, and carries the
// walks under way on, reading up to p.Limit jobs in all. It answers how
// many jobs it moved into other periods.
func (s *Store) HistoryReexpire(ctx context.Context, p RetentionParams) (int, error) {
	// Only the namespaces whose retention differs from the one recorded
	// are written: a namespace seen first is taken to follow its retention
	// already, as the mover used it.
	_, err := s.Pool.Exec(ctx, `
		WITH want AS (
			SELECT name, coalesce(retain_completed, $1::interval) AS completed, coalesce(retain_failed, $2::interval) AS failed
			FROM namespaces WHERE NOT deleting
		)
		INSERT INTO history_retention (namespace, completed, failed)
		SELECT w.name, w.completed, w.failed FROM want w LEFT JOIN history_retention h ON h.namespace = w.name
		WHERE h.namespace IS NULL OR h.completed <> w.completed OR h.failed <> w.failed
		ORDER BY w.name
		ON CONFLICT (namespace) DO UPDATE SET completed = excluded.completed, failed = excluded.failed, cursor = ''`,
		p.Completed, p.Failed)
	if err != nil {
		return 0, interpretError(err)
	}
	type walk struct {
		ns                string
		completed, failed time.Duration
		cursor            string
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT namespace, extract(epoch FROM completed)::float8, extract(epoch FROM failed)::float8, cursor
		FROM history_retention WHERE cursor IS NOT NULL ORDER BY namespace`)
	walks, err := collect(rows, err, func(row pgx.CollectableRow) (w walk, err error) {
		var completed, failed float64
		err = row.Scan(&w.ns, &completed, &failed, &w.cursor)
		w.completed, w.failed = seconds(completed), seconds(failed)
		return w, err
	})
	if err != nil {
		return 0, interpretError(err)
	}
	moved, read := 0, 0
	for _, w := range walks {
		for read < p.Limit {
			n, m, next, err := s.reexpireStep(ctx, w.ns, w.completed, w.failed, w.cursor, min(reexpireBatch, p.Limit-read))
			read, moved = read+n, moved+m
			if err != nil {
				return moved, interpretError(err)
			}
			if next == nil {
				break
			}
			w.cursor = *next
		}
	}
	return moved, nil
}

// seconds is a duration of s seconds.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// reexpireBatchSQL is the next batch of a walk: up to $5 jobs of namespace
// $1 after id $4, in id order, with their expiries and their new ones under
// retention $2 (completed) and $3 (failed or cancelled), as the mover's
// expiresAt.
const reexpireBatchSQL = `
	SELECT id, expires_at, greatest(finished_at + CASE WHEN status = 'completed' THEN $2::interval ELSE $3::interval END, now())
	FROM jobs_history WHERE namespace = $1 AND id > $4 ORDER BY id LIMIT $5`

// reexpireStep moves the jobs of one batch of a walk whose period changes,
// with their steps, log lines and signals, and records the walk's progress
// in the same transaction. It answers how many jobs it read and moved,
// and the walk's next cursor (nil when the walk is over).
//
// The batch is read first and sorted out here, so that the moving
// statement joins a short array of ids: each probes its job's partition
// by key. Joined with the batch's query instead, the planner hashed the
// whole of history for every batch.
func (s *Store) reexpireStep(ctx context.Context, ns string, completed, failed time.Duration, cursor string, limit int) (read, moved int, next *string, err error) {
	type job struct {
		id       string
		old, new time.Time
	}
	rows, err := s.Pool.Query(ctx, reexpireBatchSQL, ns, completed, failed, cursor, limit)
	batch, err := collect(rows, err, func(row pgx.CollectableRow) (j job, err error) { return j, row.Scan(&j.id, &j.old, &j.new) })
	if err != nil {
		return 0, 0, nil, err
	}
	read = len(batch)
	have, err := s.periods(ctx)
	if err != nil {
		return read, 0, nil, err
	}
	var hours []time.Time
	for _, j := range batch {
		if _, ok := covering(have, j.new); !ok {
			hours = append(hours, j.new.Truncate(time.Hour))
		}
	}
	if len(hours) > 0 {
		if err := s.periodsEnsure(ctx, hours); err != nil {
			return read, 0, nil, err
		}
		if have, err = s.periods(ctx); err != nil {
			return read, 0, nil, err
		}
	}
	// Every new expiry now has its period: it is no earlier than now, so
	// no drop can have taken it since.
	var ids []string
	var olds, news []time.Time
	for _, j := range batch {
		from, _ := covering(have, j.old)
		to, ok := covering(have, j.new)
		if !ok {
			return read, 0, nil, fmt.Errorf("no history period for %v", j.new)
		}
		if to.lo != from.lo {
			ids, olds, news = append(ids, j.id), append(olds, j.old), append(news, j.new)
		}
	}
	if read == limit {
		next = &batch[read-1].id
	}
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if len(ids) > 0 {
			if err := tx.QueryRow(ctx, reexpireMoveSQL, ns, ids, olds, news).Scan(&moved); err != nil {
				return err
			}
		}
		// Unless a newer retention restarted the walk meanwhile.
		_, err := tx.Exec(ctx, `UPDATE history_retention SET cursor = $2
			WHERE namespace = $1 AND cursor = $3 AND completed = $4::interval AND failed = $5::interval`, ns, next, cursor, completed, failed)
		return err
	})
	if err != nil {
		return 0, 0, nil, err
	}
	return read, moved, next, nil
}

// covering is the period of have that t falls in.
func covering(have []period, t time.Time) (period, bool) {
	for _, p := range have {
		if !t.Before(p.lo) && t.Before(p.hi) {
			return p, true
		}
	}
	return period{}, false
}

// reexpireMoveSQL moves the jobs of namespace $1 with ids $2 from their
// expiries $3 to $4, with their steps, log lines and signals. The counts
// change by the net of each period's jobs moved in and out, in one upsert:
// a statement may not change a row twice.
const reexpireMoveSQL = `
	WITH m AS (
		SELECT * FROM unnest($2::text[], $3::timestamptz[], $4::timestamptz[]) AS m(id, old_expires_at, new_expires_at)
	), jobs_moved AS (
		UPDATE jobs_history j SET expires_at = m.new_expires_at FROM m
		WHERE j.namespace = $1 AND j.id = m.id AND j.expires_at = m.old_expires_at
		RETURNING j.namespace, j.id, j.queue, j.status, m.old_expires_at, j.expires_at
	), counted AS (
		INSERT INTO history_counts (namespace, queue, status, period_lo, n)
		SELECT d.namespace, d.queue, d.status, p.lo, sum(d.n)
		FROM (SELECT namespace, queue, status, expires_at AS at, 1 AS n FROM jobs_moved
		      UNION ALL SELECT namespace, queue, status, old_expires_at, -1 FROM jobs_moved) d
		JOIN history_periods p ON d.at >= p.lo AND d.at < p.hi
		GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
		ON CONFLICT (namespace, queue, status, period_lo) DO UPDATE SET n = history_counts.n + excluded.n
	), steps_moved AS (
		UPDATE job_steps_history s SET expires_at = m.new_expires_at FROM m
		WHERE s.namespace = $1 AND s.job_id = m.id AND s.expires_at = m.old_expires_at
	), signals_moved AS (
		UPDATE job_signals_history g SET expires_at = m.new_expires_at FROM m
		WHERE g.namespace = $1 AND g.job_id = m.id AND g.expires_at = m.old_expires_at
	), logs_moved AS (
		UPDATE job_logs_history l SET expires_at = m.new_expires_at FROM m
		WHERE l.namespace = $1 AND l.job_id = m.id AND l.expires_at = m.old_expires_at
	)
	SELECT count(*) FROM jobs_moved`
