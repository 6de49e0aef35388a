package resp

import (
	"errors"
	"os"
	"sync"
	"time"
)

const (
	// guardWatchMaxPending bounds what a watch keeps for the next Read; past
	// it the watch stops reading and can no longer see the peer leave.
	guardWatchMaxPending = 1 << 20
	guardWatchReadSize   = 4 << 10
)

// WatchPeer lets a handler that blocks notice its client leaving. redcon
// reads the socket only between handlers, so without a watch a blocked
// handler cannot tell that the client closed the connection and might hand
// it a job it never receives.
//
// WatchPeer reads the connection in the background: gone is closed when the
// peer closes the connection or it fails, and bytes that arrive meanwhile are
// kept for the next Read. stop ends the watch and waits for it; it is
// idempotent, safe from any goroutine, and must be called before the
// connection is read again. Only one watch may run at a time.
func (c *GuardedConn) WatchPeer() (gone <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watching {
		panic("resp: WatchPeer called while a watch is running")
	}
	if c.readErr != nil {
		close(ch)
		return ch, func() {}
	}
	c.watching = true
	// The client may rightly stay silent while it waits for the handler.
	c.conn.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	go c.watch(ch, done)
	var once sync.Once
	return ch, func() { once.Do(func() { c.stopWatch(done) }) }
}

func (c *GuardedConn) watch(gone, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, guardWatchReadSize)
	for {
		c.mu.Lock()
		full := len(c.store)-c.off > guardWatchMaxPending
		c.mu.Unlock()
		if full {
			return
		}
		n, err := c.conn.Read(buf)
		c.mu.Lock()
		c.store = append(c.store, buf[:n]...)
		// A timeout is stop asking us to return, not the peer leaving.
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			c.readErr = err
			close(gone)
		}
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (c *GuardedConn) stopWatch(done <-chan struct{}) {
	c.mu.Lock()
	// A deadline in the past unblocks the watch's Read at once. Holding mu
	// keeps SetIdleTimeout from clearing it before the watch has returned.
	c.conn.SetReadDeadline(time.Unix(1, 0))
	c.mu.Unlock()
	<-done
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watching = false
	var deadline time.Time
	if c.idle > 0 {
		deadline = time.Now().Add(c.idle)
	}
	c.conn.SetReadDeadline(deadline)
}
