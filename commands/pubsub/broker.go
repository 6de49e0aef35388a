// Package pubsub is agq's pub/sub broker: it keeps this node's subscribers
// and their channels and patterns, hands each message from the wake-up hub
// to the subscribers it reaches, and tells the hub what they listen to.
// Channels are a namespace's own: a subscriber hears the messages of its
// namespace only, whatever the channel's or the pattern's name.
//
// A subscriber's connection has left redcon's loop: messages from any
// goroutine and the replies to its commands share one write lock. Messages
// wait in a bounded queue per subscriber, written by its own goroutine: a
// subscriber that does not read is cut off when its queue is full, and
// nobody publishing ever waits for it. Package commands registers the
// commands, checks who may subscribe to what and serves the subscribed
// connection's commands.
package pubsub

import (
	"cmp"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agq/agq/commands/keyspace"
	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
)

// Broker routes messages to this node's subscribers.
type Broker struct {
	hub  *wakeup.Hub
	slow prometheus.Counter

	mu       sync.Mutex
	channels map[channel]map[*Subscriber]struct{}
	// patterns are the subscribers with patterns, by namespace.
	patterns map[string]map[*Subscriber]struct{}
	active   int // subscribers with any subscription
	// statusSubs counts the subscriptions that may carry jobs' status or
	// queues' events: the engine builds those only while some node has one.
	statusSubs int
}

// channel is a channel of a namespace.
type channel struct{ namespace, name string }

// namespaceOf is the namespace a message is heard in: its own, or the
// default one for a message from a node that names none.
func namespaceOf(m wakeup.Message) string { return cmp.Or(m.Namespace, records.DefaultNamespace) }

// NewBroker returns a broker that tells hub what its subscribers listen to
// and counts in slow the subscribers it cuts off.
func NewBroker(hub *wakeup.Hub, slow prometheus.Counter) *Broker {
	return &Broker{hub: hub, slow: slow, channels: map[channel]map[*Subscriber]struct{}{},
		patterns: map[string]map[*Subscriber]struct{}{}}
}

// interest is what this node's subscribers listen to, under b.mu.
func (b *Broker) interest() wakeup.Interest {
	switch {
	case b.active == 0:
		return wakeup.NoInterest
	case b.statusSubs > 0:
		return wakeup.StatusInterest
	}
	return wakeup.SomeInterest
}

// counted adjusts statusSubs for a subscription added (+1) or removed (-1).
func (b *Broker) counted(name string, pattern bool, delta int) {
	if wakeup.CarriesStatus(name, pattern) {
		b.statusSubs += delta
	}
}

// Receivers counts this node's subscribers a message on channel name of
// namespace ns reaches.
func (b *Broker) Receivers(ns, name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.channels[channel{ns, name}])
	for sub := range b.patterns[ns] {
		for _, g := range sub.patterns {
			if g.Match(name) {
				n++
			}
		}
	}
	return n
}

// Deliver hands a message from the hub to every subscriber of its
// namespace subscribed to its channel or to a matching pattern; it never
// waits for one.
func (b *Broker) Deliver(m wakeup.Message) {
	ns := namespaceOf(m)
	b.mu.Lock()
	defer b.mu.Unlock()
	for sub := range b.channels[channel{ns, m.Channel}] {
		sub.push(m)
	}
	for sub := range b.patterns[ns] {
		for p, g := range sub.patterns {
			if g.Match(m.Channel) {
				sub.push(wakeup.Message{Namespace: m.Namespace, Channel: m.Channel, Payload: m.Payload, Pattern: p})
			}
		}
	}
}

