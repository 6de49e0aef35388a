package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// JobLogAppend keeps a line the job's holder published, as the line of its
// current attempt, and returns that attempt and the job's queue. Older
// lines past MaxLogLines go, now and then. The commit does not wait for the WAL flush: a
// log line lost in a crash is only a line.
func (s *Store) JobLogAppend(ctx context.Context, id, workerID, line string) (attempt int, queue string, err error) {
	if !storable(id, workerID) {
		return 0, "", records.ErrNotHolder
	}
	err = s.asyncQuery(ctx, func(rows pgx.Rows) error {
		return rows.Scan(&attempt, &queue)
	}, `
		WITH j AS (
			SELECT namespace, id, attempt, queue FROM jobs WHERE namespace = $5 AND id = $1 AND status = 'running' AND worker_id = $2
		), added AS (
			INSERT INTO job_logs (namespace, job_id, attempt, line) SELECT namespace, id, attempt, $3 FROM j RETURNING seq
		), trimmed AS (
			-- Now and then (a trim reads up to MaxLogLines entries), the
			-- lines older than the newest MaxLogLines go.
			DELETE FROM job_logs l USING j, added
			WHERE random() < 0.02 AND l.namespace = j.namespace AND l.job_id = j.id AND l.attempt = j.attempt AND l.seq < (
				SELECT seq FROM job_logs WHERE namespace = j.namespace AND job_id = j.id AND attempt = j.attempt
				ORDER BY seq DESC OFFSET $4::int - 2 LIMIT 1)
		)
		SELECT attempt, queue FROM j`, id, workerID, line, records.MaxLogLines, s.ns)
	if err != nil {
		return 0, "", interpretError(err)
	}
	if queue == "" {
		return 0, "", records.ErrNotHolder
	}
	return attempt, queue, nil
}

// JobLogs returns the kept lines of one attempt of a job (0: its current
// or last attempt), oldest first, and that attempt; ErrNotFound for no
// such job.
func (s *Store) JobLogs(ctx context.Context, id string, attempt int) ([]string, int, error) {
	if !storable(id) {
		return nil, 0, records.ErrNotFound
	}
	var lines []string
	var current *int
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT attempt FROM jobs_all WHERE namespace = $1 AND id = $2 LIMIT 1`, s.ns, id).Scan(&current); err != nil {
			return err
		}
		if attempt == 0 {
			attempt = *current
		}
		rows, err := tx.Query(ctx, `
			SELECT line FROM (
				SELECT seq, line FROM job_logs_all WHERE namespace = $1 AND job_id = $2 AND attempt = $3 ORDER BY seq DESC LIMIT $4
			) newest ORDER BY seq`, s.ns, id, attempt, records.MaxLogLines)
		if err != nil {
			return err
		}
		lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, records.ErrNotFound
	}
	return lines, attempt, interpretError(err)
}
