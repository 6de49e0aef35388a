package wakeup

import (
	"sync/atomic"
	"time"
)

// Message is a pub/sub message: a job's status, a queue's event.
type Message struct {
	Channel string `json:"c"`
	Payload string `json:"p"`
	// Pattern is the subscription that matched, for a subscriber's pmessage.
	Pattern string `json:"-"`
}

// interestEvery is how often a node with subscribers says so to the others;
// interestTTL is how long the others believe it.
const (
	interestEvery = 5 * time.Second
	interestTTL   = 3 * interestEvery
)

// interest is whether anyone, here or on another node, subscribes to
// anything: messages are built and sent only then, so that pub/sub costs the
// job flow nothing while nobody listens.
type interest struct {
	local  atomic.Bool
	remote atomic.Int64 // unix nanoseconds until which another node has subscribers
}

// SetSubscribed says whether this node has subscribers now. When it turns
// on, the other nodes are told at once (and every interestEvery after);
// the returned channel is closed once this node heard that notice back
// through its LISTEN connection — PostgreSQL hands a notice to every
// listener at once, so the other nodes have it too — or it could not be
// sent.
func (h *Hub) SetSubscribed(on bool) <-chan struct{} {
	sent := make(chan struct{})
	if !h.interest.local.Swap(on) && on && h.cfg.Send != nil {
		h.outMu.Lock()
		h.outInterest = true
		h.interestSent = append(h.interestSent, sent)
		h.outMu.Unlock()
		h.signalSend()
		return sent
	}
	close(sent)
	return sent
}

// Wanted reports whether some node has subscribers.
func (h *Hub) Wanted() bool {
	return h.interest.local.Load() || time.Now().UnixNano() < h.interest.remote.Load()
}

// PublishMessages delivers messages to this node's subscribers at once and
// to the other nodes' with the next coalesced notice, if they have any.
func (h *Hub) PublishMessages(msgs []Message) {
	if len(msgs) == 0 {
		return
	}
	if h.interest.local.Load() {
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
		if h.interest.local.Load() && h.cfg.Send != nil {
			h.outMu.Lock()
			h.outInterest = true
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

// heardInterest notes that another node has subscribers.
func (h *Hub) heardInterest() {
	until := time.Now().Add(interestTTL).UnixNano()
	for {
		cur := h.interest.remote.Load()
		if cur >= until || h.interest.remote.CompareAndSwap(cur, until) {
			return
		}
	}
}
