// Package commands is agq's RESP front door: a registration table of
// commands (name, arity, roles, handler), one dispatch and write point, and
// one file per command family.
package commands

import (
	"context"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/tidwall/redcon"

	"github.com/agq/agq/commands/pubsub"
	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/resp"
)

// Version is agq's version, reported by HELLO and INFO.
const Version = "0.1.0"

// Options configure the front door.
type Options struct {
	NodeID     string
	MaxPayload int64
	MaxClients int
	// MaxUnauthenticated and MaxUnauthenticatedPerAddress cap the
	// connections that have not authenticated yet (0: the defaults).
	MaxUnauthenticated           int
	MaxUnauthenticatedPerAddress int
	AuthTimeout                  time.Duration
	// CommandTimeout bounds a non-blocking command's database work.
	CommandTimeout time.Duration
	Limits         resp.Limits
	// IsLeader reports whether this node runs the leader-only services.
	IsLeader func() bool
}

// Server serves RESP clients.
type Server struct {
	opts    Options
	eng     api.Engine
	keys    auth.Keys
	hub     *wakeup.Hub
	log     zerolog.Logger
	metrics *metrics
	table   map[string]*Command
	started time.Time
	broker  *pubsub.Broker
	// authLimit slows failed AUTHs per source address.
	authLimit *authLimiter
	admission admission // under mu

	nextID   atomic.Int64
	mu       sync.Mutex
	sessions map[int64]*Session
	lns      []net.Listener // the plaintext and TLS listeners, in Serve order
	closed   bool
}

// New builds a server; Serve starts it.
func New(opts Options, eng api.Engine, keys auth.Keys, hub *wakeup.Hub, log zerolog.Logger, reg prometheus.Registerer) *Server {
	if opts.CommandTimeout == 0 {
		opts.CommandTimeout = 10 * time.Second
	}
	if opts.MaxClients == 0 {
		opts.MaxClients = 10000
	}
	if opts.AuthTimeout == 0 {
		opts.AuthTimeout = 10 * time.Second
	}
	s := &Server{
		opts:     opts,
		eng:      eng,
		keys:     keys,
		hub:      hub,
		log:      log,
		metrics:  newMetrics(reg),
		started:  time.Now(),
		sessions: map[int64]*Session{},
	}
	s.table = s.buildTable()
	s.broker = pubsub.NewBroker(hub, s.metrics.slowSubscribers)
	s.authLimit = newAuthLimiter(log)
	s.admission = newAdmission(opts.MaxClients, opts.MaxUnauthenticated, opts.MaxUnauthenticatedPerAddress, opts.AuthTimeout)
	s.listen()
	return s
}

// Serve accepts connections on ln until Close; it returns nil after Close.
// It may serve several listeners at once (plaintext and TLS). A TLS
// listener's handshake happens on the connection's first read, so a
// handshake that never finishes is an unauthenticated connection, closed
// by the auth timeout like any other.
func (s *Server) Serve(ln net.Listener) error {
	guarded := resp.NewGuardedListener(ln, s.opts.Limits)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.lns = append(s.lns, guarded)
	s.mu.Unlock()
	return resp.Serve(guarded, s.dispatch, s.accept, s.connClosed)
}

// Close stops accepting, closes every client connection and returns.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	lns := s.lns
	sessions := make([]*Session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, sess := range sessions {
		sess.cancel()
		sess.netConn.Close()
	}
}

func (s *Server) accept(conn redcon.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if len(s.sessions) >= s.opts.MaxClients {
		refuse(conn, "-ERR max number of clients reached\r\n")
		s.metrics.rejectedConns.WithLabelValues("max_clients").Inc()
		return false
	}
	if !s.makeRoomLocked(hostOf(conn.RemoteAddr())) {
		refuse(conn, "-ERR too many connections waiting to authenticate; retry later\r\n")
		return false
	}
	sess := newSession(s.nextID.Add(1), conn)
	sess.eng = s.eng
	if sess.guard != nil {
		sess.guard.SetLimits(resp.PreAuthLimits)
	}
	s.admitUnauthenticated(sess)
	conn.SetContext(sess)
	s.sessions[sess.ID] = sess
	s.metrics.connections.Inc()
	s.metrics.connectionsTotal.Inc()
	return true
}

func (s *Server) connClosed(conn redcon.Conn, err error) {
	sess, _ := conn.Context().(*Session)
	if sess == nil {
		return
	}
	if err != nil && err.Error() == "detached" {
		return // a subscriber: its own loop serves it and ends it
	}
	s.sessionClosed(sess, err)
}

// sessionClosed forgets a closed connection's session.
func (s *Server) sessionClosed(sess *Session, err error) {
	sess.cancel()
	s.countAs(sess, "")
	s.mu.Lock()
	s.forgetUnauthLocked(sess)
	delete(s.sessions, sess.ID)
	s.mu.Unlock()
	s.metrics.connections.Dec()
	if err != nil {
		s.log.Debug().Int64("conn", sess.ID).Err(err).Msg("connection closed")
	}
}

// countAs counts sess as a connection of worker principal (none: ""), and
// no longer as one of the principal it was counted for: the engine learns
// which workers hold connections to this node.
func (s *Server) countAs(sess *Session, principal string) {
	sess.mu.Lock()
	was := sess.counted
	sess.counted = principal
	sess.mu.Unlock()
	if was == principal {
		return
	}
	if was != "" {
		sess.eng.WorkerDisconnected(was)
	}
	if principal != "" {
		sess.eng.WorkerConnected(principal)
	}
}

// sessionList is a snapshot of the open sessions, for CLIENT LIST and INFO.
func (s *Server) sessionList() []*Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		out = append(out, sess)
	}
	return out
}

// RevokeSessions ends the authentication of every session of principal
// that holds a key other than the live one (liveDigest, hex; "" when the
// key was revoked): its key was revoked or replaced, on this node or another.
func (s *Server) RevokeSessions(principal, liveDigest string) {
	for _, sess := range s.sessionList() {
		p := sess.principal()
		if p.Name == principal && hex.EncodeToString(p.Digest[:]) != liveDigest {
			sess.revoke()
		}
	}
}

// ctxForCommand is the context a non-blocking command runs under.
func (s *Server) ctxForCommand(sess *Session) (context.Context, context.CancelFunc) {
	return context.WithTimeout(sess.ctx, s.opts.CommandTimeout)
}

// listen subscribes the server to what the hub hears from every node:
// messages and moved jobs for its subscribers, revoked keys for its
// sessions, and a LISTEN connection restored, after which revocations may
// have been missed.
func (s *Server) listen() {
	wakeup.Listen(s.hub, wakeup.Messages, s.broker.Deliver)
	wakeup.Listen(s.hub, wakeup.KeyRevoked, func(note string) {
		principal, liveDigest, _ := strings.Cut(note, " ")
		s.RevokeSessions(principal, liveDigest)
	})
	wakeup.Listen(s.hub, wakeup.Reconnected, func(struct{}) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.RecheckKeys(ctx)
	})
}

// RecheckKeys ends the authentication of every session whose key is no
// longer live: revocations announced while this node was not listening
// were missed.
func (s *Server) RecheckKeys(ctx context.Context) {
	for _, sess := range s.sessionList() {
		if !sess.isAuthed() {
			continue
		}
		// The database may just have come back: each pooled connection
		// broken by the outage fails once and is replaced, so try again
		// for a while.
		ok, err := s.keys.StillValid(ctx, sess.principal())
		for start := time.Now(); err != nil && time.Since(start) < 10*time.Second && ctx.Err() == nil; {
			time.Sleep(100 * time.Millisecond)
			ok, err = s.keys.StillValid(ctx, sess.principal())
		}
		if err != nil {
			s.log.Warn().Err(err).Msg("re-checking session keys")
			return
		}
		if !ok {
			sess.revoke()
		}
	}
}

// refuse tells a turned-away client why, unless it came over TLS: writing
// there would first wait for its handshake, under s.mu.
func refuse(conn redcon.Conn, reply string) {
	if g, ok := conn.NetConn().(*resp.GuardedConn); ok && g.IsTLS() {
		return
	}
	conn.NetConn().Write([]byte(reply))
}
