package registry

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/clock"
	"github.com/agq/agq/internal/service"
	"github.com/agq/agq/store"
)

// PresenceConfig configures a node's Presence.
type PresenceConfig struct {
	Store  *store.Store
	NodeID string
	Logger zerolog.Logger
	// Interval is how often the node says it runs and writes what
	// changed; default 1s.
	Interval time.Duration
	// Clock times the connections' ends; default the real clock.
	Clock clock.Clock
}

// Presence keeps, for one node, which worker principals hold connections
// to it, and writes when that changes: the leader finds a worker none of
// whose connections is left on any node (watchdog). It also says, every
// Interval, that the node runs. Its Loop writes; tests call RunOnce.
type Presence struct {
	cfg PresenceConfig
	*service.Loop

	mu      sync.Mutex
	held    map[string]*held
	leaving bool
	resync  bool
	wrote   bool // a write succeeded: a fresh row after it was forgotten
}

// held is one principal's connections to this node.
type held struct {
	conns  int
	goneAt time.Time // when the last one closed; zero while one is open
	dirty  bool      // changed since last written
	ver    uint64    // counts changes, so a write does not clear a newer one
}

// NewPresence fills defaults.
func NewPresence(cfg PresenceConfig) *Presence {
	cfg.Interval = cmp.Or(cfg.Interval, time.Second)
	cfg.Clock = clock.Or(cfg.Clock)
	p := &Presence{cfg: cfg, held: map[string]*held{}}
	p.Loop = service.NewLoop("presence", cfg.Interval, cfg.Clock, p.RunOnce, cfg.Logger)
	return p
}

// Connected counts a connection authenticated as a worker's principal.
func (p *Presence) Connected(principal string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[principal]
	if h == nil {
		h = &held{}
		p.held[principal] = h
	}
	h.conns++
	if h.conns == 1 {
		h.goneAt, h.dirty, h.ver = time.Time{}, true, h.ver+1
	}
}

// Disconnected counts one of its connections closed, or no longer
// authenticated as principal. Once the node is leaving, its connections
// closing are its own doing: they are not counted.
func (p *Presence) Disconnected(principal string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[principal]
	if p.leaving || h == nil || h.conns == 0 {
		return
	}
	h.conns--
	if h.conns == 0 {
		h.goneAt, h.dirty, h.ver = p.cfg.Clock.Now(), true, h.ver+1
	}
}

// RunOnce says the node runs and writes what changed since the last
// write; a write that failed is tried again next time.
func (p *Presence) RunOnce(ctx context.Context) error {
	changes, vers, ok := p.changes()
	if !ok {
		return nil
	}
	fresh, err := p.cfg.Store.NodeSeen(ctx, p.cfg.NodeID, changes)
	if err != nil {
		return err
	}
	p.written(changes, vers, fresh)
	return nil
}

// changes are the principals to write, with their versions; false once
// the node is leaving.
func (p *Presence) changes() ([]store.PresenceChange, []uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leaving {
		return nil, nil, false
	}
	now := p.cfg.Clock.Now()
	var changes []store.PresenceChange
	var vers []uint64
	for principal, h := range p.held {
		if !h.dirty && !p.resync {
			continue
		}
		c := store.PresenceChange{Principal: principal, Gone: h.conns == 0}
		if c.Gone {
			c.Ago = now.Sub(h.goneAt)
		}
		changes, vers = append(changes, c), append(vers, h.ver)
	}
	p.resync = false
	return changes, vers, true
}

// written clears what a write stored, unless it changed meanwhile, and
// forgets principals gone from this node. A fresh node row means the
// rows were forgotten (or never written): all are written next time.
func (p *Presence) written(changes []store.PresenceChange, vers []uint64, fresh bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range changes {
		h := p.held[c.Principal]
		if h == nil || h.ver != vers[i] {
			continue
		}
		h.dirty = false
		if h.conns == 0 {
			delete(p.held, c.Principal)
		}
	}
	if fresh && p.wrote && len(p.held) > 0 {
		p.resync = true
	}
	p.wrote = true
}

// Leave stops writing and forgets the node's rows, before the node closes
// its connections: connections lost because agq went down never count.
func (p *Presence) Leave(ctx context.Context) error {
	p.mu.Lock()
	p.leaving = true
	p.mu.Unlock()
	p.Loop.Stop()
	return p.cfg.Store.NodeLeave(ctx, p.cfg.NodeID)
}
