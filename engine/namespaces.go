package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agq/agq/records"
)

// namespaceTTL is how long a node trusts what it read of the namespaces:
// a namespace created, configured or deleted on another node is seen here
// within it.
const namespaceTTL = time.Second

// namespaceCache holds every namespace as last read: submissions look
// up their namespace's quotas in it without waiting for each other, while
// one of them reads the namespaces again when they are older than
// namespaceTTL.
type namespaceCache struct {
	now     atomic.Pointer[namespaceSnapshot]
	reading sync.Mutex
}

type namespaceSnapshot struct {
	at     time.Time
	byName map[string]records.Namespace
}

// namespaceOf reads namespace name from the cache; ok is false when it
// does not exist or is being deleted. A name the cache misses is looked
// up: it may have been created on another node since.
func (e *Engine) namespaceOf(ctx context.Context, name string) (records.Namespace, bool, error) {
	snap, err := e.namespaceSnapshot(ctx)
	if err != nil {
		return records.Namespace{}, false, err
	}
	if n, ok := snap.byName[name]; ok {
		return n, !n.Deleting, nil
	}
	rctx, cancel := context.WithTimeout(ctx, e.cfg.CommandTimeout)
	defer cancel()
	got, err := e.root.NamespaceGet(rctx, name)
	if errors.Is(err, records.ErrNotFound) {
		return records.Namespace{}, false, nil
	}
	if err != nil {
		return records.Namespace{}, false, err
	}
	e.forgetNamespaces()
	return got, !got.Deleting, nil
}

// namespaceSnapshot is the cache, read again when older than
// namespaceTTL: by one caller, the others going on with what they have
// unless they have nothing.
func (e *Engine) namespaceSnapshot(ctx context.Context) (*namespaceSnapshot, error) {
	c := &e.namespaces
	snap := c.now.Load()
	now := e.clock.Now()
	if snap != nil && now.Sub(snap.at) <= namespaceTTL {
		return snap, nil
	}
	if snap == nil {
		c.reading.Lock()
	} else if !c.reading.TryLock() {
		return snap, nil
	}
	defer c.reading.Unlock()
	if fresh := c.now.Load(); fresh != nil && now.Sub(fresh.at) <= namespaceTTL {
		return fresh, nil
	}
	rctx, cancel := context.WithTimeout(ctx, e.cfg.CommandTimeout)
	defer cancel()
	all, err := e.root.Namespaces(rctx)
	if err != nil {
		return nil, err
	}
	snap = &namespaceSnapshot{at: now, byName: make(map[string]records.Namespace, len(all))}
	for _, n := range all {
		snap.byName[n.Name] = n
	}
	c.now.Store(snap)
	return snap, nil
}

// forgetNamespaces makes the next look at the namespaces read them again.
func (e *Engine) forgetNamespaces() { e.namespaces.now.Store(nil) }

// NamespaceExists reports whether namespace name exists and is not being
// deleted (as this node saw it within the last second).
func (e *Engine) NamespaceExists(ctx context.Context, name string) (bool, error) {
	_, ok, err := e.namespaceOf(ctx, name)
	return ok, err
}

// NamespaceCreate creates namespace name; again: nothing changes.
func (e *Engine) NamespaceCreate(ctx context.Context, name string) error {
	defer e.forgetNamespaces()
	return e.root.NamespaceCreate(ctx, name)
}

// Namespaces lists the namespaces, by name, but those being deleted.
func (e *Engine) Namespaces(ctx context.Context) ([]records.Namespace, error) {
	all, err := e.root.Namespaces(ctx)
	live := all[:0]
	for _, n := range all {
		if !n.Deleting {
			live = append(live, n)
		}
	}
	return live, err
}

// NamespaceConfig applies change (none: reads) to namespace name and
// answers its settings and counts; records.ErrNotFound when there is none.
func (e *Engine) NamespaceConfig(ctx context.Context, name string, change *records.NamespaceChange) (records.Namespace, records.NamespaceCounts, error) {
	var n records.Namespace
	var err error
	if change == nil {
		n, err = e.root.NamespaceGet(ctx, name)
		if err == nil && n.Deleting {
			err = records.ErrNotFound
		}
	} else {
		n, err = e.root.NamespaceConfigure(ctx, name, *change)
		e.forgetNamespaces()
		if err == nil && change.MaxRunning != nil {
			// A loosened cap may leave room at once: wake, on every
			// node, the pops it held back.
			var room records.Room
			room.AddNamespace(name, 1_000_000)
			e.hub.PublishRoom(room)
		}
	}
	if err != nil {
		return n, records.NamespaceCounts{}, err
	}
	counts, err := e.root.NamespaceCounts(ctx, name)
	return n, counts, err
}

// NamespaceDelete deletes namespace name: refused (records.UnfinishedError)
// while it holds unfinished jobs; otherwise its keys stop working at once
// and what it holds goes in bounded transactions, after the reply (the
// leader finishes what a crash left half done).
func (e *Engine) NamespaceDelete(ctx context.Context, name string) error {
	if name == records.DefaultNamespace {
		return records.ErrDefaultNamespace
	}
	if err := e.root.NamespaceDeleteBegin(ctx, name); err != nil {
		return err
	}
	e.forgetNamespaces()
	go e.deleteNamespace(name)
	return nil
}

// deleteNamespace removes what a namespace being deleted holds, batch by
// batch, until it is gone or the database fails (the leader's sweep then
// carries on).
func (e *Engine) deleteNamespace(name string) {
	for {
		ctx, cancel := e.offPath()
		gone, err := e.root.NamespaceDeleteStep(ctx, name)
		cancel()
		if err != nil {
			e.log.Warn().Err(err).Str("namespace", name).Msg("deleting namespace; the leader carries on")
			return
		}
		if gone {
			e.forgetNamespaces()
			e.log.Info().Str("namespace", name).Msg("namespace deleted")
			return
		}
	}
}

// ContinueNamespaceDeletions carries on deleting the namespaces whose
// deletion a crash or a failure left half done (the leader's sweep): at
// most limit batches; it reports the batches run.
func (e *Engine) ContinueNamespaceDeletions(ctx context.Context, limit int) (int, error) {
	names, err := e.root.NamespacesDeleting(ctx)
	if err != nil {
		return 0, err
	}
	done := 0
	for _, name := range names {
		for done < limit {
			gone, err := e.root.NamespaceDeleteStep(ctx, name)
			if err != nil {
				return done, err
			}
			done++
			if gone {
				break
			}
		}
	}
	return done, nil
}
