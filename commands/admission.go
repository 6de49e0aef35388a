package commands

import (
	"container/list"
	"net"
	"time"
)

// admission keeps connections that never authenticate from locking out the
// clients that hold keys. An unauthenticated connection is closed
// AuthTimeout after it connected, whatever it sends meanwhile; at most
// maxUnauth of them (and perAddr from one source address) are kept, and a
// newcomer past either cap closes the oldest one instead of being refused
// (unless that one is still within its grace), so a client with a key
// always gets the round trip its AUTH needs. The fields belong to
// Server.mu.
type admission struct {
	maxUnauth, perAddr int
	timeout            time.Duration
	order              list.List // *Session, unauthenticated, oldest first
	byAddr             map[string]int
}

// authGrace is how long a connection may wait to authenticate before a
// newcomer can displace it.
const authGrace = time.Second

// unauthState is a session's place in the admission, under Server.mu.
type unauthState struct {
	elem  *list.Element
	host  string
	timer *time.Timer
}

func newAdmission(maxClients, maxUnauth, perAddr int, timeout time.Duration) admission {
	if perAddr <= 0 {
		perAddr = 1024
	}
	if maxUnauth <= 0 {
		maxUnauth = max(1, maxClients/2)
	}
	return admission{maxUnauth: maxUnauth, perAddr: perAddr, timeout: timeout, byAddr: map[string]int{}}
}

// makeRoomLocked makes room for a newcomer from host among the
// unauthenticated connections, closing the oldest past a cap. It reports
// false, and closes nothing, when that oldest is still within its grace
// (authGrace): every connection gets a fair chance to authenticate, and a
// flood of fresh connections is turned away instead. s.mu is held.
func (s *Server) makeRoomLocked(host string) bool {
	a := &s.admission
	var oldest *Session
	reason := ""
	switch {
	case a.byAddr[host] >= a.perAddr:
		for e := a.order.Front(); e != nil; e = e.Next() {
			if sess := e.Value.(*Session); sess.unauth.host == host {
				oldest, reason = sess, "address_limit"
				break
			}
		}
	case a.order.Len() >= a.maxUnauth:
		oldest, reason = a.order.Front().Value.(*Session), "unauthenticated_limit"
	}
	if oldest == nil {
		return true
	}
	if time.Since(oldest.created) < min(authGrace, a.timeout) {
		s.metrics.rejectedConns.WithLabelValues(reason).Inc()
		s.log.Debug().Str("addr", host).Str("reason", reason).Msg("turning away a connection")
		return false
	}
	s.evictLocked(oldest, reason)
	return true
}

// admitUnauthenticated counts sess among the unauthenticated connections
// and starts its authentication deadline; s.mu is held.
func (s *Server) admitUnauthenticated(sess *Session) {
	a := &s.admission
	host := hostOf(sess.addr)
	sess.unauth = unauthState{elem: a.order.PushBack(sess), host: host}
	a.byAddr[host]++
	if a.timeout > 0 {
		sess.unauth.timer = time.AfterFunc(a.timeout, func() { s.authDeadline(sess) })
	}
}

// authenticated takes sess out of the unauthenticated connections.
func (s *Server) authenticated(sess *Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetUnauthLocked(sess)
}

// authDeadline closes sess if it has not authenticated in time.
func (s *Server) authDeadline(sess *Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess.unauth.elem != nil {
		s.evictLocked(sess, "auth_timeout")
	}
}

// evictLocked closes an unauthenticated connection and frees its slot at
// once; its goroutine then sees the connection closed. s.mu is held.
func (s *Server) evictLocked(sess *Session, reason string) {
	s.forgetUnauthLocked(sess)
	delete(s.sessions, sess.ID)
	s.metrics.rejectedConns.WithLabelValues(reason).Inc()
	s.log.Debug().Int64("conn", sess.ID).Str("addr", sess.addr).Str("reason", reason).Msg("closing unauthenticated connection")
	sess.netConn.Close()
}

// forgetUnauthLocked removes sess from the admission if it is there.
func (s *Server) forgetUnauthLocked(sess *Session) {
	u := &sess.unauth
	if u.elem == nil {
		return
	}
	if u.timer != nil {
		u.timer.Stop()
	}
	s.admission.order.Remove(u.elem)
	if s.admission.byAddr[u.host]--; s.admission.byAddr[u.host] <= 0 {
		delete(s.admission.byAddr, u.host)
	}
	*u = unauthState{}
}

// hostOf is the source address of a remote "host:port".
func hostOf(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}
