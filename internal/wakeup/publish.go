package wakeup

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/agq/agq/records"
)

// event is what one node tells the others on NoticeEvents: jobs that
// became claimable and jobs that finished, coalesced.
type event struct {
	From  string              `json:"f"`
	Ready []records.ReadyNote `json:"r,omitempty"`
	Done  []string            `json:"d,omitempty"`
	// Freed counts the jobs that left running, for pops limits held.
	Freed *records.Room `json:"x,omitempty"`
	// Msgs are pub/sub messages; Interest says the sender has subscribers,
	// and Narrow that none of them follows a job's status or a queue's
	// events (a node that does not know Narrow sends them all the same).
	Msgs     []Message `json:"m,omitempty"`
	Interest bool      `json:"i,omitempty"`
	Narrow   bool      `json:"n,omitempty"`
}

// Publish tells blocked clients what a committed transaction changed: at
// once those of this node, in process, and the other nodes' through one
// coalesced notice sent in the background, so that no commit waits on
// PostgreSQL's notification queue. Call it after the commit returned.
func (h *Hub) Publish(ready []records.ReadyNote, done []string) {
	if len(ready) == 0 && len(done) == 0 {
		return
	}
	for _, note := range ready {
		h.deliver(note)
	}
	for _, id := range done {
		h.jobDone(id)
	}
	if h.cfg.Send == nil {
		return
	}
	h.outMu.Lock()
	h.outReady = append(h.outReady, ready...)
	h.outDone = append(h.outDone, done...)
	h.outMu.Unlock()
	select {
	case h.outSig <- struct{}{}:
	default:
	}
}

// PublishRoom tells every node's pops held back by a queue's or a type's limits
// that jobs left running: this node's at once, the others' with the next
// notice. Call it after the commit returned.
func (h *Hub) PublishRoom(f records.Room) {
	if f.Empty() || !listened(h, RoomFreed) {
		return
	}
	emit(h, RoomFreed, f)
	if h.cfg.Send == nil {
		return
	}
	h.outMu.Lock()
	h.outFreed.Merge(f)
	h.outMu.Unlock()
	select {
	case h.outSig <- struct{}{}:
	default:
	}
}

// sendLoop sends what Publish gathered, one batch of notices at a time:
// everything published while one batch was being sent, or in the short
// pause after it, goes in the next; a lone notice goes at once. The pause bounds the notices to a few
// thousand a second, each a commit of its own for PostgreSQL, at the cost
// of as much latency for clients blocked on other nodes.
func (h *Hub) sendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.outSig:
		}
		h.outMu.Lock()
		ready, done, freed, msgs, interested := h.outReady, h.outDone, h.outFreed, h.outMsgs, h.outInterest
		h.outReady, h.outDone, h.outFreed, h.outMsgs, h.outInterest = nil, nil, records.Room{}, nil, NoInterest
		// Awaiting the echo before sending: it may come back before Send
		// returns.
		h.interestEcho = append(h.interestEcho, h.interestSent...)
		h.interestSent = nil
		h.outMu.Unlock()
		payloads := h.eventPayloads(coalesce(ready), done, freed, msgs, interested)
		var err error
		for try := 0; try < 3; try++ {
			sendCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = h.cfg.Send(sendCtx, payloads)
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			// Other nodes' blocked clients re-check on their own in the
			// end; a notice is worth a few tries, not more.
			h.cfg.Logger.Warn().Err(err).Int("try", try+1).Msg("sending wake-up notices to other nodes")
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			h.heardOwnInterest()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(sendPause):
		}
	}
}

// sendPause is the least time between two sends of notices.
const sendPause = 500 * time.Microsecond

// coalesce merges notes for the same queue (of one namespace),
// requirements and due time.
func coalesce(notes []records.ReadyNote) []records.ReadyNote {
	type key struct {
		queue    queueKey
		requires string
		at       int64
	}
	idx := map[key]int{}
	var out []records.ReadyNote
	for _, n := range notes {
		k := key{keyOf(n.Namespace, n.Queue), string(mustJSON(n.Requires)), n.At}
		if i, ok := idx[k]; ok {
			out[i].N += n.N
			continue
		}
		idx[k] = len(out)
		out = append(out, n)
	}
	return out
}

