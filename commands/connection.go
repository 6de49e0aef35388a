package commands

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/resp"
)

// Failed AUTH attempts beyond slowAuthAfter are answered after a growing
// delay; at maxAuthFailures the connection is closed.
const (
	slowAuthAfter   = 3
	maxAuthFailures = 10
)

func (s *Server) connectionCommands() []*Command {
	return []*Command{
		{Name: "ping", Arity: -1, NoAuth: true, Handler: cmdPing},
		{Name: "echo", Arity: 2, Roles: anyRole, Handler: cmdEcho},
		{Name: "quit", Arity: -1, NoAuth: true, Handler: cmdQuit},
		{Name: "select", Arity: 2, Roles: anyRole, Handler: cmdSelect},
		{Name: "time", Arity: 1, Roles: anyRole, Handler: cmdTime},
		{Name: "auth", Arity: -2, NoAuth: true, Handler: s.cmdAuth},
		{Name: "hello", Arity: -1, NoAuth: true, Handler: s.cmdHello},
		{Name: "client", Arity: -2, Roles: anyRole, Handler: s.cmdClient},
		{Name: "command", Arity: -1, NoAuth: true, Handler: s.cmdCommand},
		{Name: "info", Arity: -1, Roles: anyRole, Handler: s.cmdInfo},
	}
}

// PING [message]
func cmdPing(_ context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	switch len(args) {
	case 1:
		return resp.SimpleString("PONG"), nil
	case 2:
		return resp.Bulk(args[1]), nil
	}
	return nil, resp.Errorf("wrong number of arguments for 'ping' command")
}

// ECHO message
func cmdEcho(_ context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	return resp.Bulk(args[1]), nil
}

// QUIT
func cmdQuit(context.Context, *Session, [][]byte) (resp.Reply, error) {
	return resp.OK, nil
}

// SELECT index — agq has one keyspace, database 0.
func cmdSelect(_ context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	n, err := resp.ParseInt(args[1])
	if err != nil {
		return nil, err
	}
	if n != 0 {
		return nil, resp.Errorf("DB index is out of range")
	}
	return resp.OK, nil
}

// TIME
func cmdTime(context.Context, *Session, [][]byte) (resp.Reply, error) {
	now := time.Now()
	return resp.Array{
		resp.BulkString(strconv.FormatInt(now.Unix(), 10)),
		resp.BulkString(strconv.FormatInt(int64(now.Nanosecond()/1000), 10)),
	}, nil
}

// AUTH [principal] key
func (s *Server) cmdAuth(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	var user, key string
	switch len(args) {
	case 2:
		key = string(args[1])
	case 3:
		user, key = string(args[1]), string(args[2])
	default:
		return nil, resp.ErrSyntax
	}
	return okOr(s.authenticate(ctx, sess, user, key))
}

func (s *Server) authenticate(ctx context.Context, sess *Session, user, key string) error {
	p, err := offStack(func() (auth.Principal, error) { return s.keys.Authenticate(ctx, user, key) })
	if err == nil {
		sess.setAuth(p, user, s.opts.Limits)
		sess.eng = sess.eng.In(p.Home())
		s.authenticated(sess)
		if p.Role == auth.RoleWorker {
			s.countAs(sess, p.Name)
		} else {
			s.countAs(sess, "")
		}
		s.log.Debug().Int64("conn", sess.ID).Str("principal", p.Name).Str("role", p.Role).Msg("authenticated")
		return nil
	}
	if !errors.Is(err, auth.ErrBadCredentials) {
		return err
	}
	sess.authFailures++
	s.metrics.authFailures.Inc()
	wait, ok := s.authLimit.failed(sess.addr)
	if sess.authFailures >= maxAuthFailures || !ok {
		sess.conn.WriteRaw(resp.ErrWrongPass.AppendRESP(nil, sess.proto))
		sess.conn.Close()
		return resp.ErrWrongPass
	}
	if sess.authFailures > slowAuthAfter {
		wait = max(wait, min(100*time.Millisecond<<(sess.authFailures-slowAuthAfter-1), 2*time.Second))
	}
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	return resp.ErrWrongPass
}

