package commands

import (
	"context"
	"errors"
	"time"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/resp"
	"github.com/agq/agq/store"
)

// The operations below are the commands that change state, taken out of
// their handlers so that the dashboard acts through exactly the same rules
// (and publishes exactly the same events) as redis-cli. An error that is a
// *resp.Error is the reply the command gives; anything else is a failure
// of the database or of agq.

// CancelJob is JOB.CANCEL: a waiting job is cancelled at once; a running
// one is marked, and its worker told through its heartbeat reply, its next
// JOB.UPDATE and job.cancel.
func (s *Server) CancelJob(ctx context.Context, id string) error {
	if err := s.store.JobCancel(ctx, id); err != nil {
		return jobError(id, err)
	}
	s.publishAsIs(ctx, func(j store.JobState) string {
		if j.Status == store.StatusRunning {
			s.hub.PublishMessages([]wakeup.Message{{Channel: "job.cancel", Payload: j.ID}})
			return "cancel_requested"
		}
		return j.Status
	}, id)
	return nil
}

// RetryJob is JOB.RETRY: a failed or cancelled job goes back to queued.
func (s *Server) RetryJob(ctx context.Context, id string) error {
	if err := s.store.JobRetry(ctx, id); err != nil {
		return jobError(id, err)
	}
	s.publishAsIs(ctx, func(store.JobState) string { return "retried" }, id)
	return nil
}

// PauseQueue is QUEUE.PAUSE (paused) and QUEUE.RESUME (not paused).
func (s *Server) PauseQueue(ctx context.Context, name string, paused bool) error {
	if !queuePattern.MatchString(name) {
		return resp.Errorf("queue must be 1-128 letters, digits, '_', '-' or '.'")
	}
	return s.store.QueueSetPaused(ctx, name, paused)
}

// DrainWorker is WORKER.DRAIN: the worker gets no more work, and its next
// heartbeat says drain=true.
func (s *Server) DrainWorker(ctx context.Context, id string) error {
	if err := s.store.WorkerDrain(ctx, id); err != nil {
		if errors.Is(err, store.ErrWorkerUnknown) {
			return resp.Errorf("Worker not registered: %s", id)
		}
		return err
	}
	s.publishWorkerEvent(id, "draining")
	return nil
}

// PauseSchedule is SCHEDULE.PAUSE.
func (s *Server) PauseSchedule(ctx context.Context, name string) error {
	return scheduleNotFound(name, s.store.SchedulePause(ctx, name))
}

// TriggerSchedule is SCHEDULE.TRIGGER: it fires the schedule now, paused or
// not, and returns the job's id.
func (s *Server) TriggerSchedule(ctx context.Context, name string) (string, error) {
	id, err := s.store.ScheduleTrigger(ctx, name, time.Now())
	if err != nil {
		return "", scheduleNotFound(name, err)
	}
	return id, nil
}
