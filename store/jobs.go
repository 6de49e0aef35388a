package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Job statuses.
const (
	StatusQueued    = "queued"
	StatusScheduled = "scheduled"
	StatusRunning   = "running"
	StatusRetrying  = "retrying"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// IsTerminal reports whether a status is final.
func IsTerminal(status string) bool {
	return status == StatusCompleted || status == StatusFailed || status == StatusCancelled
}

// Job is one row of jobs.
type Job struct {
	ID                  string
	Seq                 int64 // submission order
	Queue               string
	Type                string
	Requires            []string
	Plan                json.RawMessage
	Inputs              json.RawMessage
	Payload             json.RawMessage
	Priority            int
	Status              string
	Attempt             int
	MaxAttempts         int
	RetryBackoffSeconds float64
	TimeoutSeconds      int
	RunAt               time.Time
	UniqueKey           *string
	WorkerID            *string
	AckDeadline         *time.Time
	LeaseExpiresAt      *time.Time
	DeadlineAt          *time.Time
	CancelRequested     bool
	Progress            json.RawMessage
	Result              json.RawMessage
	Errors              json.RawMessage
	CreatedAt           time.Time
	StartedAt           *time.Time
	FinishedAt          *time.Time
	UpdatedAt           time.Time
}

// jobColumns is the select list scanJob reads.
var jobColumns = jobCols("")

// jobCols is the select list with columns qualified by alias (e.g. "j."),
// for statements that join. A waiting job whose run_at has come is shown as
// queued: it is claimable, whatever brought it there.
func jobCols(a string) string {
	return strings.NewReplacer("@", a).Replace(`@id, @seq, @queue, @type, @requires, @plan, @inputs, @payload, @priority,
	CASE WHEN @status IN ('scheduled', 'retrying') AND @run_at <= now() THEN 'queued' ELSE @status END,
	@attempt, @max_attempts, @retry_backoff_seconds, @timeout_seconds, @run_at, @unique_key, @worker_id,
	@ack_deadline, @lease_expires_at, @deadline_at, @cancel_requested, @progress, @result, @errors,
	@created_at, @started_at, @finished_at, @updated_at`)
}

func scanJob(row pgx.Row) (Job, error) {
	var j Job
	err := row.Scan(&j.ID, &j.Seq, &j.Queue, &j.Type, &j.Requires, &j.Plan, &j.Inputs, &j.Payload, &j.Priority,
		&j.Status, &j.Attempt, &j.MaxAttempts, &j.RetryBackoffSeconds, &j.TimeoutSeconds, &j.RunAt,
		&j.UniqueKey, &j.WorkerID, &j.AckDeadline, &j.LeaseExpiresAt, &j.DeadlineAt, &j.CancelRequested,
		&j.Progress, &j.Result, &j.Errors, &j.CreatedAt, &j.StartedAt, &j.FinishedAt, &j.UpdatedAt)
	return j, err
}

func collectJobs(rows pgx.Rows, err error) ([]Job, error) {
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, interpretError(err)
		}
		out = append(out, j)
	}
	return out, interpretError(rows.Err())
}

// NewJob is a validated submission.
type NewJob struct {
	ID                  string
	Queue               string
	Type                string
	Requires            []string
	Plan                json.RawMessage
	Inputs              json.RawMessage
	Payload             json.RawMessage
	Priority            int
	MaxAttempts         int
	RetryBackoffSeconds float64
	TimeoutSeconds      int
	// RunAt is the zero time for "now".
	RunAt     time.Time
	UniqueKey string
}

// Notification channels. agq_jobs carries a ReadyNote; agq_done a job id.
const (
	ChannelJobs = "agq_jobs"
	ChannelDone = "agq_done"
	ChannelKeys = "agq_keys"
)

// ReadyNote tells listeners that N jobs needing Requires became claimable
// in Queue, now or at At (unix milliseconds; 0 = now).
type ReadyNote struct {
	Queue    string   `json:"q"`
	N        int      `json:"n"`
	Requires []string `json:"r,omitempty"`
	At       int64    `json:"at,omitempty"`

	// Timed and Tries are the listener's own: a note that came due by a
	// timer, and how often it was re-armed.
	Timed bool `json:"-"`
	Tries int  `json:"-"`
}

