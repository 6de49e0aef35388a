package commands

import (
	"context"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// blocking is the wait of a blocking command (BRPOP, JOB.WAIT): it ends at
// its timeout, when the client leaves, when ctx ends (the key is revoked,
// the server stops) — or, for another look at the database, at a wake-up.
//
// The connection's own goroutine waits parked on its socket (see
// resp.GuardedConn.Park), and wake-ups unpark it, so a blocked client costs
// no goroutine, timer or buffer beyond its connection's.
type blocking struct {
	ctx      context.Context
	guard    *resp.GuardedConn
	deadline time.Time // zero: no timeout
	recheck  time.Duration
	stopCtx  func() bool
	// pending sends the replies of commands pipelined before this one
	// when the wait begins, as Redis does, so that a client reading
	// replies as they come has them while this one waits. nil once done.
	pending flusher
}

type flusher interface{ Flush() error }

func newBlocking(ctx context.Context, sess *Session, timeout, recheck time.Duration) *blocking {
	b := &blocking{ctx: ctx, guard: sess.guard, recheck: recheck}
	if f, ok := sess.conn.(flusher); ok {
		b.pending = f
	}
	if timeout > 0 {
		b.deadline = time.Now().Add(timeout)
	}
	if b.guard != nil {
		b.guard.ResetPark()
		b.stopCtx = context.AfterFunc(ctx, b.guard.Unpark)
	}
	return b
}

// close releases the wait.
func (b *blocking) close() {
	if b.stopCtx != nil {
		b.stopCtx()
	}
}

// onWake is what a wake-up must call besides filling its channel.
func (b *blocking) onWake() func() {
	if b.guard == nil {
		return nil
	}
	return b.guard.Unpark
}

// peerGone reports whether the client was seen leaving.
func (b *blocking) peerGone() bool { return b.guard != nil && b.guard.PeerGone() }

// next waits for a wake-up on c (returned) or the periodic re-check (all
// nil). When the wait is over instead it returns the reply (onTimeout at
// the timeout) or the error to end the command with.
func next[T any](b *blocking, c <-chan T, onTimeout resp.Reply) (*T, resp.Reply, error) {
	recheck := time.Now().Add(b.recheck)
	for {
		select {
		case v := <-c:
			return &v, nil, nil
		default:
		}
		if err := b.ctx.Err(); err != nil {
			return nil, nil, err
		}
		now := time.Now()
		if !b.deadline.IsZero() && !now.Before(b.deadline) {
			return nil, onTimeout, nil
		}
		if !now.Before(recheck) {
			return nil, nil, nil
		}
		until := recheck
		if !b.deadline.IsZero() && b.deadline.Before(until) {
			until = b.deadline
		}
		if b.park(until) {
			return nil, nil, records.ErrClientGone
		}
	}
}

// out waits out the timeout, wake-ups aside: nil at the timeout, or the
// error that ends the command.
func (b *blocking) out(onTimeout resp.Reply) (resp.Reply, error) {
	_, reply, err := next[struct{}](b, nil, onTimeout)
	for reply == nil && err == nil { // re-checks do not end it
		_, reply, err = next[struct{}](b, nil, onTimeout)
	}
	return reply, err
}

// park waits until until, a wake-up or ctx, and reports whether the client
// left. Without a guarded socket (never in a served connection) it only
// sleeps.
func (b *blocking) park(until time.Time) bool {
	if b.pending != nil {
		b.pending.Flush() // a failed write shows as the client gone
		b.pending = nil
	}
	if b.guard != nil {
		return b.guard.Park(until)
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-t.C:
	case <-b.ctx.Done():
	}
	return false
}

// popWait is a blocked pop's wait, as the engine takes it.
type popWait struct{ b *blocking }

func (w popWait) Next(c <-chan records.ReadyNote) (*records.ReadyNote, bool, error) {
	note, reply, err := next(w.b, c, resp.NilArray)
	return note, reply != nil, err
}

func (w popWait) Out() error {
	_, err := w.b.out(resp.NilArray)
	return err
}

func (w popWait) Gone() bool     { return w.b.peerGone() }
func (w popWait) OnWake() func() { return w.b.onWake() }

// jobWait is a JOB.WAIT's wait, as the engine takes it.
type jobWait struct{ b *blocking }

func (w jobWait) Next(c <-chan struct{}) (bool, error) {
	_, reply, err := next(w.b, c, resp.Nil)
	return reply != nil, err
}

func (w jobWait) OnWake() func() { return w.b.onWake() }
