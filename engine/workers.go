package engine

import (
	"context"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
	"github.com/agq/agq/registry"
)

// ParseRegistration validates a WORKER.REGISTER document: the worker to
// register (its principal left for the caller) and the jobs it says it
// runs, nil when it does not say.
func (e *Engine) ParseRegistration(raw []byte) (records.Worker, []string, error) {
	w, running, err := registry.ParseRegistration(raw)
	return w, running, err
}

// RegisterWorker records w as registered and active in e's namespace,
// where it pops and reports. The same worker
// registering again (a reconnect, a restart) takes its record over and
// keeps the jobs it holds; held jobs it does not list in running, when it
// lists them, were lost with an earlier process and go back to their
// queues. Its pops blocked on any node look again under its capabilities.
func (e *Engine) RegisterWorker(ctx context.Context, w records.Worker, running []string) error {
	w.Namespace = e.ns
	return e.transition(ctx, func() (effects, error) {
		ended, err := e.store.WorkerRegister(ctx, w, e.Lease(), running)
		if err != nil {
			return effects{}, err
		}
		return effects{Effects: records.Effects{Parents: ended}, Messages: e.workerEvents(w.ID, "registered")}, nil
	})
}

// Heartbeat records that worker id is alive and extends the leases of the
// jobs it holds.
func (e *Engine) Heartbeat(ctx context.Context, id string, stats []byte) (records.HeartbeatResult, error) {
	res, err := e.store.WorkerHeartbeat(ctx, id, stats, e.Lease())
	return res, refusal(aWorker, id, err)
}

// UnregisterWorker ends a worker's registration; the jobs it still holds
// go back to their queues at once.
func (e *Engine) UnregisterWorker(ctx context.Context, id string) error {
	return e.transition(ctx, func() (effects, error) {
		ended, err := e.store.WorkerUnregister(ctx, id)
		if err != nil {
			return effects{}, refusal(aWorker, id, err)
		}
		return effects{Effects: records.Effects{Parents: ended}, Messages: e.workerEvents(id, "unregistered")}, nil
	})
}

// WorkerConnected counts a connection authenticated as principal, a
// worker's.
func (e *Engine) WorkerConnected(principal string) {
	if e.cfg.Presence != nil {
		e.cfg.Presence.Connected(principal)
	}
}

// WorkerDisconnected counts one closed.
func (e *Engine) WorkerDisconnected(principal string) {
	if e.cfg.Presence != nil {
		e.cfg.Presence.Disconnected(principal)
	}
}

// CheckWorkerAccess refuses principal, unless admin, acting on a worker
// another principal registered.
func (e *Engine) CheckWorkerAccess(ctx context.Context, principal string, admin bool, id string) error {
	if admin {
		return nil
	}
	w, err := e.store.WorkerGet(ctx, id)
	if err != nil {
		return refusal(aWorker, id, err)
	}
	if w.Principal != principal {
		return &records.WorkerOfAnotherPrincipalError{ID: id}
	}
	return nil
}

// AppendLog keeps a line of the log of job id's current attempt, sent by
// the worker holding it, and publishes it on channel to every node.
func (e *Engine) AppendLog(ctx context.Context, id, worker, channel string, line []byte) error {
	if _, _, err := e.store.JobLogAppend(ctx, id, worker, string(line)); err != nil {
		return refusal(aJob, id, err)
	}
	// Sent whether or not a subscriber is known: a line is kept and sent
	// as the worker writes it, not a status someone may not want.
	e.hub.PublishMessages([]wakeup.Message{{Namespace: e.ns, Channel: channel, Payload: string(line)}})
	return nil
}

// workerEvents are worker.<id>.events's messages for event, while anyone
// listens.
func (e *Engine) workerEvents(id, event string) []wakeup.Message {
	if !e.hub.Wanted() {
		return nil
	}
	return []wakeup.Message{workerEvent(id, event)}
}