// dueMillis is t in unix milliseconds, rounded up, so that a timer set for
// it never fires before t.
func dueMillis(t time.Time) int64 {
	return (t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// maxNotePayload keeps a note under PostgreSQL's 8000-byte NOTIFY limit.
const maxNotePayload = 7000

// notifyReady queues a pg_notify in tx; it is delivered at commit.
func notifyReady(ctx context.Context, tx pgx.Tx, note ReadyNote) error {
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

// SubmitResult is the outcome of one submitted job.
type SubmitResult struct {
	ID      string
	Created bool
	Queue   string
}

// JobsSubmit inserts jobs in one transaction. A job whose id, or whose
// unique_key held by an unfinished job, already exists is not inserted
// again: its result names the existing job with Created false.
func (s *Store) JobsSubmit(ctx context.Context, jobs []NewJob) ([]SubmitResult, error) {
	results := make([]SubmitResult, len(jobs))
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		for _, j := range jobs {
			var uniq *string
			if j.UniqueKey != "" {
				uniq = &j.UniqueKey
			}
			if j.Requires == nil {
				j.Requires = []string{} // the column is NOT NULL: no requirement
			}
			var runAt *time.Time
			if !j.RunAt.IsZero() {
				runAt = &j.RunAt
			}
			// The CTE registers the queue, inserts unless a unique index
			// objects, and otherwise finds the job that holds the id or key.
			batch.Queue(`
				WITH q AS (
					INSERT INTO queues (name) VALUES ($2) ON CONFLICT DO NOTHING
				), ins AS (
					INSERT INTO jobs (id, queue, type, requires, plan, inputs, payload, priority,
						status, max_attempts, retry_backoff_seconds, timeout_seconds, run_at, unique_key)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
						CASE WHEN $12::timestamptz > now() THEN 'scheduled' ELSE 'queued' END,
						$9, $10, $11, coalesce($12::timestamptz, now()), $13)
					ON CONFLICT DO NOTHING
					RETURNING id, true AS created
				)
				SELECT id, created FROM ins
				UNION ALL
				SELECT id, false FROM jobs
				WHERE NOT EXISTS (SELECT 1 FROM ins)
				  AND (id = $1 OR (unique_key = $13 AND status IN ('queued', 'scheduled', 'running', 'retrying')))
				LIMIT 1`,
				j.ID, j.Queue, j.Type, j.Requires, nullJSON(j.Plan), nullJSON(j.Inputs), nullJSON(j.Payload), j.Priority,
				j.MaxAttempts, j.RetryBackoffSeconds, j.TimeoutSeconds, runAt, uniq)
		}
		br := tx.SendBatch(ctx, batch)
		for i := range jobs {
			var id string
			var created bool
			if err := br.QueryRow().Scan(&id, &created); err != nil {
				br.Close()
				if errors.Is(err, pgx.ErrNoRows) {
					// The conflicting row committed after this statement's
					// snapshot was taken; the client's retry will find it.
					return fmt.Errorf("%w: job %d conflicts with a job submitted concurrently", ErrConflict, i)
				}
				return fmt.Errorf("job %d: %w", i, err)
			}
			results[i] = SubmitResult{ID: id, Created: created, Queue: jobs[i].Queue}
		}
		if err := br.Close(); err != nil {
			return err
		}
		return notifySubmitted(ctx, tx, jobs, results)
	})
	if err != nil {
		return nil, interpretError(err)
	}
	return results, nil
}

// notifySubmitted sends one ReadyNote per distinct (queue, requires, due
// time) among the created jobs, so listeners wake as many waiters as there
// are new jobs and no more.
func notifySubmitted(ctx context.Context, tx pgx.Tx, jobs []NewJob, results []SubmitResult) error {
	type groupKey struct {
		queue, requires string
		at              int64
	}
	counts := map[groupKey]*ReadyNote{}
	var order []groupKey
	now := time.Now()
	for i, j := range jobs {
		if !results[i].Created {
			continue
		}
		var at int64
		if j.RunAt.After(now) {
			at = dueMillis(j.RunAt)
		}
		k := groupKey{j.Queue, fmt.Sprint(j.Requires), at}
		if n := counts[k]; n != nil {
			n.N++
			continue
		}
		counts[k] = &ReadyNote{Queue: j.Queue, N: 1, Requires: j.Requires, At: at}
		order = append(order, k)
	}
	for _, k := range order {
		if err := notifyReady(ctx, tx, *counts[k]); err != nil {
			return err
		}
	}
	return nil
}

func nullJSON(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// JobGet returns one job.
func (s *Store) JobGet(ctx context.Context, id string) (Job, error) {
	j, err := scanJob(s.Pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, id))
	return j, interpretError(err)
}
