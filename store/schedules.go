package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// scheduleColumns is the select list scanSchedule reads.
const scheduleColumns = `namespace, name, cron, timezone, queue, job, enabled, max_catchup,
	next_fire_at, last_fire_at, fires, skipped, created_at, updated_at`

func scanSchedule(row pgx.Row) (records.Schedule, error) {
	var sc records.Schedule
	var job []byte
	err := row.Scan(&sc.Namespace, &sc.Name, &sc.Cron, &sc.Timezone, &sc.Queue, &job, &sc.Enabled, &sc.MaxCatchup,
		&sc.NextFireAt, &sc.LastFireAt, &sc.Fires, &sc.Skipped, &sc.CreatedAt, &sc.UpdatedAt)
	if err != nil {
		return records.Schedule{}, err
	}
	if err := json.Unmarshal(job, &sc.Job); err != nil {
		return records.Schedule{}, fmt.Errorf("schedule %s: its job template: %w", sc.Name, err)
	}
	if sc.Job.Requires == nil {
		sc.Job.Requires = []string{}
	}
	return sc, nil
}

func templateJSON(t records.JobTemplate) (string, error) {
	if t.Requires == nil {
		t.Requires = []string{}
	}
	b, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("encoding job template: %w", err)
	}
	return string(b), nil
}

// scheduleIDPart is the schedule's name as it appears in job ids: the name
// itself when it is short and uses only job-id characters (as the commands
// require), otherwise a sanitized prefix and a hash of the whole name, so
// that two names never share their jobs.
func scheduleIDPart(name string) string {
	ok := len(name) >= 1 && len(name) <= 64
	for i := 0; ok && i < len(name); i++ {
		ok = idByte(name[i])
	}
	if ok {
		return name
	}
	b := make([]byte, 0, 40)
	for i := 0; i < len(name) && len(b) < 40; i++ {
		if idByte(name[i]) {
			b = append(b, name[i])
		} else {
			b = append(b, '_')
		}
	}
	sum := sha256.Sum256([]byte(name))
	return string(b) + "-" + hex.EncodeToString(sum[:8])
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// ScheduleJobID is the id of the job a schedule's fire at fireAt submits:
// sched-<name>-<unix seconds>. Every node, and every retry, derives the
// same id for the same fire, so the job's primary key refuses a second one.
func ScheduleJobID(name string, fireAt time.Time) string {
	return "sched-" + scheduleIDPart(name) + "-" + strconv.FormatInt(fireAt.Unix(), 10)
}

// ScheduleManualJobID is the id of the job SCHEDULE.TRIGGER submits at at:
// sched-<name>-manual-<unix milliseconds>.
func ScheduleManualJobID(name string, at time.Time) string {
	return "sched-" + scheduleIDPart(name) + "-manual-" + strconv.FormatInt(at.UnixMilli(), 10)
}

// ScheduleCreate inserts sc in the store's namespace unless a schedule of
// that name exists there. An
// existing one with the same definition (cron, timezone, queue, job,
// max_catchup; not its enabled state, which PAUSE and RESUME change) makes
// created false; one with another definition is ErrConflict.
func (s *Store) ScheduleCreate(ctx context.Context, sc records.Schedule) (created bool, err error) {
	job, err := templateJSON(sc.Job)
	if err != nil {
		return false, err
	}
	for range 3 {
		var inserted bool
		err := s.Pool.QueryRow(ctx, `
			INSERT INTO schedules (namespace, name, cron, timezone, queue, job, enabled, max_catchup, next_fire_at)
			VALUES ($9, $1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (namespace, name) DO NOTHING
			RETURNING true`,
			sc.Name, sc.Cron, sc.Timezone, sc.Queue, job, sc.Enabled, sc.MaxCatchup, sc.NextFireAt, s.ns).Scan(&inserted)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return false, interpretError(err)
		}
		// jsonb equality ignores key order and spacing.
		var same bool
		err = s.Pool.QueryRow(ctx, `
			SELECT cron = $2 AND timezone = $3 AND queue = $4 AND job = $5::jsonb AND max_catchup = $6
			FROM schedules WHERE namespace = $7 AND name = $1`,
			sc.Name, sc.Cron, sc.Timezone, sc.Queue, job, sc.MaxCatchup, s.ns).Scan(&same)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // deleted between the two statements: insert again
		case err != nil:
			return false, interpretError(err)
		case same:
			return false, nil
		}
		return false, fmt.Errorf("%w: schedule %s exists with another definition", records.ErrConflict, sc.Name)
	}
	return false, fmt.Errorf("%w: schedule %s is being created and deleted concurrently", records.ErrConflict, sc.Name)
}