// HELLO [protover [AUTH principal key] [SETNAME name]]
func (s *Server) cmdHello(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	proto := sess.proto
	rest := args[1:]
	if len(rest) > 0 {
		v, err := strconv.Atoi(string(rest[0]))
		if err != nil {
			return nil, resp.Errorf("Protocol version is not an integer or out of range")
		}
		if v != 2 && v != 3 {
			return nil, resp.CodeErrorf("NOPROTO", "unsupported protocol version")
		}
		proto = v
		rest = rest[1:]
	}
	var setName, authUser, authKey *string
	for len(rest) > 0 {
		switch {
		case resp.Is(rest[0], "AUTH") && len(rest) >= 3:
			user, key := string(rest[1]), string(rest[2])
			authUser, authKey = &user, &key
			rest = rest[3:]
		case resp.Is(rest[0], "SETNAME") && len(rest) >= 2:
			name := string(rest[1])
			if err := validClientName(name); err != nil {
				return nil, err
			}
			setName = &name
			rest = rest[2:]
		default:
			return nil, resp.Errorf("Syntax error in HELLO option '%s'", rest[0])
		}
	}
	// Authenticate only once every option is known to be valid, as Redis
	// does: a refused HELLO changes nothing.
	if authKey != nil {
		if err := s.authenticate(ctx, sess, *authUser, *authKey); err != nil {
			return nil, err
		}
	}
	if !sess.isAuthed() {
		return nil, resp.CodeErrorf("NOAUTH", "HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
	}
	if setName != nil {
		sess.mu.Lock()
		sess.name = *setName
		sess.mu.Unlock()
	}
	sess.mu.Lock()
	sess.proto = proto // under mu: CLIENT LIST on other connections reads it
	sess.mu.Unlock()
	return resp.Map{
		{Key: "server", Value: resp.BulkString("agq")},
		{Key: "version", Value: resp.BulkString(Version)},
		{Key: "proto", Value: resp.Int(proto)},
		{Key: "id", Value: resp.Int(sess.ID)},
		{Key: "mode", Value: resp.BulkString("standalone")},
		{Key: "role", Value: resp.BulkString("master")},
		{Key: "modules", Value: resp.Array{}},
	}, nil
}

func validClientName(name string) error {
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] > '~' {
			return resp.Errorf("Client names cannot contain spaces, newlines or special characters.")
		}
	}
	return nil
}

// CLIENT SETNAME name | GETNAME | ID | SETINFO LIB-NAME|LIB-VER value | INFO | LIST
func (s *Server) cmdClient(_ context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	sub := resp.Lower(args[1])
	wrongArity := resp.Errorf("wrong number of arguments for 'client|%s' command", sub)
	switch sub {
	case "setname":
		if len(args) != 3 {
			return nil, wrongArity
		}
		name := string(args[2])
		if err := validClientName(name); err != nil {
			return nil, err
		}
		sess.mu.Lock()
		sess.name = name
		sess.mu.Unlock()
		return resp.OK, nil
	case "getname":
		if name := sess.clientName(); name != "" {
			return resp.BulkString(name), nil
		}
		return resp.Nil, nil
	case "id":
		return resp.Int(sess.ID), nil
	case "setinfo":
		if len(args) != 4 {
			return nil, wrongArity
		}
		v := string(args[3])
		sess.mu.Lock()
		defer sess.mu.Unlock()
		switch {
		case resp.Is(args[2], "LIB-NAME"):
			sess.libName = v
		case resp.Is(args[2], "LIB-VER"):
			sess.libVer = v
		default:
			return nil, resp.Errorf("Unrecognized option '%s'", args[2])
		}
		return resp.OK, nil
	case "info":
		return resp.BulkString(s.clientLine(sess) + "\n"), nil
	case "list":
		keep, err := clientFilter(args[2:])
		if err != nil {
			return nil, err
		}
		// Other principals' connections are an admin's business: a
		// namespace's admin sees those of its namespace's keys.
		sessions := []*Session{sess}
		p := sess.principal()
		if r := p.Role; r == auth.RoleAdmin || r == auth.RoleViewer {
			sessions = s.sessionList()
		}
		var b strings.Builder
		for _, other := range sessions {
			if keep(other) && (clusterKey(p) || other == sess || other.principal().Namespace == p.Namespace) {
				b.WriteString(s.clientLine(other))
				b.WriteByte('\n')
			}
		}
		return resp.BulkString(b.String()), nil
	case "help":
		return helpReply(clientHelp), nil
	}
	return nil, resp.Errorf("unknown subcommand '%s'. Try CLIENT HELP.", args[1])
}

