package engine

import (
	"context"
	"sync"
	"time"

	"github.com/agq/agq/records"
)

// depthExact is the depth up to which LPUSH counts a queue on every push.
// Counting is a scan of the queue's waiting jobs (a million: ~130 ms of
// PostgreSQL), so a deeper queue is counted now and then instead.
const depthExact = 1000

// deepQueues remembers the queues this node found deeper than depthExact:
// LPUSH answers the last count plus the jobs pushed on this node since,
// and counts again in the background once the count is old. A lone script
// filling a deep queue gets the exact depth; jobs popped or pushed through
// other nodes show from the next count on.
type deepQueues struct {
	mu sync.Mutex
	m  map[string]*deepQueue
}

type deepQueue struct {
	counted  int64         // the last count
	pushed   int64         // ready jobs pushed on this node since it began
	at       time.Time     // when it began
	took     time.Duration // how long it ran
	counting bool          // a count is under way
}

// stale says a count is due: after a second, or twenty times its own
// duration, so that counting a huge queue takes a small share of the
// database.
func (q *deepQueue) stale(now time.Time) bool {
	return now.Sub(q.at) > max(time.Second, 20*q.took)
}

// forgotten says the entry is too old to answer from at all: the
// background counts have failed for a minute.
func (q *deepQueue) forgotten(now time.Time) bool {
	return now.Sub(q.at) > time.Minute+20*q.took
}

// pushedDepth answers LPUSH: the queue's ready depth once its push of
// ready jobs committed. Deep queues are remembered by namespace and name.
func (e *Engine) pushedDepth(ctx context.Context, queue string, ready int64) (int64, error) {
	if n, ok := e.deep.pushed(records.RoomKey(e.ns, queue), ready, e.recount); ok {
		return n, nil
	}
	n, err := e.store.QueueDepthUpTo(ctx, queue, depthExact+1)
	if err != nil || n <= depthExact {
		return n, err
	}
	start := time.Now()
	n, err = e.store.QueueDepth(ctx, queue)
	if err != nil {
		return 0, err
	}
	e.deep.counted(records.RoomKey(e.ns, queue), nil, n, 0, start, time.Since(start))
	return n, nil
}

// pushed adds a push to the queue's entry and answers its depth, when the
// queue is known deep; it starts recount when the count is stale.
func (d *deepQueues) pushed(queue string, ready int64, recount func(string, *deepQueue, int64)) (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.m[queue]
	now := time.Now()
	if q == nil {
		return 0, false
	}
	if q.forgotten(now) {
		delete(d.m, queue)
		return 0, false
	}
	q.pushed += ready
	if q.stale(now) && !q.counting {
		q.counting = true
		go recount(queue, q, q.pushed)
	}
	return q.counted + q.pushed, true
}

// counted records a count that began at start: a first one (q nil), or
// one for entry q when q had pushedBefore jobs pushed, dropped if q was
// replaced or forgotten meanwhile. The queue is forgotten once it is no
// longer deep.
func (d *deepQueues) counted(queue string, q *deepQueue, n, pushedBefore int64, start time.Time, took time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	since := int64(0)
	if q != nil {
		if d.m[queue] != q {
			return
		}
		since = q.pushed - pushedBefore
	}
	if n <= depthExact {
		delete(d.m, queue)
		return
	}
	if d.m == nil {
		d.m = map[string]*deepQueue{}
	}
	d.m[queue] = &deepQueue{counted: n, pushed: since, at: start, took: took}
}

// failed lets the next stale push count q's queue again.
func (d *deepQueues) failed(queue string, q *deepQueue) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m[queue] == q {
		q.counting = false
	}
}

// recount counts a deep queue (named as records.RoomKey names it) again,
// off any client's path.
func (e *Engine) recount(key string, q *deepQueue, pushedBefore int64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	ns, queue := records.SplitRoomKey(key)
	n, err := e.in(ns).store.QueueDepth(ctx, queue)
	if err != nil {
		e.deep.failed(key, q)
		return
	}
	e.deep.counted(key, q, n, pushedBefore, start, time.Since(start))
}