// ScheduleGet returns one schedule of the store's namespace.
func (s *Store) ScheduleGet(ctx context.Context, name string) (records.Schedule, error) {
	if !storable(name) {
		return records.Schedule{}, records.ErrNotFound
	}
	sc, err := scanSchedule(s.Pool.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE namespace = $1 AND name = $2`,
		s.ns, name))
	return sc, interpretError(err)
}

// ScheduleList returns every schedule of the store's namespace, by name
// (schedules_pkey).
func (s *Store) ScheduleList(ctx context.Context) ([]records.Schedule, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE namespace = $1 ORDER BY name`, s.ns)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []records.Schedule
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, interpretError(err)
		}
		out = append(out, sc)
	}
	return out, interpretError(rows.Err())
}

// ScheduleUpdate locks the named schedule of the store's namespace, lets
// change edit it, and writes
// back its definition, enabled state and next fire. An error from change
// is returned as it is and nothing is written.
func (s *Store) ScheduleUpdate(ctx context.Context, name string, change func(*records.Schedule) error) (records.Schedule, error) {
	var out records.Schedule
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		sc, err := scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE namespace = $1 AND name = $2 FOR UPDATE`,
			s.ns, name))
		if err != nil {
			return interpretError(err)
		}
		if err := change(&sc); err != nil {
			return err
		}
		job, err := templateJSON(sc.Job)
		if err != nil {
			return err
		}
		out, err = scanSchedule(tx.QueryRow(ctx, `
			UPDATE schedules SET cron = $2, timezone = $3, queue = $4, job = $5, enabled = $6,
				max_catchup = $7, next_fire_at = $8, updated_at = now()
			WHERE namespace = $9 AND name = $1
			RETURNING `+scheduleColumns,
			name, sc.Cron, sc.Timezone, sc.Queue, job, sc.Enabled, sc.MaxCatchup, sc.NextFireAt, s.ns))
		return interpretError(err)
	})
	return out, err
}

// SchedulePause disables a schedule of the store's namespace; its next_fire_at is kept, so that a
// resume may replay the fires missed while it was paused.
func (s *Store) SchedulePause(ctx context.Context, name string) error {
	tag, err := s.Pool.Exec(ctx, `
		UPDATE schedules SET enabled = false, updated_at = CASE WHEN enabled THEN now() ELSE updated_at END
		WHERE namespace = $2 AND name = $1`, name, s.ns)
	if err != nil {
		return interpretError(err)
	}
	if tag.RowsAffected() == 0 {
		return records.ErrNotFound
	}
	return nil
}

// ScheduleDelete deletes a schedule of the store's namespace; the jobs it
// fired stay. It reports
// whether there was one.
func (s *Store) ScheduleDelete(ctx context.Context, name string) (bool, error) {
	tag, err := s.Pool.Exec(ctx, `DELETE FROM schedules WHERE namespace = $2 AND name = $1`, name, s.ns)
	if err != nil {
		return false, interpretError(err)
	}
	return tag.RowsAffected() > 0, nil
}

// ScheduleTrigger fires a schedule of the store's namespace by hand at at, whether it is enabled or
// not, and returns the id of the job (ScheduleManualJobID). Its next
// scheduled fire is unchanged.
func (s *Store) ScheduleTrigger(ctx context.Context, name string, at time.Time) (string, error) {
	id := ScheduleManualJobID(name, at)
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		sc, err := scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE namespace = $1 AND name = $2 FOR UPDATE`,
			s.ns, name))
		if err != nil {
			return interpretError(err)
		}
		created, err := insertFires(ctx, tx, sc, []string{id}, []time.Time{at})
		if err != nil || created == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `
			UPDATE schedules SET fires = fires + 1, last_fire_at = greatest(last_fire_at, $2), updated_at = now()
			WHERE namespace = $3 AND name = $1`, name, at, s.ns)
		return err
	})
	if err != nil {
		return "", interpretError(err)
	}
	return id, nil
}

// FirePlan is what one sweep does with a due schedule.
type FirePlan struct {
	// Fires are the fire times to submit a job for, oldest first.
	Fires []time.Time
	// Skipped counts missed fires not submitted (beyond max_catchup).
	Skipped int64
	// Next becomes next_fire_at: the first fire not handled, normally
	// after now (before it only when a long catch-up is done in parts);
	// the zero time when the spec fires no more.
	Next time.Time
}

// ScheduleFireDueParams are the inputs of ScheduleFireDue.
type ScheduleFireDueParams struct {
	// Now is the scheduler's clock: schedules whose next_fire_at is not
	// after it are due.
	Now time.Time
	// Plan works out the fires of a due schedule. Its error is reported in
	// the result, and the schedule stops firing (next_fire_at NULL) rather
	// than being retried at every sweep.
	Plan func(records.Schedule) (FirePlan, error)
}

// FireResult is what ScheduleFireDue did with one schedule.
type FireResult struct {
	// Namespace is the schedule's, where its jobs went.
	Namespace string
	Schedule  string
	Queue     string
	// Fires are the fire times planned; Created the jobs inserted (a fire
	// whose job exists already is not inserted again).
	Fires   []time.Time
	Created int
	Skipped int64
	Next    time.Time
	PlanErr error
}

// ScheduleFireDue claims the most overdue enabled schedule of any namespace
// (SKIP LOCKED:
// another scheduler's claim is passed over), submits the jobs of its due
// fires and advances its next_fire_at, all in one transaction. found is
// false when no schedule is due. Two schedulers, a retry after a failed
// commit, or a restart never double a fire: the claim serialises them, and
// each fire's job id is derived from the schedule and the fire time.
func (s *Store) ScheduleFireDue(ctx context.Context, p ScheduleFireDueParams) (res FireResult, found bool, err error) {
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		res, found = FireResult{}, false
		// schedules_due serves the filter and the order.
		sc, err := scanSchedule(tx.QueryRow(ctx, `
			SELECT `+scheduleColumns+` FROM schedules
			WHERE enabled AND next_fire_at IS NOT NULL AND next_fire_at <= $1
			ORDER BY next_fire_at
			LIMIT 1
			FOR UPDATE SKIP LOCKED`, p.Now))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		res.Namespace, res.Schedule, res.Queue = sc.Namespace, sc.Name, sc.Queue
		plan, planErr := p.Plan(sc)
		if planErr != nil {
			res.PlanErr = planErr
			_, err := tx.Exec(ctx, `UPDATE schedules SET next_fire_at = NULL, updated_at = now() WHERE namespace = $2 AND name = $1`,
				sc.Name, sc.Namespace)
			return err
		}
		res.Fires, res.Skipped, res.Next = plan.Fires, plan.Skipped, plan.Next
		ids := make([]string, len(plan.Fires))
		var last *time.Time
		for i, at := range plan.Fires {
			ids[i] = ScheduleJobID(sc.Name, at)
			if last == nil || at.After(*last) {
				last = &plan.Fires[i]
			}
		}
		if len(ids) > 0 {
			if res.Created, err = insertFires(ctx, tx, sc, ids, plan.Fires); err != nil {
				return err
			}
		}
		var next *time.Time
		if !plan.Next.IsZero() {
			next = &plan.Next
		}
		_, err = tx.Exec(ctx, `
			UPDATE schedules SET next_fire_at = $2,
				last_fire_at = greatest(last_fire_at, $3::timestamptz), -- greatest ignores NULLs
				fires = fires + $4, skipped = skipped + $5, updated_at = now()
			WHERE namespace = $6 AND name = $1`, sc.Name, next, last, res.Created, plan.Skipped, sc.Namespace)
		return err
	})
	if err != nil {
		return FireResult{}, false, interpretError(err)
	}
	return res, found, nil
}

// insertFires inserts one job of sc's template per id, in sc's namespace,
// with JobsSubmit's
// idempotency (an existing id is left alone), and wakes the waiters of the
// queue for the jobs it created. The jobs get their fair-share place from
// the first claim of their queue. A fire's job is due at its fire time, or
// now if that is later, so that catch-up jobs keep their order in the queue.
func insertFires(ctx context.Context, tx pgx.Tx, sc records.Schedule, ids []string, fires []time.Time) (int, error) {
	t := sc.Job
	if t.Requires == nil {
		t.Requires = []string{}
	}
	rows, err := tx.Query(ctx, `
		WITH q AS (
			INSERT INTO queues (namespace, name) VALUES ($15, $1) ON CONFLICT DO NOTHING
		)
		INSERT INTO jobs (namespace, id, queue, type, requires, plan, inputs, payload, priority,
			status, max_attempts, retry_backoff_seconds, timeout_seconds, run_at, fair_key, fair_weight)
		SELECT $15, f.id, $1, $2, $3, $4, $5, $6, $7, 'queued', $8, $9, $10, least(f.at, now()), $13, $14
		FROM unnest($11::text[], $12::timestamptz[]) AS f(id, at)
		ON CONFLICT DO NOTHING
		RETURNING id`,
		sc.Queue, t.Type, t.Requires, nullJSON(t.Plan), nullJSON(t.Inputs), nullJSON(t.Payload), t.Priority,
		t.MaxAttempts, t.RetryBackoffSeconds, t.TimeoutSeconds, ids, fires, t.FairKey, max(t.FairWeight, 1), sc.Namespace)
	if err != nil {
		return 0, err
	}
	created := 0
	for rows.Next() {
		created++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if created == 0 {
		return 0, nil
	}
	return created, notifyReady(ctx, tx, records.ReadyNote{Namespace: sc.Namespace, Queue: sc.Queue, N: created, Requires: t.Requires})
}
