package commands

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/tidwall/redcon"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// Handler runs one command. args[0] is the command name as sent.
type Handler func(ctx context.Context, s *Session, args [][]byte) (resp.Reply, error)

// Role bits for the registration table.
type roles uint8

const (
	roleAdmin roles = 1 << iota
	roleWorker
	roleProducer
	// roleViewer may run every command that only reads.
	roleViewer

	anyRole = roleAdmin | roleWorker | roleProducer | roleViewer
	// readers are the roles that may read jobs, queues and schedules.
	readers = roleAdmin | roleProducer | roleViewer
	// producers may submit jobs, and workers take and run them; an admin
	// may do both.
	producers = roleProducer | roleAdmin
	workers   = roleWorker | roleAdmin
)

// Command is one entry of the registration table.
type Command struct {
	Name string
	// Arity follows Redis: n > 0 exactly n arguments including the name,
	// n < 0 at least -n.
	Arity int
	// NoAuth commands run before AUTH.
	NoAuth bool
	Roles  roles
	// Blocking commands manage their own deadline (their timeout argument).
	Blocking bool
	Handler  Handler
	// Prepare, for a write a pipeline sends before the replies of those
	// before it are due, reads and checks one without sending it
	// (pipeline.go); nil for every other command.
	Prepare Preparer

	doc  commandDoc // from commandDocs
	args []docArg   // doc.syntax parsed
}

func roleBit(role string) roles {
	switch role {
	case auth.RoleAdmin:
		return roleAdmin
	case auth.RoleWorker:
		return roleWorker
	case auth.RoleProducer:
		return roleProducer
	case auth.RoleViewer:
		return roleViewer
	}
	return 0
}

// dispatch is the single entry for every command and the single place where
// replies and errors are written.
func (s *Server) dispatch(conn redcon.Conn, cmd redcon.Command) {
	sess, _ := conn.Context().(*Session)
	if sess == nil || len(cmd.Args) == 0 {
		return
	}
	if pc, ok := conn.(pipelineConn); ok && sess.isAuthed() && pipelinedWrites(conn, cmd) {
		s.servePipeline(pc, sess, cmd)
		return
	}
	reply, wroteOwn, quit := s.execute(sess, cmd)
	if !wroteOwn {
		// (A command that wrote its own replies may have handed the
		// connection to other goroutines meanwhile.)
		conn.WriteRaw(reply)
	}
	if quit {
		conn.Close()
	}
}

// execute runs one command and encodes its reply; wroteOwn means the
// command wrote its own replies.
func (s *Server) execute(sess *Session, cmd redcon.Command) (reply []byte, wroteOwn, quit bool) {
	start := time.Now()
	c, name := s.begin(sess, cmd, start)
	r, err := s.run(sess, c, name, cmd.Args)
	reply, wroteOwn = s.end(sess, c, name, start, r, err)
	return reply, wroteOwn, c != nil && c.Name == "quit"
}

// begin finds the command and notes it as the session's latest.
func (s *Server) begin(sess *Session, cmd redcon.Command, start time.Time) (c *Command, name string) {
	sess.lastActive.Store(start.UnixNano())
	c = s.lookup(cmd.Args[0])
	if c == nil {
		sess.lastCommand.Store("unknown")
		return nil, resp.Lower(cmd.Args[0])
	}
	sess.lastCommand.Store(c.Name)
	return c, c.Name
}

// end encodes a command's reply, or its error's, and counts it; wroteOwn
// means the command wrote its own replies.
func (s *Server) end(sess *Session, c *Command, name string, start time.Time, r resp.Reply, err error) (reply []byte, wroteOwn bool) {
	label := "unknown"
	if c != nil {
		label = c.Name
	}
	result := "ok"
	if err != nil {
		result = "error"
		r = s.errorReply(sess, name, err)
	}
	if _, wroteOwn = r.(silent); !wroteOwn {
		reply = r.AppendRESP(nil, sess.proto)
	}
	s.metrics.commands.WithLabelValues(label, result).Inc()
	s.metrics.latency.WithLabelValues(label).Observe(time.Since(start).Seconds())
	return reply, wroteOwn
}

