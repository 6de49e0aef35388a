package commands

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/agq/agq/commands/pubsub"
	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// Session is the state of one client connection. Only the connection's own
// goroutine writes it, except where fields are atomic or under mu (read by
// CLIENT LIST and revocation from other goroutines).
type Session struct {
	ID      int64
	conn    redcon.Conn
	netConn net.Conn
	guard   *resp.GuardedConn
	addr    string
	created time.Time
	ctx     context.Context
	cancel  context.CancelFunc

	proto        int // written under mu; read freely by the owning goroutine
	authFailures int
	revoked      atomic.Bool
	lastActive   atomic.Int64 // unix nanoseconds
	lastCommand  atomic.Value // string

	mu       sync.Mutex
	name     string
	libName  string
	libVer   string
	authed   bool
	who      auth.Principal
	authUser string // the user named in AUTH, "" when none
	workerID string // set by WORKER.REGISTER on this connection
	// counted is the worker principal this connection is counted for
	// (Server.countAs), "" when none.
	counted string
	// worker is the worker this session acts as, kept for the hot path.
	worker *records.Worker
	// unblock ends the blocking command running now, if any.
	unblock context.CancelFunc

	unauth unauthState // under Server.mu
	// eng is the engine acting in the connection's namespace (the key's,
	// or where NAMESPACE moved a cluster admin); the owning goroutine's.
	eng api.Engine
	// sub is the connection's pub/sub side once it subscribed (under mu);
	// conn is then the detached connection.
	sub *pubsub.Subscriber
}

func newSession(id int64, conn redcon.Conn) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	nc := conn.NetConn()
	g, _ := nc.(*resp.GuardedConn)
	s := &Session{ID: id, conn: conn, netConn: nc, guard: g, addr: conn.RemoteAddr(), created: time.Now(), ctx: ctx, cancel: cancel, proto: 2}
	s.lastActive.Store(time.Now().UnixNano())
	s.lastCommand.Store("")
	return s
}

func (s *Session) principal() auth.Principal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.who
}

func (s *Session) isAuthed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authed
}

// setAuth records the principal; the connection gets the full input
// limits.
func (s *Session) setAuth(p auth.Principal, user string, limits resp.Limits) {
	s.mu.Lock()
	s.authed, s.who, s.authUser = true, p, user
	s.mu.Unlock()
	s.revoked.Store(false)
	s.authFailures = 0
	if s.guard != nil {
		s.guard.SetLimits(limits)
	}
}

func (s *Session) clearAuth() {
	s.mu.Lock()
	s.authed, s.who, s.authUser = false, auth.Principal{}, ""
	s.worker = nil
	s.mu.Unlock()
}

func (s *Session) clientName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name
}

func (s *Session) setBlocked(cancel context.CancelFunc) {
	s.mu.Lock()
	s.unblock = cancel
	s.mu.Unlock()
}

// subscribed reports whether the connection is subscribed to anything.
func (s *Session) subscribed() bool {
	s.mu.Lock()
	sub := s.sub
	s.mu.Unlock()
	return sub != nil && sub.Count() > 0
}

// revoke ends the session's authentication at its next command, and its
// blocking command now: a revoked key must not be handed a job.
func (s *Session) revoke() {
	s.revoked.Store(true)
	s.mu.Lock()
	unblock, sub := s.unblock, s.sub
	s.mu.Unlock()
	if unblock != nil {
		unblock()
	}
	if sub != nil {
		// A subscriber would go on receiving with a key that no longer
		// holds: its connection ends.
		s.netConn.Close()
	}
}
