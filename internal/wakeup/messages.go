package wakeup

import (
	"strings"
	"sync/atomic"
	"time"
)

// Message is a pub/sub message: a job's status, a queue's event. It is
// heard only by the subscribers of its namespace: channels are scoped by
// namespace, as everything a tenant sees.
type Message struct {
	Namespace string `json:"n,omitempty"`
	Channel   string `json:"c"`
	Payload   string `json:"p"`
	// Pattern is the subscription that matched, for a subscriber's pmessage.
	Pattern string `json:"-"`
}

// interestEvery is how often a node with subscribers says so to the others;
// interestTTL is how long the others believe it.
const (
	interestEvery = 5 * time.Second
	interestTTL   = 3 * interestEvery
)

// Interest is what a node's subscribers listen to. Messages are built and
// sent only for an interest some node has, so that pub/sub costs the job
// flow nothing while nobody listens, and a fleet of workers subscribed to
// job.cancel alone does not make every transition encode its status
// messages.
type Interest int32

const (
	// NoInterest: no subscribers.
	NoInterest Interest = iota
	// SomeInterest: subscribers, none of them to a job's status or a
	// queue's events (workers waiting for job.cancel).
	SomeInterest
	// StatusInterest: someone follows jobs' status or queues' events, or
	// holds a pattern that may match them.
	StatusInterest
)

// CarriesStatus reports whether a subscription to name (a channel, or a
// pattern when pattern is set) may receive job.<id>.status or
// queue.<name>.events messages. Any pattern with a glob character may.
func CarriesStatus(name string, pattern bool) bool {
	if pattern && strings.ContainsAny(name, "*?[\\") {
		return true
	}
	return strings.HasPrefix(name, "job.") && strings.HasSuffix(name, ".status") ||
		strings.HasPrefix(name, "queue.") && strings.HasSuffix(name, ".events")
}

// interest is what subscribers, here or on other nodes, listen to.
type interest struct {
	local        atomic.Int32 // this node's Interest
	remote       atomic.Int64 // unix nanoseconds until which another node has subscribers
	remoteStatus atomic.Int64 // … has StatusInterest
}

// SetSubscribed says what this node's subscribers listen to now. When that
// grows, the other nodes are told at once (and every interestEvery after);
// the returned channel is closed once this node heard that notice back
// through its LISTEN connection — PostgreSQL hands a notice to every
// listener at once, so the other nodes have it too — or it could not be
// sent.
func (h *Hub) SetSubscribed(to Interest) <-chan struct{} {
	sent := make(chan struct{})
	if Interest(h.interest.local.Swap(int32(to))) < to && h.cfg.Send != nil {
		h.outMu.Lock()
		h.outInterest = max(h.outInterest, to)
		h.interestSent = append(h.interestSent, sent)
		h.outMu.Unlock()
		h.signalSend()
		return sent
	}
	close(sent)
	return sent
}

// subscribed reports whether this node has subscribers.
func (h *Hub) subscribed() bool { return h.interest.local.Load() > int32(NoInterest) }

// Wanted reports whether some node has subscribers.
func (h *Hub) Wanted() bool {
	return h.subscribed() || time.Now().UnixNano() < h.interest.remote.Load()
}

// WantedStatus reports whether some node follows jobs' status or queues'
// events: only then are they worth building.
func (h *Hub) WantedStatus() bool {
	return Interest(h.interest.local.Load()) == StatusInterest || time.Now().UnixNano() < h.interest.remoteStatus.Load()
}

// PublishMessages delivers messages to this node's subscribers at once and
// to the other nodes' with the next coalesced notice, if they have any.
func (h *Hub) PublishMessages(msgs []Message) {
	if len(msgs) == 0 {
		return
	}
	if h.subscribed() {
		for _, m := range msgs {
			emit(h, Messages, m)
		}
	}
	if h.cfg.Send == nil || time.Now().UnixNano() >= h.interest.remote.Load() {
		return
	}
	h.outMu.Lock()
	h.outMsgs = append(h.outMsgs, msgs...)
	h.outMu.Unlock()
	h.signalSend()
}

// DeliverLocal gives msgs to this node's subscribers only: for what every
// node hears for itself, such as a Moved.
func (h *Hub) DeliverLocal(msgs []Message) {
	if !h.subscribed() {
		return
	}
	for _, m := range msgs {
		emit(h, Messages, m)
	}
}

func (h *Hub) signalSend() {
	select {
	case h.outSig <- struct{}{}:
	default:
	}
}

// interestLoop repeats this node's interest while it has subscribers.
func (h *Hub) interestLoop(done <-chan struct{}) {
	t := time.NewTicker(interestEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if local := Interest(h.interest.local.Load()); local > NoInterest && h.cfg.Send != nil {
			h.outMu.Lock()
			h.outInterest = max(h.outInterest, local)
			h.outMu.Unlock()
			h.signalSend()
		}
	}
}

// heardOwnInterest releases the SetSubscribed callers whose notice went
// round (or never will: it failed, or LISTEN reconnected).
func (h *Hub) heardOwnInterest() {
	h.outMu.Lock()
	echo := h.interestEcho
	h.interestEcho = nil
	h.outMu.Unlock()
	for _, c := range echo {
		close(c)
	}
}

// heardInterest notes what another node's subscribers listen to.
func (h *Hub) heardInterest(what Interest) {
	until := time.Now().Add(interestTTL).UnixNano()
	extend(&h.interest.remote, until)
	if what == StatusInterest {
		extend(&h.interest.remoteStatus, until)
	}
}

// extend moves t on to until, never back.
func extend(t *atomic.Int64, until int64) {
	for {
		cur := t.Load()
		if cur >= until || t.CompareAndSwap(cur, until) {
			return
		}
	}
}
