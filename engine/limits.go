package engine

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/agq/agq/records"
)

// limitedPops remembers the queues whose claims on this node found limits
// — the queue's own, or a job type's that held its jobs back — so that a
// job leaving running wakes a pop those limits held, while finishing other
// jobs costs nothing more. An entry is forgotten an hour after a claim last
// saw it (waking a pop for nothing is harmless; the LISTEN connection's
// re-check finds what a missed wake-up left).
//
// Queues and types are named as records.RoomKey names them: the name in
// the default namespace, else the namespace, a NUL and the name.
type limitedPops struct {
	mu     sync.Mutex
	queues map[string]time.Time
	types  map[string]map[string]time.Time // type → queue → when
	// namespaces are the queues whose pops a namespace's cap of running
	// jobs held: a job of any of its queues leaving running wakes them.
	namespaces map[string]map[string]time.Time // namespace → queue → when
}

const limitedMemory = time.Hour

// sawQueue records that the queue of namespace ns has limits.
func (l *limitedPops) sawQueue(ns, queue string, now time.Time) {
	queue = records.RoomKey(ns, queue)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queues == nil {
		l.queues = map[string]time.Time{}
	}
	l.queues[queue] = now
	forgetOld(l.queues, now)
}

// sawType records that the type's limits held back jobs of the queue, in
// namespace ns.
func (l *limitedPops) sawType(ns, typ, queue string, now time.Time) {
	typ, queue = records.RoomKey(ns, typ), records.RoomKey(ns, queue)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.types == nil {
		l.types = map[string]map[string]time.Time{}
	}
	if l.types[typ] == nil {
		l.types[typ] = map[string]time.Time{}
	}
	l.types[typ][queue] = now
	forgetOld(l.types[typ], now)
	if len(l.types) > 1000 {
		for t, qs := range l.types {
			if forgetOld(qs, now); len(qs) == 0 {
				delete(l.types, t)
			}
		}
	}
}

// sawNamespace records that the cap of namespace ns held back jobs of the
// queue.
func (l *limitedPops) sawNamespace(ns, queue string, now time.Time) {
	ns, queue = cmp.Or(ns, records.DefaultNamespace), records.RoomKey(ns, queue)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.namespaces == nil {
		l.namespaces = map[string]map[string]time.Time{}
	}
	if l.namespaces[ns] == nil {
		l.namespaces[ns] = map[string]time.Time{}
	}
	l.namespaces[ns][queue] = now
	forgetOld(l.namespaces[ns], now)
}

// forgetOld drops entries older than limitedMemory once there are many.
func forgetOld(seen map[string]time.Time, now time.Time) {
	if len(seen) <= 1000 {
		return
	}
	for k, t := range seen {
		if now.Sub(t) > limitedMemory {
			delete(seen, k)
		}
	}
}

// RoomNotes wakes, for each queue whose pops limits held back, as many
// pops as jobs of the queue, or of the type holding it, left running.
func (e *Engine) RoomNotes(f records.Room) []records.ReadyNote {
	return e.limited.room(f, e.clock.Now())
}

// room is RoomNotes at now.
func (l *limitedPops) room(f records.Room, now time.Time) []records.ReadyNote {
	l.mu.Lock()
	defer l.mu.Unlock()
	var notes []records.ReadyNote
	note := func(key string, n int) records.ReadyNote {
		ns, q := records.SplitRoomKey(key)
		return records.ReadyNote{Namespace: ns, Queue: q, N: n}
	}
	for q, n := range f.Queues {
		if t, ok := l.queues[q]; ok && now.Sub(t) < limitedMemory {
			notes = append(notes, note(q, n))
		}
	}
	for typ, n := range f.Types {
		for q, t := range l.types[typ] {
			if now.Sub(t) < limitedMemory {
				notes = append(notes, note(q, n))
			}
		}
	}
	if len(l.namespaces) > 0 {
		freed := map[string]int{} // by namespace
		for q, n := range f.Queues {
			ns, _ := records.SplitRoomKey(q)
			freed[ns] += n
		}
		for ns, n := range f.Namespaces {
			freed[ns] += n
		}
		for ns, n := range freed {
			for q, t := range l.namespaces[ns] {
				if now.Sub(t) < limitedMemory {
					notes = append(notes, note(q, n))
				}
			}
		}
	}
	return notes
}

// ConfigureQueue changes the queue's limits and answers those now in force.
func (e *Engine) ConfigureQueue(ctx context.Context, name string, change records.LimitsChange) (records.Limits, error) {
	return e.store.QueueConfigure(ctx, name, change)
}

// ConfigureType changes a job type's limits, counted across every queue,
// and answers those now in force.
func (e *Engine) ConfigureType(ctx context.Context, name string, change records.LimitsChange) (records.Limits, error) {
	var limits records.Limits
	err := e.transition(ctx, func() (effects, error) {
		var err error
		if limits, err = e.store.TypeConfigure(ctx, name, change); err != nil {
			return effects{}, err
		}
		// Loosened limits may leave room at once: wake, on every node,
		// the pops the type held back.
		var room records.Room
		room.AddIn(e.ns, "", name, 1_000_000)
		return effects{Effects: records.Effects{Freed: room}}, nil
	})
	return limits, err
}
