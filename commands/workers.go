package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

func (s *Server) workerCommands() []*Command {
	return []*Command{
		{Name: "worker.register", Arity: 2, Roles: workers, Handler: s.cmdWorkerRegister},
		{Name: "worker.heartbeat", Arity: -2, Roles: workers, Handler: s.cmdWorkerHeartbeat},
		{Name: "worker.unregister", Arity: 2, Roles: workers, Handler: s.cmdWorkerUnregister},
		{Name: "worker.list", Arity: -1, Roles: roleAdmin | roleViewer, Handler: s.cmdWorkerList},
		{Name: "worker.get", Arity: 2, Roles: roleAdmin | roleViewer, Handler: s.cmdWorkerGet},
		{Name: "worker.drain", Arity: 2, Roles: roleAdmin, Handler: s.cmdWorkerDrain},
	}
}

// WORKER.REGISTER json
func (s *Server) cmdWorkerRegister(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	raw := args[1]
	if json.Valid(raw) {
		if err := textError(raw); err != nil {
			return nil, resp.Errorf("invalid registration: %s", err)
		}
	}
	w, running, err := sess.eng.ParseRegistration(raw)
	if err != nil {
		return nil, err
	}
	w.Principal = sess.principal().Name
	if w.ID != w.Principal {
		// An id named like another key's principal is that key's worker.
		owned, err := s.keys.IsPrincipal(ctx, w.ID)
		if err != nil {
			return nil, err
		}
		if owned {
			return nil, errWorkerTaken
		}
	}
	if err := sess.eng.RegisterWorker(ctx, w, running); err != nil {
		return nil, err
	}
	sess.mu.Lock()
	sess.workerID = w.ID
	sess.mu.Unlock()
	s.forgetWorkers(w.Principal, w.ID)
	s.log.Info().Int64("conn", sess.ID).Str("worker", w.ID).Strs("capabilities", w.Capabilities).Msg("worker registered")
	return resp.SimpleString(fmt.Sprintf("OK worker_id=%s heartbeat_interval=%d", w.ID, int(sess.eng.HeartbeatInterval().Seconds()))), nil
}

// checkWorkerAccess refuses a worker principal acting on another
// principal's worker; admins may act on any.
func (s *Server) checkWorkerAccess(ctx context.Context, sess *Session, id string) error {
	who := sess.principal()
	return sess.eng.CheckWorkerAccess(ctx, who.Name, who.Role == auth.RoleAdmin, id)
}

// WORKER.HEARTBEAT worker_id [stats_json]
func (s *Server) cmdWorkerHeartbeat(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	if len(args) > 3 {
		return nil, resp.Errorf("wrong number of arguments for 'worker.heartbeat' command")
	}
	id := string(args[1])
	var stats json.RawMessage
	if len(args) == 3 {
		var probe map[string]any
		if err := json.Unmarshal(args[2], &probe); err != nil {
			return nil, resp.Errorf("invalid stats: must be a JSON object")
		}
		if err := textError(args[2]); err != nil {
			return nil, resp.Errorf("invalid stats: %s", err)
		}
		stats = args[2]
	}
	if err := s.checkWorkerAccess(ctx, sess, id); err != nil {
		return nil, err
	}
	res, err := sess.eng.Heartbeat(ctx, id, stats)
	if err != nil {
		return nil, err
	}
	return resp.SimpleString(heartbeatReply(res)), nil
}

// heartbeatReply is +OK with the tokens the worker must act on.
func heartbeatReply(res records.HeartbeatResult) string {
	out := "OK"
	if res.Drain {
		out += " drain=true"
	}
	if len(res.Cancels) > 0 {
		out += " cancel=" + strings.Join(res.Cancels, ",")
	}
	return out
}

// WORKER.UNREGISTER worker_id
func (s *Server) cmdWorkerUnregister(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	id := string(args[1])
	if err := s.checkWorkerAccess(ctx, sess, id); err != nil {
		return nil, err
	}
	if err := sess.eng.UnregisterWorker(ctx, id); err != nil {
		return nil, err
	}
	s.forgetWorkers("", id)
	s.log.Info().Int64("conn", sess.ID).Str("worker", id).Msg("worker unregistered")
	return resp.OK, nil
}

// WORKER.LIST [ACTIVE|DRAINING|DEAD|UNREGISTERED]
func (s *Server) cmdWorkerList(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	if len(args) > 2 {
		return nil, resp.ErrSyntax
	}
	state := ""
	if len(args) == 2 {
		state = resp.Upper(args[1])
		switch state {
		case records.WorkerActive, records.WorkerDraining, records.WorkerDead, records.WorkerUnregistered:
		default:
			return nil, resp.Errorf("state must be ACTIVE, DRAINING, DEAD or UNREGISTERED")
		}
	}
	workers, err := sess.eng.WorkerList(ctx, state)
	if err != nil {
		return nil, err
	}
	return resp.ArrayOf(workers, func(w records.Worker) resp.Reply { return resp.BulkString(w.ID) }), nil
}

// WORKER.GET worker_id
func (s *Server) cmdWorkerGet(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	w, err := sess.eng.WorkerGet(ctx, string(args[1]))
	return jsonOrNil(w, err, workerJSON)
}

// WORKER.DRAIN worker_id
func (s *Server) cmdWorkerDrain(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	return okOr(sess.eng.DrainWorker(ctx, string(args[1])))
}

func workerJSON(w records.Worker) []byte {
	b, _ := json.Marshal(map[string]any{
		"namespace":           w.Namespace,
		"worker_id":           w.ID,
		"principal":           w.Principal,
		"state":               w.State,
		"hostname":            w.Hostname,
		"platform":            w.Platform,
		"agw_version":         w.AgwVersion,
		"capabilities":        w.Capabilities,
		"metadata":            rawOrNull(w.Metadata),
		"max_concurrent_jobs": w.MaxConcurrentJobs,
		"stats":               rawOrNull(w.Stats),
		"registered_at":       w.RegisteredAt.UTC(),
		"last_heartbeat_at":   w.LastHeartbeatAt.UTC(),
		"state_changed_at":    w.StateChangedAt.UTC(),
		"timed_out_jobs":      w.TimedOutJobs,
		"last_timeout_at":     w.LastTimeoutAt,
	})
	return b
}

// sessionWorker is the worker a connection acts as: the one it registered,
// else the worker id it authenticated as, else its principal's most recent
// live worker. A connection authenticated with a worker's key acts as that
// worker on every pooled connection.
func (s *Server) sessionWorker(ctx context.Context, sess *Session) (records.Worker, error) {
	sess.mu.Lock()
	id, user, who := sess.workerID, sess.authUser, sess.who
	sess.mu.Unlock()
	if id == "" && user != "" && user != "default" && user != who.Name {
		id = user
	}
	var w records.Worker
	var err error
	if id != "" {
		w, err = sess.eng.WorkerGet(ctx, id)
	} else {
		w, err = sess.eng.WorkerOfPrincipal(ctx, who.Name)
		id = who.Name
	}
	if errors.Is(err, records.ErrNotFound) || (err == nil && w.Principal != who.Name) {
		return records.Worker{}, &records.WorkerNotRegisteredError{ID: id}
	}
	return w, err
}