// Subscribe adds channels, or patterns, of sub's namespace to sub's
// subscriptions and writes its replies, unflushed: for each name, the
// kind, the name and sub's count.
func (b *Broker) Subscribe(sub *Subscriber, names []string, pattern bool) {
	kind := "subscribe"
	if pattern {
		kind = "psubscribe"
	}
	proto := sub.proto()
	var out []byte
	b.mu.Lock()
	wasActive := sub.count() > 0
	for _, name := range names {
		if pattern {
			b.addPatternLocked(sub, name)
		} else {
			b.addChannelLocked(sub, name)
		}
		out = append(out, pushRESP(proto, []string{kind, name}, sub.count())...)
	}
	if !wasActive {
		b.active++
	}
	told := b.hub.SetSubscribed(b.interest())
	b.mu.Unlock()
	// The other nodes learn of a subscription that widens what this node
	// listens to before the client is told it is subscribed, so they send
	// what follows.
	select {
	case <-told:
	case <-time.After(time.Second):
	}
	sub.conn.WriteRaw(out)
}

func (b *Broker) addPatternLocked(sub *Subscriber, name string) {
	if _, ok := sub.patterns[name]; !ok {
		b.counted(name, true, +1)
	}
	sub.patterns[name] = keyspace.CompileGlob(name)
	if b.patterns[sub.ns] == nil {
		b.patterns[sub.ns] = map[*Subscriber]struct{}{}
	}
	b.patterns[sub.ns][sub] = struct{}{}
}

func (b *Broker) addChannelLocked(sub *Subscriber, name string) {
	if _, ok := sub.channels[name]; !ok {
		b.counted(name, false, +1)
	}
	sub.channels[name] = struct{}{}
	ch := channel{sub.ns, name}
	if b.channels[ch] == nil {
		b.channels[ch] = map[*Subscriber]struct{}{}
	}
	b.channels[ch][sub] = struct{}{}
}

// Unsubscribe removes channels, or patterns, from sub's subscriptions (all
// of them when names is empty) and writes its replies, unflushed.
func (b *Broker) Unsubscribe(sub *Subscriber, names []string, pattern bool) {
	kind := unsubscribeKind(pattern)
	proto := sub.proto()
	b.mu.Lock()
	defer b.mu.Unlock()
	wasActive := sub.count() > 0
	if len(names) == 0 {
		names = sub.names(pattern)
	}
	var out []byte
	for _, n := range names {
		if pattern {
			b.removePatternLocked(sub, n)
		} else {
			b.removeChannelLocked(sub, n)
		}
		out = append(out, pushRESP(proto, []string{kind, n}, sub.count())...)
	}
	if len(names) == 0 {
		out = nullUnsubscribe(proto, kind)
	}
	if wasActive && sub.count() == 0 {
		b.active--
	}
	b.hub.SetSubscribed(b.interest())
	sub.conn.WriteRaw(out)
}

func (b *Broker) removePatternLocked(sub *Subscriber, name string) {
	if _, ok := sub.patterns[name]; ok {
		b.counted(name, true, -1)
	}
	delete(sub.patterns, name)
	if len(sub.patterns) == 0 {
		b.forgetPatternsLocked(sub)
	}
}

// forgetPatternsLocked takes sub out of its namespace's subscribers with
// patterns.
func (b *Broker) forgetPatternsLocked(sub *Subscriber) {
	delete(b.patterns[sub.ns], sub)
	if len(b.patterns[sub.ns]) == 0 {
		delete(b.patterns, sub.ns)
	}
}

func (b *Broker) removeChannelLocked(sub *Subscriber, ch string) {
	if _, ok := sub.channels[ch]; ok {
		b.counted(ch, false, -1)
	}
	delete(sub.channels, ch)
	key := channel{sub.ns, ch}
	if subs := b.channels[key]; subs != nil {
		delete(subs, sub)
		if len(subs) == 0 {
			delete(b.channels, key)
		}
	}
}

// drop forgets sub's subscriptions.
func (b *Broker) drop(sub *Subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	had := sub.count() > 0
	for ch := range sub.channels {
		b.removeChannelLocked(sub, ch)
	}
	for p := range sub.patterns {
		b.counted(p, true, -1)
	}
	b.forgetPatternsLocked(sub)
	sub.patterns = map[string]*keyspace.Glob{}
	if had {
		b.active--
		b.hub.SetSubscribed(b.interest())
	}
}
