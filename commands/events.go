package commands

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/store"
)

// A job's transitions are published, after their commit, on
// job.<id>.status (its status record) and queue.<name>.events (the event,
// the job id and its attempt) — and only while some node has a subscriber,
// so that nobody listening costs the job flow nothing.

// statusEvent is one transition of one job.
type statusEvent struct {
	JobID    string    `json:"job_id"`
	Queue    string    `json:"queue"`
	Event    string    `json:"event"`
	Status   string    `json:"status"`
	Attempt  int       `json:"attempt"`
	WorkerID string    `json:"worker_id,omitempty"`
	At       time.Time `json:"at"`
}

// queueEvent is a transition as queue.<name>.events carries it.
type queueEvent struct {
	Event   string    `json:"event"`
	JobID   string    `json:"job_id"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// publishStatus sends the transitions to the subscribers of every node.
func (s *Server) publishStatus(evs []statusEvent) {
	if len(evs) == 0 {
		return
	}
	now := time.Now().UTC()
	msgs := make([]wakeup.Message, 0, 2*len(evs))
	for _, e := range evs {
		e.At = now
		st, _ := json.Marshal(e)
		qe, _ := json.Marshal(queueEvent{Event: e.Event, JobID: e.JobID, Attempt: e.Attempt, At: now})
		msgs = append(msgs,
			wakeup.Message{Channel: "job." + e.JobID + ".status", Payload: string(st)},
			wakeup.Message{Channel: "queue." + e.Queue + ".events", Payload: string(qe)})
	}
	s.hub.PublishMessages(msgs)
}

// publishSubmitted publishes the jobs a submission created.
func (s *Server) publishSubmitted(jobs []store.NewJob, res []store.SubmitResult, errs []error) {
	if !s.hub.Wanted() {
		return
	}
	now := time.Now()
	var evs []statusEvent
	for i, r := range res {
		if (errs != nil && errs[i] != nil) || !r.Created {
			continue
		}
		status := store.StatusQueued
		if jobs[i].RunAt.After(now) {
			status = store.StatusScheduled
		}
		evs = append(evs, statusEvent{JobID: r.ID, Queue: r.Queue, Event: "submitted", Status: status})
	}
	s.publishStatus(evs)
}

// publishStarted publishes deliveries.
func (s *Server) publishStarted(claimed []store.Claimed) {
	if !s.hub.Wanted() {
		return
	}
	evs := make([]statusEvent, len(claimed))
	for i, c := range claimed {
		evs[i] = statusEvent{JobID: c.Job.ID, Queue: c.Job.Queue, Event: "started", Status: store.StatusRunning,
			Attempt: c.Job.Attempt, WorkerID: c.Worker}
	}
	s.publishStatus(evs)
}

// publishAsIs publishes the jobs' status as the database has it now, for
// transitions whose outcome the caller does not know in full (a failure
// retried or final, a cancellation done or only asked): one read, only
// while someone listens. event names the transition from the status.
func (s *Server) publishAsIs(ctx context.Context, event func(store.JobState) string, ids ...string) {
	if !s.hub.Wanted() || len(ids) == 0 {
		return
	}
	states, err := s.store.JobStates(ctx, ids)
	if err != nil {
		s.log.Warn().Err(err).Msg("reading jobs for their status messages")
		return
	}
	evs := make([]statusEvent, len(states))
	for i, j := range states {
		evs[i] = statusEvent{JobID: j.ID, Queue: j.Queue, Event: event(j), Status: j.Status, Attempt: j.Attempt}
		if j.WorkerID != nil {
			evs[i].WorkerID = *j.WorkerID
		}
	}
	s.publishStatus(evs)
}

// publishFinished publishes the final reports a group applied: a failure
// that left the job waiting is a retry.
func (s *Server) publishFinished(ctx context.Context, reports []store.JobUpdateParams, errs []error) {
	if !s.hub.Wanted() {
		return
	}
	var ids []string
	for i, p := range reports {
		if errs[i] == nil || errors.Is(errs[i], store.ErrJobCancelled) {
			ids = append(ids, p.ID)
		}
	}
	s.publishAsIs(ctx, func(j store.JobState) string {
		if j.Status != store.StatusFailed && j.Status != store.StatusCompleted && j.Status != store.StatusCancelled {
			return store.StatusRetrying
		}
		return j.Status
	}, ids...)
}

// publishWorkerEvent tells worker.<id>.events what happened to a worker.
func (s *Server) publishWorkerEvent(id, event string) {
	if !s.hub.Wanted() {
		return
	}
	s.hub.PublishMessages([]wakeup.Message{workerEvent(id, event)})
}

// workerEvent is worker.<id>.events's message for event.
func workerEvent(id, event string) wakeup.Message {
	b, _ := json.Marshal(struct {
		Event    string    `json:"event"`
		WorkerID string    `json:"worker_id"`
		At       time.Time `json:"at"`
	}{event, id, time.Now().UTC()})
	return wakeup.Message{Channel: "worker." + id + ".events", Payload: string(b)}
}

// DeliverMoved tells this node's subscribers of a job moved out of running
// by the leader's watchdog or a worker's (re-)registration, on any node, or
// of a worker the watchdog declared dead: each node hears the move itself,
// so it is delivered here only.
func (s *Server) DeliverMoved(m store.Moved) {
	if m.DeadWorker != "" {
		s.broker.deliver(workerEvent(m.DeadWorker, "dead"))
		return
	}
	event := m.Status
	if m.Status == store.StatusQueued {
		event = "requeued"
	}
	now := time.Now().UTC()
	st, _ := json.Marshal(statusEvent{JobID: m.ID, Queue: m.Queue, Event: event, Status: m.Status, Attempt: m.Attempt, At: now})
	qe, _ := json.Marshal(queueEvent{Event: event, JobID: m.ID, Attempt: m.Attempt, At: now})
	s.broker.deliver(wakeup.Message{Channel: "job." + m.ID + ".status", Payload: string(st)})
	s.broker.deliver(wakeup.Message{Channel: "queue." + m.Queue + ".events", Payload: string(qe)})
}
