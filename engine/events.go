package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"time"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// effects is what a committed transition means to the rest of agq: what
// the store's statements changed (records.Effects) and what the engine
// announces of it. Every transition fills one and hands it to publish
// once its commit returned: no transition wakes, frees or announces
// anything itself.
type effects struct {
	records.Effects
	// Started are deliveries, announced as "started".
	Started []store.Claimed
	// Events are transitions whose outcome the transition knows.
	Events []StatusEvent
	// AsIs are transitions announced as the database has the job once
	// committed (a failure retried or final, a cancellation done or only
	// asked): read only while someone listens.
	AsIs []AsIs
	// Messages are other pub/sub messages (job.cancel, worker events).
	Messages []wakeup.Message
}

// stored is what a report's or a step call's transition of the store
// means: all it changed, and the jobs it moved out of running announced
// by their status once committed, a job that did not end by the event
// notEnded. Every report and step call takes its effects through here,
// whether or not the transition was refused (a report may find its job's
// cancellation asked and end it cancelled, refusing the report).
func stored(sfx records.Effects, notEnded string) effects {
	fx := effects{Effects: sfx}
	if len(sfx.Moved) > 0 {
		fx.AsIs = []AsIs{movedAsIs(sfx.Moved, notEnded)}
	}
	return fx
}

// AsIs announces jobs by their status after the commit: Event names the
// transition from it, and Tell, when set, adds the messages a job in that
// status calls for.
type AsIs struct {
	IDs   []string
	Event func(records.JobState) string
	Tell  func(records.JobState) []wakeup.Message
	// StepID names the step the event is about, if any.
	StepID string
	// Signal names the signal of a signal event.
	Signal string
}

// transition runs one transition and publishes the effects it returns,
// also when it fails midway (a snooze past its limit failed the job, and
// its room is free all the same): no transition publishes on its own.
func (e *Engine) transition(ctx context.Context, run func() (effects, error)) error {
	fx, err := run()
	e.publish(ctx, fx)
	return err
}

// StatusEvent is one transition of one job, as job.<id>.status carries it.
type StatusEvent struct {
	JobID    string `json:"job_id"`
	Queue    string `json:"queue"`
	Event    string `json:"event"`
	Status   string `json:"status"`
	Attempt  int    `json:"attempt"`
	WorkerID string `json:"worker_id,omitempty"`
	// StepID names the step of a step_completed, step_failed or sleeping.
	StepID string `json:"step_id,omitempty"`
	// Signal names the signal of a signal event.
	Signal string    `json:"signal,omitempty"`
	At     time.Time `json:"at"`
	// Namespace is the job's; empty, the publishing engine's.
	Namespace string `json:"namespace"`
}

