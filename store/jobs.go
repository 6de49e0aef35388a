package store

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// jobColumns is the select list scanJob reads.
var jobColumns = jobCols("")

// jobCols is the select list with columns qualified by alias (e.g. "j."),
// for statements that join. A waiting job whose run_at has come is shown as
// queued: it is claimable, whatever brought it there.
func jobCols(a string) string {
	return strings.NewReplacer("@", a).Replace(`@namespace, @id, @seq, @queue, @type, @requires, @plan, @inputs, @payload, @priority,
	CASE WHEN @status IN ('scheduled', 'retrying') AND @run_at <= now() THEN 'queued' ELSE @status END,
	@attempt, @max_attempts, @retry_backoff_seconds, @timeout_seconds, @run_at, @unique_key, @worker_id, @delivery::text,
	@ack_deadline, @lease_expires_at, @deadline_at, @cancel_requested, @progress, @result, @errors,
	@created_at, @started_at, @finished_at, @updated_at, @snoozes, @after, @on_parent_failure, @fair_key, @fair_weight`)
}

// scanJob reads jobColumns, then the extra destinations.
func scanJob(row pgx.Row, extra ...any) (records.Job, error) {
	var j records.Job
	dest := []any{&j.Namespace, &j.ID, &j.Seq, &j.Queue, &j.Type, &j.Requires, rawJSON(&j.Plan), rawJSON(&j.Inputs), rawJSON(&j.Payload), &j.Priority,
		&j.Status, &j.Attempt, &j.MaxAttempts, &j.RetryBackoffSeconds, &j.TimeoutSeconds, &j.RunAt,
		&j.UniqueKey, &j.WorkerID, &j.Delivery, &j.AckDeadline, &j.LeaseExpiresAt, &j.DeadlineAt, &j.CancelRequested,
		rawJSON(&j.Progress), rawJSON(&j.Result), rawJSON(&j.Errors), &j.CreatedAt, &j.StartedAt, &j.FinishedAt, &j.UpdatedAt, &j.Snoozes,
		&j.After, &j.OnParentFailure, &j.FairKey, &j.FairWeight}
	err := row.Scan(append(dest, extra...)...)
	return j, err
}

func collectJobs(rows pgx.Rows, err error) ([]records.Job, error) {
	return collect(rows, err, func(row pgx.CollectableRow) (records.Job, error) { return scanJob(row) })
}

// collect scans the rows of a query that returned err, nil for none; its
// errors are the store's.
func collect[T any](rows pgx.Rows, err error, scan pgx.RowToFunc[T]) ([]T, error) {
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.AppendRows([]T(nil), rows, scan)
	return out, interpretError(err)
}

// Notification channels. agq_jobs carries a ReadyNote; agq_done a job id;
// agq_events a node's coalesced notes and finished ids, sent after its
// commits.
const (
	ChannelJobs   = "agq_jobs"
	ChannelDone   = "agq_done"
	ChannelKeys   = "agq_keys"
	ChannelEvents = "agq_events"
	// ChannelMoved carries a Moved: a job taken out of running by the
	// leader's watchdog, a worker's (re-)registration or a release, for subscribers
	// and for the pops its queue's or type's limits held back.
	ChannelMoved = "agq_moved"
)

// dueMillis is t in unix milliseconds, rounded up, so that a timer set for
// it never fires before t.
func dueMillis(t time.Time) int64 {
	return (t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// maxNotePayload keeps a note under PostgreSQL's 8000-byte NOTIFY limit.
const maxNotePayload = 7000

// notifyReady queues a pg_notify in tx; it is delivered at commit.
func notifyReady(ctx context.Context, tx pgx.Tx, note records.ReadyNote) error {
	b, _ := json.Marshal(note)
	if len(b) > maxNotePayload {
		// Without requirements the note wakes any waiter of the queue,
		// which checks the database: a little more work, nothing missed.
		note.Requires = nil
		b, _ = json.Marshal(note)
	}
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelJobs, string(b))
	return err
}

// rawJSON scans a json or jsonb column as its bytes: pgx would run a
// json.RawMessage destination through json.Unmarshal, which checks what
// PostgreSQL already checked. NULL scans as nil, as before.
func rawJSON(p *json.RawMessage) *[]byte { return (*[]byte)(p) }

func nullJSON(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// JobGet returns one job of the store's namespace, by its key; a job of
// another namespace is not found.
func (s *Store) JobGet(ctx context.Context, id string) (records.Job, error) {
	if !storable(id) {
		return records.Job{}, records.ErrNotFound
	}
	// Its count of steps is the highest order of one (job_steps_order).
	var steps int
	var submittedBy string
	j, err := scanJob(s.Pool.QueryRow(ctx, `SELECT `+jobColumns+`,
		(SELECT coalesce(max(ord), 0) FROM job_steps_all WHERE namespace = $1 AND job_id = $2), coalesce(submitted_by, '')
		FROM jobs_all WHERE namespace = $1 AND id = $2 LIMIT 1`, s.ns, id), &steps, &submittedBy)
	j.Steps, j.SubmittedBy = steps, submittedBy
	if err == nil && j.After != nil {
		j.PendingParents, err = s.PendingParents(ctx, id)
	}
	return j, interpretError(err)
}

// Notify sends payloads on a channel in one statement, committed without
// waiting for the WAL flush: PostgreSQL holds its notification-queue lock
// until the commit returns, which must never be a job's flush.
func (s *Store) Notify(ctx context.Context, channel string, payloads []string) error {
	return interpretError(s.asyncQuery(ctx, nil, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, channel, payloads))
}

// JobStates reads the state of jobs of the store's namespace, in one
// statement, by their key; missing ids are left out. A waiting job whose
// time has come reads as queued.
func (s *Store) JobStates(ctx context.Context, ids []string) ([]records.JobState, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT namespace, id, queue, CASE WHEN status IN ('scheduled', 'retrying') AND run_at <= now() THEN 'queued' ELSE status END,
			attempt, worker_id
		FROM jobs_all WHERE namespace = $1 AND id = ANY($2::text[])`, s.ns, ids)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []records.JobState
	for rows.Next() {
		var j records.JobState
		if err := rows.Scan(&j.Namespace, &j.ID, &j.Queue, &j.Status, &j.Attempt, &j.WorkerID); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, j)
	}
	return out, interpretError(rows.Err())
}
