package engine

import (
	"context"
	"errors"

	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
	"github.com/agq/agq/scheduler"
	"github.com/agq/agq/store"
)

// The operations of operators — the RESP commands and the dashboard act
// through exactly these, with the same rules and the same events.

// CancelJob is JOB.CANCEL: a waiting job is cancelled at once; a running
// one is marked, and its worker told through its heartbeat reply, its next
// JOB.UPDATE and job.cancel.
func (e *Engine) CancelJob(ctx context.Context, id string) error {
	return e.transition(ctx, func() (effects, error) {
		cfx, err := e.store.JobCancel(ctx, id)
		if err != nil || len(cfx.Moved) == 0 { // a cancellation sent again is announced once
			return effects{Effects: cfx}, refusal(aJob, id, err)
		}
		return effects{Effects: cfx, AsIs: []AsIs{cancelAsIs(id)}}, nil
	})
}

// CancelJobCascade is JOB.CANCEL … CASCADE: the job, unless it ended, is
// cancelled as CancelJob cancels it, then every job after it, down the
// graph, that has not ended, in bounded batches; a job that ended is no
// refusal.
func (e *Engine) CancelJobCascade(ctx context.Context, id string) error {
	e.flushChildren(ctx)
	var first store.Walked
	err := e.transition(ctx, func() (effects, error) {
		cfx, w, err := e.store.JobCancelCascade(ctx, id, walkRound)
		first = w
		if err != nil || len(cfx.Moved) == 0 {
			return effects{Effects: cfx}, refusal(aJob, id, err)
		}
		return effects{Effects: cfx, AsIs: []AsIs{cancelAsIs(id)}}, nil
	})
	if err == nil {
		e.walkOn(ctx, store.WalkCascade, []string{id}, first)
		e.settle(ctx, []string{id})
	}
	return err
}

// cancelAsIs announces job id's cancellation as the database has it: done,
// or asked of its holder, who is told.
func cancelAsIs(id string) AsIs {
	return AsIs{IDs: []string{id},
		Event: func(j records.JobState) string {
			if j.Status == records.StatusRunning {
				return "cancel_requested"
			}
			return j.Status
		},
		Tell: func(j records.JobState) []wakeup.Message {
			if j.Status == records.StatusRunning {
				return []wakeup.Message{{Channel: "job.cancel", Payload: j.ID}}
			}
			return nil
		},
	}
}

// RetryJob is JOB.RETRY: a failed or cancelled job goes back to queued,
// or pending while a parent has not ended; the jobs its end cancelled are
// restored down the graph.
func (e *Engine) RetryJob(ctx context.Context, id string) error {
	return e.retry(ctx, id, func() (records.Effects, error) { return e.store.JobRetry(ctx, id) })
}

// RetryJobFrom is JOB.RETRY … FROM: a failed, cancelled or completed job
// runs again from step stepID, that step and every step begun after it
// forgotten, as RetryJob restores its graph; its children that ran are
// left as they are.
func (e *Engine) RetryJobFrom(ctx context.Context, id, stepID string) error {
	if err := checkStep(records.StepParams{StepID: stepID}); err != nil {
		return err
	}
	return e.retry(ctx, id, func() (records.Effects, error) { return e.store.JobRetryFrom(ctx, id, stepID) })
}

// retry runs a retry of job id (apply), then restores its graph.
func (e *Engine) retry(ctx context.Context, id string, apply func() (records.Effects, error)) error {
	err := e.transition(ctx, func() (effects, error) {
		rfx, err := apply()
		if err != nil || len(rfx.Moved) == 0 { // a job not failed or cancelled is left as it is
			return effects{Effects: rfx}, refusal(aJob, id, err)
		}
		return effects{Effects: rfx, AsIs: []AsIs{named("retried", rfx.Moved...)}}, nil
	})
	if err == nil {
		// The jobs its end cancelled, down the graph, once committed.
		e.walk(ctx, store.WalkRestore, []string{id})
	}
	return err
}

// PauseQueue is QUEUE.PAUSE (paused) and QUEUE.RESUME (not paused).
func (e *Engine) PauseQueue(ctx context.Context, name string, paused bool) error {
	if !names.Queue(name) {
		return &records.InvalidNameError{What: "queue", Rule: names.Rule}
	}
	return e.store.QueueSetPaused(ctx, name, paused)
}

// DrainWorker is WORKER.DRAIN: the worker gets no more work, and its next
// heartbeat says drain=true.
func (e *Engine) DrainWorker(ctx context.Context, id string) error {
	return e.transition(ctx, func() (effects, error) {
		if err := e.store.WorkerDrain(ctx, id); err != nil {
			return effects{}, refusal(aWorker, id, err)
		}
		return effects{Messages: e.workerEvents(id, "draining")}, nil
	})
}

// PauseSchedule is SCHEDULE.PAUSE.
func (e *Engine) PauseSchedule(ctx context.Context, name string) error {
	return refusal(aSchedule, name, e.store.SchedulePause(ctx, name))
}

// TriggerSchedule is SCHEDULE.TRIGGER: it fires the schedule now, paused or
// not, and returns the job's id.
func (e *Engine) TriggerSchedule(ctx context.Context, name string) (string, error) {
	id, err := e.store.ScheduleTrigger(ctx, name, e.clock.Now())
	if err != nil {
		return "", refusal(aSchedule, name, err)
	}
	return id, nil
}

// ResumeSchedule is SCHEDULE.RESUME: the schedule fires again, from its
// next fire after now, or replaying what it missed when catchup is set.
func (e *Engine) ResumeSchedule(ctx context.Context, name string, catchup bool) error {
	now := e.clock.Now()
	_, err := e.store.ScheduleUpdate(ctx, name, func(sc *records.Schedule) error {
		if sc.Enabled {
			return nil
		}
		sc.Enabled = true
		if sc.NextFireAt != nil && (catchup || sc.NextFireAt.After(now)) {
			return nil // the sweep replays what was missed, up to max_catchup
		}
		spec, err := scheduler.Parse(sc.Cron, sc.Timezone)
		if err != nil {
			return &records.ScheduleCannotFireError{Name: name, Err: err}
		}
		next := spec.Next(now)
		sc.NextFireAt = &next
		return nil
	})
	return refusal(aSchedule, name, err)
}

// CreateSchedule stores a new schedule in e's namespace, where it fires;
// the same definition again is accepted, another one under its name is
// ScheduleExistsError.
func (e *Engine) CreateSchedule(ctx context.Context, sc records.Schedule) error {
	sc.Namespace = e.ns
	_, err := e.store.ScheduleCreate(ctx, sc)
	if errors.Is(err, records.ErrConflict) {
		return &records.ScheduleExistsError{Name: sc.Name}
	}
	return err
}

// UpdateSchedule lets change edit the named schedule under its lock.
func (e *Engine) UpdateSchedule(ctx context.Context, name string, change func(*records.Schedule) error) error {
	_, err := e.store.ScheduleUpdate(ctx, name, change)
	return refusal(aSchedule, name, err)
}

// DeleteSchedule deletes a schedule; deleting a missing one succeeds.
func (e *Engine) DeleteSchedule(ctx context.Context, name string) error {
	_, err := e.store.ScheduleDelete(ctx, name)
	return err
}

// ParseCron reads a schedule's cron text in its time zone.
func (e *Engine) ParseCron(text, timezone string) (records.CronSpec, error) {
	spec, err := scheduler.Parse(text, timezone)
	if err != nil {
		return nil, err
	}
	return spec, nil
}