// eventPayloads splits notes, ids, freed counts and messages into events
// that each fit in one NOTIFY payload; the first says whether this node has
// subscribers.
func (h *Hub) eventPayloads(ready []records.ReadyNote, done []string, freed records.Room, msgs []Message, interested Interest) []string {
	var out []string
	cur := event{From: h.cfg.NodeID, Interest: interested > NoInterest, Narrow: interested == SomeInterest}
	size := 0
	flush := func() {
		if len(cur.Ready) > 0 || len(cur.Done) > 0 || cur.Freed != nil || len(cur.Msgs) > 0 || cur.Interest {
			out = append(out, string(mustJSON(cur)))
		}
		cur = event{From: h.cfg.NodeID}
		size = 0
	}
	for _, n := range ready {
		b := mustJSON(n)
		if len(b) > maxEventBytes {
			// Without requirements the note wakes any waiter of the
			// queue, which checks the database: nothing is missed.
			n.Requires = nil
			b = mustJSON(n)
		}
		if size+len(b) > maxEventBytes {
			flush()
		}
		cur.Ready = append(cur.Ready, n)
		size += len(b) + 1
	}
	for _, id := range done {
		if size+len(id)+3 > maxEventBytes {
			flush()
		}
		cur.Done = append(cur.Done, id)
		size += len(id) + 3
	}
	// Freed counts, one name at a time, as room is left.
	addFreed := func(queue, typ string, n int) {
		if size+len(queue)+len(typ)+16 > maxEventBytes {
			flush()
		}
		if cur.Freed == nil {
			cur.Freed = &records.Room{}
		}
		cur.Freed.Add(queue, typ, n)
		size += len(queue) + len(typ) + 16
	}
	for q, n := range freed.Queues {
		addFreed(q, "", n)
	}
	for t, n := range freed.Types {
		addFreed("", t, n)
	}
	for ns, n := range freed.Namespaces {
		if size+len(ns)+16 > maxEventBytes {
			flush()
		}
		if cur.Freed == nil {
			cur.Freed = &records.Room{}
		}
		cur.Freed.AddNamespace(ns, n)
		size += len(ns) + 16
	}
	for _, m := range msgs {
		n := len(mustJSON(m))
		if n > maxEventBytes {
			h.cfg.Logger.Warn().Str("channel", m.Channel).Int("bytes", n).Msg("message too large for other nodes")
			continue
		}
		if size+n > maxEventBytes {
			flush()
		}
		cur.Msgs = append(cur.Msgs, m)
		size += n + 1
	}
	flush()
	return out
}

// interestOf is what an event with Interest says its sender's subscribers
// listen to.
func interestOf(ev event) Interest {
	if ev.Narrow {
		return SomeInterest
	}
	return StatusInterest
}

// maxEventBytes keeps an event under PostgreSQL's 8000-byte NOTIFY limit.
const maxEventBytes = 7000

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// receiveEvent handles another node's event.
func (h *Hub) receiveEvent(payload string) {
	// This node's own events were delivered in process when they were
	// published: only one saying it has subscribers is read (the text
	// "i":true appears only as that field, or in a field of the same
	// name further in, which reading settles).
	if strings.HasPrefix(payload, h.ownPrefix) && !strings.Contains(payload, `"i":true`) {
		return
	}
	var ev event
	if err := json.Unmarshal([]byte(payload), &ev); err != nil {
		h.cfg.Logger.Warn().Str("payload", payload).Msg("malformed event notification")
		return
	}
	if ev.From == h.cfg.NodeID {
		if ev.Interest {
			h.heardOwnInterest()
		}
		return // delivered in process when it was published
	}
	for _, n := range ev.Ready {
		if n.Queue != "" && n.N > 0 {
			h.deliver(n)
		}
	}
	for _, id := range ev.Done {
		h.jobDone(id)
	}
	if ev.Freed != nil {
		emit(h, RoomFreed, *ev.Freed)
	}
	if ev.Interest {
		h.heardInterest(interestOf(ev))
	}
	if h.subscribed() {
		for _, m := range ev.Msgs {
			emit(h, Messages, m)
		}
	}
}
