package commands

import (
	"context"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/agq/agq/commands/pubsub"
	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/resp"
)

// Pub/sub over RESP, read-only for subscribers. The broker (package
// pubsub) keeps the subscriptions and writes the messages; here are the
// commands, who may subscribe to what, and the loop that serves a
// subscribed connection's commands once it left redcon's.

// silent is the reply of a command that wrote its own replies.
type silent struct{}

func (silent) AppendRESP(b []byte, _ int) []byte { return b }

// rawReply is bytes written as they are.
type rawReply []byte

func (r rawReply) AppendRESP(b []byte, _ int) []byte { return append(b, r...) }

func (s *Server) pubsubCommands() []*Command {
	return []*Command{
		{Name: "subscribe", Arity: -2, Roles: anyRole, Handler: s.cmdSubscribe(false)},
		{Name: "psubscribe", Arity: -2, Roles: anyRole, Handler: s.cmdSubscribe(true)},
		{Name: "unsubscribe", Arity: -1, Roles: anyRole, Handler: s.cmdUnsubscribe(false)},
		{Name: "punsubscribe", Arity: -1, Roles: anyRole, Handler: s.cmdUnsubscribe(true)},
		{Name: "publish", Arity: 3, Roles: roleWorker, Handler: s.cmdPublish},
		{Name: "job.logs", Arity: -2, Roles: readers, Handler: s.cmdJobLogs},
	}
}

// SUBSCRIBE channel [channel …] and PSUBSCRIBE pattern [pattern …]
func (s *Server) cmdSubscribe(pattern bool) Handler {
	return func(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
		names := make([]string, 0, len(args)-1)
		for _, a := range args[1:] {
			if err := s.maySubscribe(ctx, sess, string(a), pattern); err != nil {
				return nil, err
			}
			names = append(names, string(a))
		}
		sub, conn, fresh := s.subscriberOf(sess)
		if !sub.MoveTo(sess.eng.Namespace()) {
			// Only a cluster admin moves; it unsubscribes first.
			return nil, resp.Errorf("unsubscribe from the channels of the namespace this connection left first")
		}
		s.broker.Subscribe(sub, names, pattern)
		if fresh {
			// Nothing else writes yet: the replies go before any message.
			sub.Start()
			go s.subscribedLoop(sess, sub, conn)
		}
		return silent{}, nil
	}
}

// UNSUBSCRIBE [channel …] and PUNSUBSCRIBE [pattern …]
func (s *Server) cmdUnsubscribe(pattern bool) Handler {
	return func(_ context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
		names := make([]string, 0, len(args)-1)
		for _, a := range args[1:] {
			names = append(names, string(a))
		}
		sess.mu.Lock()
		sub := sess.sub
		sess.mu.Unlock()
		if sub == nil {
			return rawReply(pubsub.Unsubscribed(sess.proto, names, pattern)), nil
		}
		s.broker.Unsubscribe(sub, names, pattern)
		return silent{}, nil
	}
}

// subscriberOf returns sess's subscriber, detaching its connection from
// redcon's loop the first time (fresh): the caller then has the replies
// written, and starts the subscriber and the loop serving its commands.
func (s *Server) subscriberOf(sess *Session) (sub *pubsub.Subscriber, conn redcon.DetachedConn, fresh bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.sub != nil {
		return sess.sub, nil, false
	}
	conn = sess.conn.Detach()
	log := s.log.With().Int64("conn", sess.ID).Str("addr", sess.addr).Logger()
	sub = s.broker.NewSubscriber(conn, sess.netConn, func() int { return sess.proto }, log, sess.eng.Namespace())
	sess.sub = sub
	sess.conn = conn
	return sub, conn, true
}

// subscribedLoop serves a detached connection's commands: the
// subscription commands, PING, and in RESP3 (or with no subscription
// left) every other command but the blocking ones.
func (s *Server) subscribedLoop(sess *Session, sub *pubsub.Subscriber, conn redcon.DetachedConn) {
	defer func() {
		sub.Close()
		s.sessionClosed(sess, nil)
	}()
	for {
		cmd, err := conn.ReadCommand()
		if err != nil {
			return
		}
		if len(cmd.Args) == 0 {
			continue
		}
		quit := false
		sub.Exclusive(func() { quit = s.subscribedCommand(sess, sub, conn, cmd) })
		if quit {
			return
		}
	}
}

// subscribedCommand runs one command of a subscribed connection, while no
// message is written, and reports whether the connection is to close.
func (s *Server) subscribedCommand(sess *Session, sub *pubsub.Subscriber, conn redcon.DetachedConn, cmd redcon.Command) (quit bool) {
	name := resp.Lower(cmd.Args[0])
	subscribed := sub.Count() > 0
	switch {
	case name == "ping" && subscribed && sess.proto == 2:
		msg := ""
		if len(cmd.Args) > 1 {
			msg = string(cmd.Args[1])
		}
		conn.WriteRaw(pubsub.Pong(msg))
		return false
	case isPubSubCommand(name), name == "quit", name == "ping", !subscribed || sess.proto == 3:
		if c := s.table[name]; c != nil && c.Blocking && subscribed {
			conn.WriteError("ERR blocking commands are not allowed while subscribed")
			return false
		}
		s.dispatch(conn, cmd)
		return name == "quit"
	}
	conn.WriteError("ERR Can't execute '" + name + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
	return false
}

func isPubSubCommand(name string) bool {
	switch name {
	case "subscribe", "psubscribe", "unsubscribe", "punsubscribe":
		return true
	}
	return false
}

// maySubscribe applies the roles: an admin may subscribe to anything; a
// producer to jobs' and queues' channels; a worker to job.cancel, its own
// events, the channels of the jobs it holds and the status of the jobs its
// key submitted, by name only.
func (s *Server) maySubscribe(ctx context.Context, sess *Session, name string, pattern bool) error {
	p := sess.principal()
	refuse := resp.CodeErrorf("NOPERM", "this key may not subscribe to '%s'", name)
	switch p.Role {
	case auth.RoleAdmin, auth.RoleViewer:
		// A viewer sees everything an admin sees; subscribing changes nothing.
		return nil
	case auth.RoleProducer:
		if strings.HasPrefix(name, "job.") || strings.HasPrefix(name, "queue.") {
			return nil
		}
		return refuse
	case auth.RoleWorker:
		if pattern {
			return refuse
		}
		if name == "job.cancel" {
			return nil
		}
		if id, ok := strings.CutPrefix(name, "job."); ok {
			// The status of a job its key submitted (a child it spawned).
			if id, ok := strings.CutSuffix(id, ".status"); ok {
				if j, err := sess.eng.JobGet(ctx, id); err == nil && j.SubmittedBy == p.Name {
					return nil
				}
			}
		}
		w, err := s.hotWorker(ctx, sess)
		if err != nil {
			return err
		}
		if name == "worker."+w.ID+".events" {
			return nil
		}
		id, ok := strings.CutPrefix(name, "job.")
		if !ok {
			return refuse
		}
		if i := strings.LastIndexByte(id, '.'); i > 0 && (id[i:] == ".status" || id[i:] == ".logs") {
			j, err := sess.eng.JobGet(ctx, id[:i])
			if err == nil && j.WorkerID != nil && *j.WorkerID == w.ID {
				return nil
			}
		}
		return refuse
	}
	return refuse
}