// admit checks that the session may run c with these arguments.
func (s *Server) admit(sess *Session, c *Command, name string, args [][]byte) error {
	if c == nil {
		return unknownCommand(args[0], args[1:])
	}
	if sess.revoked.Load() {
		sess.clearAuth()
		s.countAs(sess, "")
		sess.revoked.Store(false)
	}
	if !c.NoAuth {
		if !sess.isAuthed() {
			return resp.ErrNoAuth
		}
		who := sess.principal()
		if c.Roles&roleBit(who.Role) == 0 {
			return resp.CodeErrorf("NOPERM", "User %s has no permissions to run the '%s' command", who.Name, name)
		}
	}
	if (c.Arity > 0 && len(args) != c.Arity) || (c.Arity < 0 && len(args) < -c.Arity) {
		return resp.Errorf("wrong number of arguments for '%s' command", name)
	}
	return nil
}

func (s *Server) run(sess *Session, c *Command, name string, args [][]byte) (reply resp.Reply, err error) {
	if err := s.admit(sess, c, name, args); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error().Int64("conn", sess.ID).Str("command", name).Interface("panic", p).
				Str("stack", string(debug.Stack())).Msg("command panicked")
			s.metrics.panics.Inc()
			reply, err = nil, resp.Errorf("internal error while running '%s'", name)
		}
	}()
	var ctx context.Context
	var cancel context.CancelFunc
	if c.Blocking {
		// A blocked command ends when its session's key is revoked.
		ctx, cancel = context.WithCancel(sess.ctx)
		sess.setBlocked(cancel)
		defer sess.setBlocked(nil)
	} else {
		ctx, cancel = s.ctxForCommand(sess)
	}
	defer cancel()
	reply, err = c.Handler(ctx, sess, args)
	if err != nil && records.SafeToRetry(err) && ctx.Err() == nil {
		// The command failed on a pooled connection that was broken
		// before it was sent (the database restarted, a connection was
		// killed): nothing reached the database, so it runs once more,
		// on a fresh connection, rather than answering TRYAGAIN.
		s.metrics.retried.Inc()
		sess.eng.DropIdleConns()
		reply, err = c.Handler(ctx, sess, args)
	}
	if err != nil && sess.revoked.Load() && errors.Is(err, context.Canceled) {
		return nil, resp.ErrNoAuth
	}
	return reply, err
}

// unknownCommand formats Redis's own text for an unknown command: the name
// as sent, cut at 128 bytes, and the arguments while they fit in 128 bytes.
func unknownCommand(name []byte, args [][]byte) error {
	var b []byte
	for _, a := range args {
		if len(b) >= 128 {
			break
		}
		b = append(b, '\'')
		b = append(b, a[:min(len(a), 128-len(b)+1)]...)
		b = append(b, '\'', ' ')
	}
	return resp.Errorf("unknown command '%s', with args beginning with: %s", name[:min(len(name), 128)], b)
}

// buildTable registers every command family.
func (s *Server) buildTable() map[string]*Command {
	t := map[string]*Command{}
	for _, family := range [][]*Command{s.connectionCommands(), s.keyCommands(), s.namespaceCommands(), s.workerCommands(), s.jobCommands(), s.stepCommands(), s.waitCommands(), s.queueCommands(), s.keyspaceCommands(), s.scheduleCommands(), s.pubsubCommands()} {
		for _, c := range family {
			if _, dup := t[c.Name]; dup {
				panic("command registered twice: " + c.Name)
			}
			var err error
			if c.doc, c.args, err = docFor(c.Name); err != nil {
				panic(err)
			}
			t[c.Name] = c
		}
	}
	return t
}

// lookup finds the command named b, in any case, without allocating: it
// runs for every command.
func (s *Server) lookup(b []byte) *Command {
	var buf [32]byte
	if len(b) > len(buf) {
		return nil // longer than any command's name
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return s.table[string(buf[:len(b)])]
}