// clientFilter reads CLIENT LIST's filters, as Redis takes them:
// ID id [id …] and TYPE normal|master|replica|pubsub.
func clientFilter(args [][]byte) (func(*Session) bool, error) {
	switch {
	case len(args) == 0:
		return func(*Session) bool { return true }, nil
	case resp.Is(args[0], "ID") && len(args) > 1:
		ids := map[int64]bool{}
		for _, a := range args[1:] {
			id, err := strconv.ParseInt(string(a), 10, 64)
			if err != nil || id <= 0 {
				return nil, resp.Errorf("Invalid client ID")
			}
			ids[id] = true
		}
		return func(sess *Session) bool { return ids[sess.ID] }, nil
	case resp.Is(args[0], "TYPE") && len(args) == 2:
		typ := resp.Lower(args[1])
		switch typ {
		case "normal", "pubsub":
			return func(sess *Session) bool { return sess.subscribed() == (typ == "pubsub") }, nil
		case "master", "replica", "slave":
			return func(*Session) bool { return false }, nil
		}
		return nil, resp.Errorf("Unknown client type '%s'", args[1])
	}
	return nil, resp.ErrSyntax
}

// clientHelp is CLIENT HELP's text.
var clientHelp = []string{
	"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"GETNAME",
	"    Return the name of the current connection.",
	"ID",
	"    Return the ID of the current connection.",
	"INFO",
	"    Return information about the current client connection.",
	"LIST [TYPE (NORMAL|MASTER|REPLICA|PUBSUB)]",
	"    Return information about client connections (an admin's or viewer's: all of them).",
	"LIST [ID <client-id> [<client-id> ...]]",
	"    Return information about client connections with the given IDs.",
	"SETINFO <option> <value>",
	"    Set client meta attributes. Options are LIB-NAME and LIB-VER.",
	"SETNAME <name>",
	"    Assign the name <name> to the current connection.",
	"HELP",
	"    Print this help.",
}

// helpReply is a HELP subcommand's reply: its lines as status replies,
// as Redis sends them.
func helpReply(lines []string) resp.Reply {
	return resp.ArrayOf(lines, func(l string) resp.Reply { return resp.SimpleString(l) })
}

func (s *Server) clientLine(sess *Session) string {
	sess.mu.Lock()
	name, lib, ver, user, proto := sess.name, sess.libName, sess.libVer, sess.who.Name, sess.proto
	sess.mu.Unlock()
	if user == "" {
		user = "default"
	}
	now := time.Now()
	idle := now.Sub(time.Unix(0, sess.lastActive.Load()))
	cmd, _ := sess.lastCommand.Load().(string)
	flags := "N"
	if sess.subscribed() {
		flags = "P"
	}
	return fmt.Sprintf("id=%d addr=%s name=%s age=%d idle=%d flags=%s db=0 cmd=%s user=%s resp=%d lib-name=%s lib-ver=%s",
		sess.ID, sess.addr, name, int(now.Sub(sess.created).Seconds()), int(idle.Seconds()), flags, cmd, user, proto, lib, ver)
}
