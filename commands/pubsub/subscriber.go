package pubsub

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/redcon"

	"github.com/agq/agq/commands/keyspace"
	"github.com/agq/agq/internal/wakeup"
)

// queueSize is how many messages a subscriber may have unwritten.
const queueSize = 4096

// Subscriber is a detached connection in subscribed mode.
type Subscriber struct {
	b *Broker
	// ns is the namespace whose channels it subscribes to (under b.mu):
	// the connection's when it subscribed with none left.
	ns      string
	conn    redcon.DetachedConn
	netConn net.Conn
	proto   func() int
	log     zerolog.Logger
	// wmu orders every write to conn: messages and replies.
	wmu sync.Mutex
	// Under b.mu:
	channels map[string]struct{}
	patterns map[string]*keyspace.Glob
	out      chan wakeup.Message
	gone     chan struct{}
	once     sync.Once
	cut      atomic.Bool
}

// NewSubscriber makes a subscriber of a connection detached from redcon's
// loop, in namespace ns. conn takes its messages and replies; netConn is
// closed to end a write its full socket holds up; proto is the RESP
// version of its messages, read under the write lock; log names the
// connection.
func (b *Broker) NewSubscriber(conn redcon.DetachedConn, netConn net.Conn, proto func() int, log zerolog.Logger,
	ns string) *Subscriber {
	return &Subscriber{b: b, ns: ns, conn: conn, netConn: netConn, proto: proto, log: log,
		channels: map[string]struct{}{}, patterns: map[string]*keyspace.Glob{},
		out: make(chan wakeup.Message, queueSize), gone: make(chan struct{})}
}

func (sub *Subscriber) count() int { return len(sub.channels) + len(sub.patterns) }

// MoveTo makes ns the namespace of sub's next subscriptions, when it holds
// none; it reports whether sub now subscribes in ns (a subscriber holds
// the channels of one namespace at a time).
func (sub *Subscriber) MoveTo(ns string) bool {
	sub.b.mu.Lock()
	defer sub.b.mu.Unlock()
	if sub.count() == 0 {
		sub.ns = ns
	}
	return sub.ns == ns
}

// Count is the number of sub's subscriptions, channels and patterns.
func (sub *Subscriber) Count() int {
	sub.b.mu.Lock()
	defer sub.b.mu.Unlock()
	return sub.count()
}

// names lists sub's patterns, or its channels, under b.mu.
func (sub *Subscriber) names(pattern bool) []string {
	var names []string
	if pattern {
		for n := range sub.patterns {
			names = append(names, n)
		}
		return names
	}
	for n := range sub.channels {
		names = append(names, n)
	}
	return names
}

// Start flushes a fresh subscriber's first replies, so that they go before
// any message, and starts writing its messages.
func (sub *Subscriber) Start() {
	sub.conn.Flush()
	go sub.writeLoop()
}

// Exclusive runs write while no message is written to the connection, then
// flushes: the replies to a subscriber's commands go between messages.
func (sub *Subscriber) Exclusive(write func()) {
	sub.wmu.Lock()
	defer sub.wmu.Unlock()
	defer sub.conn.Flush()
	write()
}

// Close stops writing messages, forgets sub's subscriptions and closes its
// connection.
func (sub *Subscriber) Close() {
	sub.once.Do(func() { close(sub.gone) })
	sub.b.drop(sub)
	sub.wmu.Lock()
	sub.conn.Close()
	sub.wmu.Unlock()
}

// push queues m, or cuts the subscriber off when its queue is full.
func (sub *Subscriber) push(m wakeup.Message) {
	select {
	case sub.out <- m:
	default:
		if !sub.cut.CompareAndSwap(false, true) {
			return
		}
		sub.b.slow.Inc()
		sub.log.Warn().Msg("closing a subscriber that does not read its messages")
		go sub.cutOff()
	}
}

// cutOff tells a subscriber it was too slow, as far as its socket takes it
// at once, and closes its connection.
func (sub *Subscriber) cutOff() {
	sub.once.Do(func() {
		close(sub.gone)
		nc := sub.netConn
		// Closing the connection ends a write its full socket holds up.
		stop := time.AfterFunc(100*time.Millisecond, func() { nc.Close() })
		defer stop.Stop()
		sub.wmu.Lock()
		sub.conn.WriteError("ERR subscriber too slow: " + strconv.Itoa(queueSize) + " messages unread; disconnected")
		sub.conn.Flush()
		sub.wmu.Unlock()
		nc.Close()
	})
}

// writeLoop writes queued messages until the subscriber is gone.
func (sub *Subscriber) writeLoop() {
	for {
		select {
		case <-sub.gone:
			return
		case m := <-sub.out:
			sub.wmu.Lock()
			proto := sub.proto()
			sub.conn.WriteRaw(messageRESP(m, proto))
			// Everything already queued goes in the same write.
			for more := true; more; {
				select {
				case m := <-sub.out:
					sub.conn.WriteRaw(messageRESP(m, proto))
				default:
					more = false
				}
			}
			err := sub.conn.Flush()
			sub.wmu.Unlock()
			if err != nil {
				return
			}
		}
	}
}
