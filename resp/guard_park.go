package resp

import (
	"errors"
	"os"
	"time"
)

const (
	// guardParkReadSize is the read buffer of a parked connection: a
	// blocked client rarely sends anything, and what it sends is kept.
	guardParkReadSize = 512
	// guardParkMaxPending bounds what a Park keeps for the next Read; past
	// it Park stops reading and can no longer see the peer leave.
	guardParkMaxPending = 1 << 20
)

// Park blocks the connection's own goroutine — the one running a blocking
// command — until Unpark is called, until is reached (zero: no limit), or the
// peer leaves, and reports whether it left. It reads the socket while it
// waits, keeping what arrives for the next Read, so a client that leaves is
// seen at once; it needs no goroutine of its own, which is
// what keeps thousands of blocked clients cheap.
func (c *GuardedConn) Park(until time.Time) (gone bool) {
	var buf [guardParkReadSize]byte
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.restoreDeadline()
	for {
		if c.readErr != nil {
			return true
		}
		if c.unparked {
			c.unparked = false
			return false
		}
		if !until.IsZero() && !time.Now().Before(until) {
			return false
		}
		if len(c.store)-c.off > guardParkMaxPending {
			// Too much pending to keep reading: wait without watching.
			c.mu.Unlock()
			c.sleepUnparked(until)
			c.mu.Lock()
			continue
		}
		c.parking = true
		c.conn.SetReadDeadline(until)
		c.mu.Unlock()
		n, err := c.conn.Read(buf[:])
		c.mu.Lock()
		c.parking = false
		c.store = append(c.store, buf[:n]...)
		// A timeout is Unpark or until, which the loop tells apart.
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			c.readErr = err
		}
	}
}

// sleepUnparked waits for Unpark or until, without reading.
func (c *GuardedConn) sleepUnparked(until time.Time) {
	var timeout <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-c.parkWake:
	case <-timeout:
	}
}

// Unpark ends the current Park, or the next one at once if none is running.
// It is safe from any goroutine.
func (c *GuardedConn) Unpark() {
	c.mu.Lock()
	c.unparked = true
	if c.parking {
		// A deadline in the past ends the parked Read at once.
		c.conn.SetReadDeadline(time.Unix(1, 0))
	}
	c.mu.Unlock()
	select {
	case c.parkWake <- struct{}{}:
	default:
	}
}

// ResetPark forgets an Unpark meant for an earlier blocking command.
func (c *GuardedConn) ResetPark() {
	c.mu.Lock()
	c.unparked = false
	c.mu.Unlock()
	select {
	case <-c.parkWake:
	default:
	}
}

// PeerGone reports whether a Park saw the peer leave.
func (c *GuardedConn) PeerGone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readErr != nil
}

// restoreDeadline puts back the idle deadline a Park replaced; mu is held.
func (c *GuardedConn) restoreDeadline() {
	var deadline time.Time
	if c.idle > 0 {
		deadline = time.Now().Add(c.idle)
	}
	c.conn.SetReadDeadline(deadline)
}
