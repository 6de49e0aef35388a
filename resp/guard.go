package resp

import (
	"crypto/tls"
	"net"
	"sync"
	"time"
)

// redcon v1.6.2 parses whatever it reads without limits: a huge bulk length
// overflows its index arithmetic and panics, a huge argument count spins, and
// a long header or inline line grows its buffer forever. The guard sits
// between the socket and redcon and hands redcon only input it has framed and
// bounded, so redcon never sees a command it cannot handle.

// Limits bound what one client may send.
type Limits struct {
	MaxArgs    int   // arguments per command (default 1<<16)
	MaxBulk    int64 // bytes per argument (default 64 MiB)
	MaxInline  int   // bytes per inline (telnet-style) command line (default 64 KiB)
	MaxCommand int64 // bytes per whole command (default 256 MiB)
	// Budget, when set, is shared by every connection: see Budget.
	Budget *Budget
	// ReplyTimeout is how long replies may wait for a client that stopped
	// reading them (its socket full) before its connection is closed
	// (default 60 s): a client never drains agq's memory or holds its
	// goroutine for longer, and others are served meanwhile.
	ReplyTimeout time.Duration
}

// PreAuthLimits are what a client may send before it authenticates: enough
// for AUTH and HELLO with long keys, nothing like a job (Redis allows
// unauthenticated clients 10 arguments of 16 KiB).
var PreAuthLimits = Limits{MaxArgs: 10, MaxBulk: 16 << 10, MaxInline: 16 << 10, MaxCommand: 64 << 10}

func (l Limits) withDefaults() Limits {
	if l.ReplyTimeout <= 0 {
		l.ReplyTimeout = time.Minute
	}
	if l.MaxArgs <= 0 {
		l.MaxArgs = 1 << 16
	}
	if l.MaxBulk <= 0 {
		l.MaxBulk = 64 << 20
	}
	if l.MaxInline <= 0 {
		l.MaxInline = 64 << 10
	}
	if l.MaxCommand <= 0 {
		l.MaxCommand = 256 << 20
	}
	return l
}

const (
	// guardMaxRead caps one Read, which bounds what the guard holds back.
	guardMaxRead = 64 << 10
	// guardKeepBuf is the largest pending buffer kept for reuse once drained.
	guardKeepBuf = 2 * guardMaxRead
	// guardErrWriteTimeout keeps a client that reads nothing from pinning
	// the connection while we tell it why we hang up.
	guardErrWriteTimeout = 5 * time.Second
)

// guardViolation is the error Read returns once the client broke framing or
// a limit; redcon then closes the connection.
type guardViolation struct{ reason string }

func (e *guardViolation) Error() string { return "Protocol error: " + e.reason }

type guardedListener struct {
	net.Listener
	limits Limits
}

// NewGuardedListener returns a listener whose Accept wraps every connection
// in a *GuardedConn enforcing limits; zero fields take their defaults.
func NewGuardedListener(ln net.Listener, limits Limits) net.Listener {
	return &guardedListener{Listener: ln, limits: limits.withDefaults()}
}

// Accept waits for the next connection and returns it as a *GuardedConn.
func (l *guardedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return NewGuardedConn(c, l.limits), nil
}

// GuardedConn is a net.Conn whose Read returns only bytes that form
// well-framed RESP commands within its Limits. On a violation it writes a
// Redis-style protocol error to the client and Read fails.
//
// Read, SetIdleTimeout and Park belong to the goroutine serving the
// connection and must not run concurrently with each other, except that
// stop may be called from anywhere; Write, Close and the deadline methods
// are safe from any goroutine.
type GuardedConn struct {
	conn net.Conn

	mu sync.Mutex // guards the fields below; never held across blocking I/O
	// store[off:] holds bytes received but not yet served; the prefix up to
	// frame.pos has been validated.
	store   []byte
	off     int
	served  int64 // stream offset of the next byte to serve
	frame   guardFrame
	readErr error // the peer's error, returned once pending bytes are served
	errSent bool
	idle    time.Duration
	// parking is set while Park reads; unparked records an Unpark;
	// parkWake wakes a Park that waits without reading.
	parking  bool
	unparked bool
	parkWake chan struct{}
}

// NewGuardedConn wraps c so that its reads are validated against limits;
// zero fields take their defaults.
func NewGuardedConn(c net.Conn, limits Limits) *GuardedConn {
	return &GuardedConn{conn: c, frame: guardFrame{lim: limits.withDefaults()}, parkWake: make(chan struct{}, 1)}
}

// replyTimeout is the connection's Limits.ReplyTimeout.
func (c *GuardedConn) replyTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frame.lim.ReplyTimeout
}

