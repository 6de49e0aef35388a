package engine

import (
	"testing"
	"time"
)

// A background count that outlived its entry (forgotten, then counted
// afresh) is dropped: it never turns the pushes since into a negative
// adjustment of the new count.
func TestALateRecountOfAReplacedEntryIsDropped(t *testing.T) {
	var d deepQueues
	start := time.Now()
	d.counted("q", nil, 5000, 0, start, time.Millisecond)
	type recount struct {
		q      *deepQueue
		before int64
	}
	started := make(chan recount, 1)
	d.mu.Lock()
	d.m["q"].at = start.Add(-2 * time.Second) // stale
	d.mu.Unlock()
	n, ok := d.pushed("q", 3, func(_ string, q *deepQueue, pushed int64) { started <- recount{q, pushed} })
	if !ok || n != 5003 {
		t.Fatalf("pushed: %d %v", n, ok)
	}
	r := <-started // the recount runs on its own goroutine
	stale, before := r.q, r.before
	if stale == nil || before != 3 {
		t.Fatalf("recount started for %v with %d pushed", stale, before)
	}
	// The queue is counted afresh meanwhile, and pushed to.
	d.counted("q", nil, 7000, 0, time.Now(), time.Millisecond)
	d.pushed("q", 1, func(string, *deepQueue, int64) {})
	// The old recount ends now.
	d.counted("q", stale, 4000, before, start, time.Millisecond)
	if n, _ := d.pushed("q", 0, func(string, *deepQueue, int64) {}); n != 7001 {
		t.Fatalf("depth %d after a late recount, want 7001", n)
	}
	// A recount of the current entry applies, keeping the pushes since it began.
	d.mu.Lock()
	cur := d.m["q"]
	d.mu.Unlock()
	d.pushed("q", 2, func(string, *deepQueue, int64) {})
	d.counted("q", cur, 6000, 1, time.Now(), time.Millisecond)
	if n, _ := d.pushed("q", 0, func(string, *deepQueue, int64) {}); n != 6002 {
		t.Fatalf("depth %d after a recount, want 6002", n)
	}
	// Shallow again: forgotten.
	d.mu.Lock()
	cur = d.m["q"]
	d.mu.Unlock()
	d.counted("q", cur, 10, 0, time.Now(), time.Millisecond)
	if _, ok := d.pushed("q", 1, func(string, *deepQueue, int64) {}); ok {
		t.Fatal("a queue no longer deep is still answered from memory")
	}
}
