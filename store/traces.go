package store

import (
	"context"
	"time"
)

// AttemptTrace is what a span of a job's current delivery needs: the trace
// context the job is stored with, and the delivery it is about.
type AttemptTrace struct {
	JobID                   string
	TraceParent, TraceState string
	Attempt                 int
	WorkerID                string
	Delivery                string
	StartedAt               time.Time
	// StepBeganAt is when the step asked for began (StepTraces only).
	StepBeganAt time.Time
}

// AttemptTraces reads the current deliveries of the running jobs among ids,
// jobs of s's namespace, that carry trace context, before a report ends
// them. Only a node with tracing on asks; by primary key.
func (s *Store) AttemptTraces(ctx context.Context, ids []string) (map[string]AttemptTrace, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT id, traceparent, coalesce(tracestate, ''), attempt, coalesce(worker_id, ''),
			coalesce(delivery::text, ''), coalesce(started_at, now())
		FROM jobs WHERE namespace = $1 AND id = ANY($2::text[]) AND status = 'running' AND traceparent IS NOT NULL`, s.ns, ids)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	out := map[string]AttemptTrace{}
	for rows.Next() {
		var t AttemptTrace
		if err := rows.Scan(&t.JobID, &t.TraceParent, &t.TraceState, &t.Attempt, &t.WorkerID, &t.Delivery, &t.StartedAt); err != nil {
			return nil, interpretError(err)
		}
		out[t.JobID] = t
	}
	return out, interpretError(rows.Err())
}

// StepTrace reads a running job's current delivery and when its step
// began, before a STEP.COMPLETE or STEP.FAIL ends the step; found false
// when the job carries no trace context. By primary keys, in s's
// namespace.
func (s *Store) StepTrace(ctx context.Context, jobID, stepID string) (AttemptTrace, bool, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT j.id, j.traceparent, coalesce(j.tracestate, ''), j.attempt, coalesce(j.worker_id, ''),
			coalesce(j.delivery::text, ''), coalesce(j.started_at, now()), s.began_at
		FROM jobs j JOIN job_steps s ON s.namespace = j.namespace AND s.job_id = j.id AND s.step_id = $3 AND NOT s.replaced
		WHERE j.namespace = $1 AND j.id = $2 AND j.status = 'running' AND j.traceparent IS NOT NULL`, s.ns, jobID, stepID)
	if err != nil {
		return AttemptTrace{}, false, interpretError(err)
	}
	defer rows.Close()
	var t AttemptTrace
	found := false
	for rows.Next() {
		found = true
		if err := rows.Scan(&t.JobID, &t.TraceParent, &t.TraceState, &t.Attempt, &t.WorkerID, &t.Delivery, &t.StartedAt, &t.StepBeganAt); err != nil {
			return AttemptTrace{}, false, interpretError(err)
		}
	}
	return t, found, interpretError(rows.Err())
}