// SetLimits replaces the limits from the next command on: agq is stricter
// with a client until it authenticates, as Redis is.
func (c *GuardedConn) SetLimits(l Limits) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.Budget != c.frame.lim.Budget {
		c.frame.release()
	}
	c.frame.lim = l.withDefaults()
}

// SetIdleTimeout makes every read of the underlying connection fail unless it
// completes within d, which drops clients that connect and say nothing; 0
// removes the deadline.
func (c *GuardedConn) SetIdleTimeout(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.idle = d
	if d <= 0 {
		c.conn.SetReadDeadline(time.Time{})
	}
}

// Read reads validated bytes. It never returns data together with an error,
// and it ends a read on a command boundary when one is available, because
// redcon's reader grows its buffer whenever a read leaves it full in the
// middle of a command.
func (c *GuardedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	p = p[:min(len(p), guardMaxRead)]
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.frame.bad != "" {
			return c.violated(p)
		}
		if c.off < len(c.store) {
			n := c.admit(c.store[c.off:min(len(c.store), c.off+len(p))])
			if n > 0 {
				copy(p, c.store[c.off:c.off+n])
				c.consume(n)
				return n, nil
			}
			continue // a violation with nothing before it
		}
		if c.readErr != nil {
			return 0, c.readErr
		}
		n, err := c.readConn(p)
		if n == 0 {
			return 0, err
		}
		c.readErr = err
		served := c.admit(p[:n])
		// Keep the validated tail for the next Read.
		c.store = append(c.store, p[served:c.frame.pos-c.served]...)
		c.served += int64(served)
		if served > 0 {
			return served, nil
		}
	}
}

// readConn reads the underlying connection with the lock released.
func (c *GuardedConn) readConn(p []byte) (int, error) {
	if c.idle > 0 {
		c.conn.SetReadDeadline(time.Now().Add(c.idle))
	}
	c.mu.Unlock()
	defer c.mu.Lock()
	return c.conn.Read(p)
}

// admit validates what b, the pending bytes from c.served on, holds beyond
// what was already validated, and returns how many may be served: up to the
// last complete command when there is one, else all validated bytes, and
// never any byte of a command that broke the rules.
func (c *GuardedConn) admit(b []byte) int {
	if checked := int(c.frame.pos - c.served); checked < len(b) && c.frame.bad == "" {
		c.frame.feed(b[checked:])
	}
	end := c.frame.pos
	if c.frame.cmdStart > c.served || c.frame.bad != "" {
		end = c.frame.cmdStart
	}
	return int(min(max(end-c.served, 0), int64(len(b))))
}

func (c *GuardedConn) consume(n int) {
	c.off += n
	c.served += int64(n)
	if c.off == len(c.store) {
		c.off = 0
		c.store = c.store[:0]
		if cap(c.store) > guardKeepBuf {
			c.store = nil
		}
	}
}

// violated serves what came before the offending command, then tells the
// client why it is being dropped. redcon flushes its replies before it reads
// again, so the error follows the replies to the commands served.
func (c *GuardedConn) violated(p []byte) (int, error) {
	if n := c.admit(c.store[c.off:min(len(c.store), c.off+len(p))]); n > 0 {
		copy(p, c.store[c.off:c.off+n])
		c.consume(n)
		return n, nil
	}
	err := &guardViolation{reason: c.frame.bad}
	if !c.errSent {
		c.errSent = true
		c.store, c.off = nil, 0
		c.mu.Unlock()
		defer c.mu.Lock()
		c.conn.SetWriteDeadline(time.Now().Add(guardErrWriteTimeout))
		c.conn.Write([]byte("-ERR " + err.Error() + "\r\n"))
	}
	return 0, err
}

// IsTLS reports whether the underlying connection is a TLS connection.
func (c *GuardedConn) IsTLS() bool {
	_, ok := c.conn.(*tls.Conn)
	return ok
}

// Write writes to the underlying connection.
func (c *GuardedConn) Write(p []byte) (int, error) { return c.conn.Write(p) }

// Close closes the underlying connection; a running Park then ends and
// reports the peer gone.
func (c *GuardedConn) Close() error {
	c.mu.Lock()
	c.frame.release()
	c.mu.Unlock()
	return c.conn.Close()
}

// LocalAddr returns the local network address.
func (c *GuardedConn) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// RemoteAddr returns the remote network address.
func (c *GuardedConn) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// SetDeadline sets the underlying connection's read and write deadlines; the
// idle timeout and Park replace the read deadline as they go.
func (c *GuardedConn) SetDeadline(t time.Time) error { return c.conn.SetDeadline(t) }

// SetReadDeadline sets the underlying connection's read deadline; the idle
// timeout and Park replace it as they go.
func (c *GuardedConn) SetReadDeadline(t time.Time) error { return c.conn.SetReadDeadline(t) }

// SetWriteDeadline sets the underlying connection's write deadline.
func (c *GuardedConn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }
