package commands

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/agq/agq/commands/keyspace"
	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/resp"
)

// Pub/sub over RESP, read-only for subscribers: a connection that
// subscribes leaves redcon's loop (Detach) for one of its own, where
// messages from any goroutine and the replies to its commands share one
// write lock. Messages wait in a bounded queue per subscriber, written by
// its own goroutine: a subscriber that does not read is cut off when its
// queue is full, and nobody publishing ever waits for it.

// subscriberQueue is how many messages a subscriber may have unwritten.
const subscriberQueue = 4096

// silent is the reply of a command that wrote its own replies.
type silent struct{}

func (silent) AppendRESP(b []byte, _ int) []byte { return b }

// broker routes messages to this node's subscribers.
type broker struct {
	s        *Server
	mu       sync.Mutex
	channels map[string]map[*subscriber]struct{}
	patterns map[*subscriber]struct{} // subscribers with patterns
	active   int                      // subscribers with any subscription
	// statusSubs counts the subscriptions that may carry jobs' status or
	// queues' events: the engine builds those only while some node has one.
	statusSubs int
}

// interest is what this node's subscribers listen to, under b.mu.
func (b *broker) interest() wakeup.Interest {
	switch {
	case b.active == 0:
		return wakeup.NoInterest
	case b.statusSubs > 0:
		return wakeup.StatusInterest
	}
	return wakeup.SomeInterest
}

// counted adjusts statusSubs for a subscription added (+1) or removed (-1).
func (b *broker) counted(name string, pattern bool, delta int) {
	if wakeup.CarriesStatus(name, pattern) {
		b.statusSubs += delta
	}
}

func newBroker(s *Server) *broker {
	return &broker{s: s, channels: map[string]map[*subscriber]struct{}{}, patterns: map[*subscriber]struct{}{}}
}

// subscriber is a detached connection in subscribed mode.
type subscriber struct {
	b    *broker
	sess *Session
	conn redcon.DetachedConn
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

func (sub *subscriber) count() int { return len(sub.channels) + len(sub.patterns) }

// Deliver hands a message from the hub to this node's subscribers.
func (s *Server) Deliver(m wakeup.Message) { s.broker.deliver(m) }

func (s *Server) pubsubCommands() []*Command {
	return []*Command{
		{Name: "subscribe", Arity: -2, Roles: anyRole, Handler: s.cmdSubscribe(false)},
		{Name: "psubscribe", Arity: -2, Roles: anyRole, Handler: s.cmdSubscribe(true)},
		{Name: "unsubscribe", Arity: -1, Roles: anyRole, Handler: s.cmdUnsubscribe(false)},
		{Name: "punsubscribe", Arity: -1, Roles: anyRole, Handler: s.cmdUnsubscribe(true)},
		{Name: "publish", Arity: 3, Roles: roleWorker, Handler: s.cmdPublish},
		{Name: "job.logs", Arity: -2, Roles: readers, Handler: s.cmdJobLogs},
	}
}

// receivers counts this node's subscribers a message on channel reaches.
func (b *broker) receivers(channel string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.channels[channel])
	for sub := range b.patterns {
		for _, g := range sub.patterns {
			if g.Match(channel) {
				n++
			}
		}
	}
	return n
}

// deliver hands a message to every subscriber of its channel or of a
// matching pattern; it never waits for one.
func (b *broker) deliver(m wakeup.Message) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for sub := range b.channels[m.Channel] {
		sub.push(m)
	}
	for sub := range b.patterns {
		for p, g := range sub.patterns {
			if g.Match(m.Channel) {
				sub.push(wakeup.Message{Channel: m.Channel, Payload: m.Payload, Pattern: p})
			}
		}
	}
}

// push queues m, or cuts the subscriber off when its queue is full.
func (sub *subscriber) push(m wakeup.Message) {
	select {
	case sub.out <- m:
	default:
		if !sub.cut.CompareAndSwap(false, true) {
			return
		}
		sub.b.s.metrics.slowSubscribers.Inc()
		sub.b.s.log.Warn().Int64("conn", sub.sess.ID).Str("addr", sub.sess.addr).Msg("closing a subscriber that does not read its messages")
		go sub.cutOff()
	}
}

// cutOff tells a subscriber it was too slow, as far as its socket takes it
// at once, and closes its connection.
func (sub *subscriber) cutOff() {
	sub.once.Do(func() {
		close(sub.gone)
		nc := sub.sess.netConn
		// Closing the connection ends a write its full socket holds up.
		stop := time.AfterFunc(100*time.Millisecond, func() { nc.Close() })
		defer stop.Stop()
		sub.wmu.Lock()
		sub.conn.WriteError("ERR subscriber too slow: " + strconv.Itoa(subscriberQueue) + " messages unread; disconnected")
		sub.conn.Flush()
		sub.wmu.Unlock()
		nc.Close()
	})
}

// writeLoop writes queued messages until the subscriber is gone.
func (sub *subscriber) writeLoop() {
	for {
		select {
		case <-sub.gone:
			return
		case m := <-sub.out:
			sub.wmu.Lock()
			sub.conn.WriteRaw(messageRESP(m, sub.sess.proto))
			// Everything already queued goes in the same write.
			for more := true; more; {
				select {
				case m := <-sub.out:
					sub.conn.WriteRaw(messageRESP(m, sub.sess.proto))
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

// messageRESP is a message as Redis sends it: an array in RESP2, a push in
// RESP3.
func messageRESP(m wakeup.Message, proto int) []byte {
	parts := []string{"message", m.Channel, m.Payload}
	if m.Pattern != "" {
		parts = []string{"pmessage", m.Pattern, m.Channel, m.Payload}
	}
	return pushRESP(proto, parts, -1)
}

// pushRESP encodes bulk strings, then count if it is not negative, as an
// array (RESP2) or a push (RESP3).
func pushRESP(proto int, parts []string, count int) []byte {
	n := len(parts)
	if count >= 0 {
		n++
	}
	kind := byte('*')
	if proto == 3 {
		kind = '>'
	}
	b := append([]byte{kind}, strconv.Itoa(n)...)
	b = append(b, "\r\n"...)
	for _, p := range parts {
		b = resp.BulkString(p).AppendRESP(b, proto)
	}
	if count >= 0 {
		b = resp.Int(count).AppendRESP(b, proto)
	}
	return b
}

// subscriberOf returns sess's subscriber, detaching its connection from
// redcon's loop the first time (fresh): the caller then writes its replies,
// flushes, and starts the subscriber's loops.
func (s *Server) subscriberOf(sess *Session) (sub *subscriber, fresh bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.sub != nil {
		return sess.sub, false
	}
	dconn := sess.conn.Detach()
	sub = &subscriber{b: s.broker, sess: sess, conn: dconn, channels: map[string]struct{}{}, patterns: map[string]*keyspace.Glob{},
		out: make(chan wakeup.Message, subscriberQueue), gone: make(chan struct{})}
	sess.sub = sub
	sess.conn = dconn
	return sub, true
}

// startSubscriber runs a fresh subscriber's loops, once its first replies
// are out.
func (s *Server) startSubscriber(sub *subscriber) {
	go sub.writeLoop()
	go s.subscribedLoop(sub)
}

// subscribedLoop serves a detached connection's commands: the
// subscription commands, PING, and in RESP3 (or with no subscription
// left) every other command but the blocking ones.
func (s *Server) subscribedLoop(sub *subscriber) {
	defer func() {
		sub.once.Do(func() { close(sub.gone) })
		s.broker.drop(sub)
		sub.wmu.Lock()
		sub.conn.Close()
		sub.wmu.Unlock()
		s.sessionClosed(sub.sess, nil)
	}()
	for {
		cmd, err := sub.conn.ReadCommand()
		if err != nil {
			return
		}
		if s.subscribedCommand(sub, cmd) {
			return
		}
	}
}

// subscribedCommand runs one command of a subscribed connection and reports
// whether the connection is to close.
func (s *Server) subscribedCommand(sub *subscriber, cmd redcon.Command) (quit bool) {
	if len(cmd.Args) == 0 {
		return false
	}
	name := resp.Lower(cmd.Args[0])
	sub.wmu.Lock()
	defer sub.wmu.Unlock()
	defer sub.conn.Flush()
	s.broker.mu.Lock()
	subscribed := sub.count() > 0
	s.broker.mu.Unlock()
	switch {
	case name == "ping" && subscribed && sub.sess.proto == 2:
		msg := ""
		if len(cmd.Args) > 1 {
			msg = string(cmd.Args[1])
		}
		sub.conn.WriteRaw(pushRESP(2, []string{"pong", msg}, -1))
		return false
	case isPubSubCommand(name), name == "quit", name == "ping", !subscribed || sub.sess.proto == 3:
		if c := s.table[name]; c != nil && c.Blocking && subscribed {
			sub.conn.WriteError("ERR blocking commands are not allowed while subscribed")
			return false
		}
		s.dispatch(sub.conn, cmd)
		return name == "quit"
	}
	sub.conn.WriteError("ERR Can't execute '" + name + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
	return false
}

func isPubSubCommand(name string) bool {
	switch name {
	case "subscribe", "psubscribe", "unsubscribe", "punsubscribe":
		return true
	}
	return false
}

// drop forgets sub's subscriptions.
func (b *broker) drop(sub *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	had := sub.count() > 0
	for ch := range sub.channels {
		b.unsubscribeLocked(sub, ch)
	}
	for p := range sub.patterns {
		b.counted(p, true, -1)
	}
	delete(b.patterns, sub)
	sub.patterns = map[string]*keyspace.Glob{}
	if had {
		b.active--
		b.s.hub.SetSubscribed(b.interest())
	}
}

func (b *broker) unsubscribeLocked(sub *subscriber, ch string) {
	if _, ok := sub.channels[ch]; ok {
		b.counted(ch, false, -1)
	}
	delete(sub.channels, ch)
	if subs := b.channels[ch]; subs != nil {
		delete(subs, sub)
		if len(subs) == 0 {
			delete(b.channels, ch)
		}
	}
}

// SUBSCRIBE channel [channel …] and PSUBSCRIBE pattern [pattern …]
func (s *Server) cmdSubscribe(pattern bool) Handler {
	kind := "subscribe"
	if pattern {
		kind = "psubscribe"
	}
	return func(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
		for _, a := range args[1:] {
			if err := s.maySubscribe(ctx, sess, string(a), pattern); err != nil {
				return nil, err
			}
		}
		sub, fresh := s.subscriberOf(sess)
		b := s.broker
		var out []byte
		b.mu.Lock()
		wasActive := sub.count() > 0
		for _, a := range args[1:] {
			name := string(a)
			if pattern {
				if _, ok := sub.patterns[name]; !ok {
					b.counted(name, true, +1)
				}
				sub.patterns[name] = keyspace.CompileGlob(name)
				b.patterns[sub] = struct{}{}
			} else {
				if _, ok := sub.channels[name]; !ok {
					b.counted(name, false, +1)
				}
				sub.channels[name] = struct{}{}
				if b.channels[name] == nil {
					b.channels[name] = map[*subscriber]struct{}{}
				}
				b.channels[name][sub] = struct{}{}
			}
			out = append(out, pushRESP(sess.proto, []string{kind, name}, sub.count())...)
		}
		if !wasActive {
			b.active++
		}
		told := s.hub.SetSubscribed(b.interest())
		b.mu.Unlock()
		// The other nodes learn of a subscription that widens what this
		// node listens to before the client is told it is subscribed, so
		// they send what follows.
		select {
		case <-told:
		case <-time.After(time.Second):
		}
		sub.conn.WriteRaw(out)
		if fresh {
			// Nothing else writes yet: the replies go before any message.
			sub.conn.Flush()
			s.startSubscriber(sub)
		}
		return silent{}, nil
	}
}

// UNSUBSCRIBE [channel …] and PUNSUBSCRIBE [pattern …]
func (s *Server) cmdUnsubscribe(pattern bool) Handler {
	kind := "unsubscribe"
	if pattern {
		kind = "punsubscribe"
	}
	return func(_ context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
		sess.mu.Lock()
		sub := sess.sub
		sess.mu.Unlock()
		if sub == nil {
			// Not subscribed: the count is zero, as in Redis.
			if len(args) == 1 {
				return nullUnsubscribe(sess.proto, kind), nil
			}
			var out rawReply
			for _, a := range args[1:] {
				out = append(out, pushRESP(sess.proto, []string{kind, string(a)}, 0)...)
			}
			return out, nil
		}
		b := s.broker
		b.mu.Lock()
		defer b.mu.Unlock()
		wasActive := sub.count() > 0
		names := make([]string, 0, len(args)-1)
		for _, a := range args[1:] {
			names = append(names, string(a))
		}
		if len(names) == 0 && pattern {
			for n := range sub.patterns {
				names = append(names, n)
			}
		} else if len(names) == 0 {
			for n := range sub.channels {
				names = append(names, n)
			}
		}
		var out []byte
		for _, n := range names {
			if pattern {
				if _, ok := sub.patterns[n]; ok {
					b.counted(n, true, -1)
				}
				delete(sub.patterns, n)
				if len(sub.patterns) == 0 {
					delete(b.patterns, sub)
				}
			} else {
				b.unsubscribeLocked(sub, n)
			}
			out = append(out, pushRESP(sess.proto, []string{kind, n}, sub.count())...)
		}
		if len(names) == 0 {
			out = nullUnsubscribe(sess.proto, kind)
		}
		if wasActive && sub.count() == 0 {
			b.active--
		}
		s.hub.SetSubscribed(b.interest())
		sub.conn.WriteRaw(out)
		return silent{}, nil
	}
}

// rawReply is bytes written as they are.
type rawReply []byte

func (r rawReply) AppendRESP(b []byte, _ int) []byte { return append(b, r...) }

// nullUnsubscribe is the answer to an UNSUBSCRIBE with nothing to leave.
func nullUnsubscribe(proto int, kind string) rawReply {
	kindByte := byte('*')
	if proto == 3 {
		kindByte = '>'
	}
	b := append([]byte{kindByte}, "3\r\n"...)
	b = resp.BulkString(kind).AppendRESP(b, proto)
	b = resp.Nil.AppendRESP(b, proto)
	return resp.Int(0).AppendRESP(b, proto)
}

// maySubscribe applies the roles: an admin may subscribe to anything; a
// producer to jobs' and queues' channels; a worker to job.cancel, its own
// events and the channels of the jobs it holds, by name only.
func (s *Server) maySubscribe(ctx context.Context, sess *Session, name string, pattern bool) error {
	p := sess.principal()
	refuse := resp.CodeErrorf("NOPERM", "this key may not subscribe to '%s'", name)
	switch p.Role {
	case auth.RoleAdmin, auth.RoleViewer:
		// A viewer sees everything an admin sees; subscribing changes nothing.
		return nil
	case auth.RoleProducer:
		if strings.HasPrefix(name, "job.") || strings.HasPrefix(name, "queue.") {
			return nil
		}
		return refuse
	case auth.RoleWorker:
		if pattern {
			return refuse
		}
		if name == "job.cancel" {
			return nil
		}
		w, err := s.hotWorker(ctx, sess)
		if err != nil {
			return err
		}
		if name == "worker."+w.ID+".events" {
			return nil
		}
		id, ok := strings.CutPrefix(name, "job.")
		if !ok {
			return refuse
		}
		if i := strings.LastIndexByte(id, '.'); i > 0 && (id[i:] == ".status" || id[i:] == ".logs") {
			j, err := s.eng.JobGet(ctx, id[:i])
			if err == nil && j.WorkerID != nil && *j.WorkerID == w.ID {
				return nil
			}
		}
		return refuse
	}
	return refuse
}