// queueEvent is a transition as queue.<name>.events carries it.
type queueEvent struct {
	Event   string    `json:"event"`
	JobID   string    `json:"job_id"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// publish tells the rest of agq what a committed transition changed: the
// waiting pops and JOB.WAITs of every node, the pops that limits held
// back, then the pub/sub subscribers of job.<id>.status,
// queue.<name>.events and the other channels — these only while some
// node has a subscriber to them, so that nobody listening costs the job
// flow nothing. The transition is e's namespace's: its jobs are read
// there, and its messages not naming a namespace are heard there.
func (e *Engine) publish(ctx context.Context, fx effects) {
	for i := range fx.Ready {
		// A note that names no namespace is about e's.
		fx.Ready[i].Namespace = cmp.Or(fx.Ready[i].Namespace, e.ns)
	}
	wanted := e.hub.Wanted()
	// Status events only while someone follows them: workers waiting for
	// job.cancel alone must not cost every transition its messages (nor a
	// read of the jobs announced as they are).
	status := wanted && e.hub.WantedStatus()
	now := e.clock.Now().UTC()
	if status {
		// The transition's own events go out before the pops it wakes:
		// a woken pop's claim says running, and a follower hears the job
		// queued first.
		evs := fx.Events
		for _, c := range fx.Started {
			evs = append(evs, StatusEvent{Namespace: c.Job.Namespace, JobID: c.Job.ID, Queue: c.Job.Queue, Event: "started",
				Status: records.StatusRunning, Attempt: c.Job.Attempt, WorkerID: c.Worker})
		}
		e.publishEvents(evs, now)
	}
	e.hub.Publish(fx.Ready, fx.Done)
	e.hub.PublishRoom(fx.Freed)
	e.countJobs(fx)
	if len(fx.Parents) > 0 {
		defer e.settle(ctx, fx.Parents)
	}
	if !wanted {
		return
	}
	msgs := fx.Messages
	var evs []StatusEvent
	for _, a := range fx.AsIs {
		if !status && a.Tell == nil {
			continue
		}
		more, told := e.asIs(ctx, a)
		msgs = append(msgs, told...)
		if status {
			evs = append(evs, more...)
		}
	}
	if len(msgs) > 0 {
		e.hub.PublishMessages(e.scoped(msgs))
	}
	e.publishEvents(evs, now)
}

// publishEvents publishes the status messages of evs.
func (e *Engine) publishEvents(evs []StatusEvent, now time.Time) {
	var msgs []wakeup.Message
	for _, ev := range evs {
		ev.Namespace = cmp.Or(ev.Namespace, e.ns)
		msgs = append(msgs, statusMessages(ev, now)...)
	}
	if len(msgs) > 0 {
		e.hub.PublishMessages(e.scoped(msgs))
	}
}

// scoped gives the messages that name no namespace e's: they are heard by
// its subscribers only.
func (e *Engine) scoped(msgs []wakeup.Message) []wakeup.Message {
	for i := range msgs {
		msgs[i].Namespace = cmp.Or(msgs[i].Namespace, e.ns)
	}
	return msgs
}

// asIs reads the jobs of a for their events and messages.
func (e *Engine) asIs(ctx context.Context, a AsIs) ([]StatusEvent, []wakeup.Message) {
	if len(a.IDs) == 0 {
		return nil, nil
	}
	states, err := e.store.JobStates(ctx, a.IDs)
	if err != nil {
		e.log.Warn().Err(err).Msg("reading jobs for their status messages")
		return nil, nil
	}
	evs := make([]StatusEvent, len(states))
	var msgs []wakeup.Message
	for i, j := range states {
		evs[i] = StatusEvent{Namespace: j.Namespace, JobID: j.ID, Queue: j.Queue, Event: a.Event(j), Status: j.Status, Attempt: j.Attempt, StepID: a.StepID,
			Signal: a.Signal}
		if j.WorkerID != nil {
			evs[i].WorkerID = *j.WorkerID
		}
		if a.Tell != nil {
			msgs = append(msgs, a.Tell(j)...)
		}
	}
	return evs, msgs
}

// statusMessages are ev's messages on job.<id>.status and
// queue.<name>.events of its namespace, at now.
func statusMessages(ev StatusEvent, now time.Time) []wakeup.Message {
	ev.At = now
	st, _ := json.Marshal(ev)
	qe, _ := json.Marshal(queueEvent{Event: ev.Event, JobID: ev.JobID, Attempt: ev.Attempt, At: now})
	return []wakeup.Message{
		{Namespace: ev.Namespace, Channel: "job." + ev.JobID + ".status", Payload: string(st)},
		{Namespace: ev.Namespace, Channel: "queue." + ev.Queue + ".events", Payload: string(qe)},
	}
}

// submittedEvents are the events of the jobs a submission created.
func submittedEvents(jobs []records.NewJob, res []records.SubmitResult, errs []error) []StatusEvent {
	now := time.Now()
	var evs []StatusEvent
	for i, r := range res {
		if (errs != nil && errs[i] != nil) || !r.Created {
			continue
		}
		status := records.StatusQueued
		if jobs[i].RunAt.After(now) {
			status = records.StatusScheduled
		}
		if r.Status != "" {
			status = r.Status
		}
		evs = append(evs, StatusEvent{JobID: r.ID, Queue: r.Queue, Event: "submitted", Status: status})
	}
	return evs
}

// movedAsIs announces jobs moved out of running: one that ended by its
// final status, one that did not by the event notEnded, or not at all when
// that is "" (a failure that left the job waiting is a retry, a snooze
// leaves it scheduled, a sleep is announced with its step).
func movedAsIs(moved []string, notEnded string) AsIs {
	return AsIs{IDs: moved, Event: func(j records.JobState) string {
		if !records.IsTerminal(j.Status) {
			return notEnded
		}
		return j.Status
	}}
}

// named is an AsIs whose event is the same for every job.
func named(event string, ids ...string) AsIs {
	return AsIs{IDs: ids, Event: func(records.JobState) string { return event }}
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

// movedMessages are the messages for this node's own subscribers of a job
// moved out of running by the leader's watchdog or a worker's
// (re-)registration, on any node, or of a worker the watchdog declared
// dead: each node hears the move itself, so they are delivered locally
// only, in the namespace the notice names (the default one when a node
// from before namespaces sent it).
func movedMessages(m records.Moved) []wakeup.Message {
	ns := cmp.Or(m.Namespace, records.DefaultNamespace)
	if m.DeadWorker != "" {
		msg := workerEvent(m.DeadWorker, "dead")
		msg.Namespace = ns
		return []wakeup.Message{msg}
	}
	event := m.Status
	if m.Status == records.StatusQueued {
		event = "requeued"
	}
	return statusMessages(StatusEvent{Namespace: ns, JobID: m.ID, Queue: m.Queue, Event: event, Status: m.Status, Attempt: m.Attempt},
		time.Now().UTC())
}

// countJobs adds a transition's submitted and started jobs to the
// namespace's counts.
func (e *Engine) countJobs(fx effects) {
	submitted := 0
	for _, ev := range fx.Events {
		if ev.Event == "submitted" {
			submitted++
		}
	}
	if submitted > 0 {
		e.metrics.jobs.WithLabelValues(e.ns, "submitted").Add(float64(submitted))
	}
	if len(fx.Started) > 0 {
		e.metrics.jobs.WithLabelValues(e.ns, "started").Add(float64(len(fx.Started)))
	}
}
