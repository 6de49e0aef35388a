package wakeup

import (
	"sync"

	"github.com/agq/agq/records"
)

// A Topic is something the hub tells those who listen to it: what one
// node or another did that this node's clients may care about. T is what
// a listener hears. The hub knows no listener by name: each subscribes
// itself with Listen.
type Topic[T any] struct{ name string }

// The hub's topics.
var (
	// Reconnected: the LISTEN connection was (re-)established;
	// notifications sent before (key revocations among them) were missed.
	Reconnected = Topic[struct{}]{"reconnected"}
	// KeyRevoked: "<principal> <live key digest hex>" for every revoked
	// (no digest) or replaced key, on any node.
	KeyRevoked = Topic[string]{"key_revoked"}
	// Messages: pub/sub messages for this node's subscribers, heard only
	// while this node has some.
	Messages = Topic[Message]{"messages"}
	// Moved: a job moved out of running by the watchdog or a worker's
	// (re-)registration on any node, or a worker declared dead; heard
	// only while this node has subscribers.
	Moved = Topic[records.Moved]{"moved"}
	// RoomFreed: jobs left running, on this node or another: room for
	// the pops that limits held back.
	RoomFreed = Topic[records.Room]{"freed"}
)

// listeners holds the functions listening to each topic.
type listeners struct {
	mu sync.RWMutex
	m  map[string][]any // topic name → func(T)
}

// Listen calls fn with everything the hub says on topic, from the hub's
// own goroutines or a publisher's; fn must not block. Listen before Start.
func Listen[T any](h *Hub, topic Topic[T], fn func(T)) {
	h.listeners.mu.Lock()
	defer h.listeners.mu.Unlock()
	if h.listeners.m == nil {
		h.listeners.m = map[string][]any{}
	}
	h.listeners.m[topic.name] = append(h.listeners.m[topic.name], fn)
}

// emit tells topic's listeners v.
func emit[T any](h *Hub, topic Topic[T], v T) {
	h.listeners.mu.RLock()
	fns := h.listeners.m[topic.name]
	h.listeners.mu.RUnlock()
	for _, fn := range fns {
		fn.(func(T))(v)
	}
}

// listened reports whether anyone listens to topic.
func listened[T any](h *Hub, topic Topic[T]) bool {
	h.listeners.mu.RLock()
	defer h.listeners.mu.RUnlock()
	return len(h.listeners.m[topic.name]) > 0
}

// Wake wakes this node's pops for note, as a note heard from the database
// would: for a listener that found room for pops limits held back.
func (h *Hub) Wake(note records.ReadyNote) { h.deliver(note) }
