// Package wakeup fans PostgreSQL notifications out to blocked clients. One
// LISTEN connection per agq process (a Conn, opened by package listen)
// receives every "jobs became claimable" and "job finished" note; blocked
// pops and JOB.WAITs wait on in-memory channels and hold no database
// connection. The package itself imports neither store nor pgx: the wire
// layer uses it.
package wakeup

import (
	"container/heap"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/service"
	"github.com/agq/agq/records"
)

const maxTimers = 100000

// recheckEvery is how often the LISTEN connection looks for jobs claimable
// now in the queues blocked clients wait on, and wakes those who can take
// them: a safety net for a note lost while the connection was down, sent by
// a node that died right after its commit, or a due time beyond maxTimers.
// One query per node, however many clients wait.
const recheckEvery = 15 * time.Second

// recheckPerQueue bounds the jobs a re-check reads per queue.
const recheckPerQueue = 1000

// Config configures a Hub.
type Config struct {
	// Dial opens the LISTEN connection (internal/wakeup/listen opens it
	// on PostgreSQL); nil: the hub hears only this node.
	Dial   func(ctx context.Context) (Conn, error)
	Logger zerolog.Logger
	// ReconnectDelay is the pause between LISTEN reconnection attempts.
	ReconnectDelay time.Duration
	// NodeID names this node in the events it sends, so that it skips its
	// own when they come back.
	NodeID string
	// Send delivers events to the other nodes (NoticeEvents payloads);
	// nil keeps Publish local.
	Send func(ctx context.Context, payloads []string) error
}

// Hub routes notifications to waiters.
type Hub struct {
	cfg       Config
	ownPrefix string // how this node's events begin

	mu       sync.Mutex
	seq      uint64
	byQueue  map[queueKey][]*Waiter // in arrival order
	jobWait  map[string]map[*JobWaiter]struct{}
	timers   dueHeap
	timerSig chan struct{}

	outMu    sync.Mutex
	outReady []records.ReadyNote
	outDone  []string
	outFreed records.Room
	outMsgs  []Message
	// outInterest asks the next notice to say what this node's subscribers
	// listen to;
	// interestSent are closed once this node heard that notice back (so
	// the others heard it too), or it could not be sent.
	outInterest  Interest
	interestSent []chan struct{}
	interestEcho []chan struct{}
	outSig       chan struct{}

	interest  interest
	listeners listeners

	base service.BaseStartStop
}

// New returns a hub; Start begins listening.
func New(cfg Config) *Hub {
	if cfg.ReconnectDelay == 0 {
		cfg.ReconnectDelay = time.Second
	}
	from, _ := json.Marshal(cfg.NodeID)
	return &Hub{
		cfg:       cfg,
		ownPrefix: `{"f":` + string(from),
		byQueue:   map[queueKey][]*Waiter{},
		jobWait:   map[string]map[*JobWaiter]struct{}{},
		timerSig:  make(chan struct{}, 1),
		outSig:    make(chan struct{}, 1),
	}
}

// Start runs the LISTEN loop, the due-time timer and the senders until
// Stop or the end of ctx. It never fails: the LISTEN connection is made,
// and made again, in the background.
func (h *Hub) Start(ctx context.Context) error {
	h.base.StartFuncs(ctx, h.listenLoop, h.timerLoop, h.sendLoop,
		func(ctx context.Context) { h.interestLoop(ctx.Done()) })
	return nil
}

// Stop ends the loops and waits for them.
func (h *Hub) Stop() { h.base.Stop() }

// queueKey names a queue of a namespace: pops wait on, and notes wake,
// the queues of their own namespace only.
type queueKey struct{ ns, queue string }

// keyOf is the key of queue in namespace ns ("" is the default namespace).
func keyOf(ns, queue string) queueKey {
	if ns == "" {
		ns = records.DefaultNamespace
	}
	return queueKey{ns, queue}
}

// Waiter is a blocked pop waiting for claimable jobs in some queues of
// one namespace.
type Waiter struct {
	h      *Hub
	ns     string
	queues []string
	caps   []string
	c      chan records.ReadyNote
	onWake func()
	// worker is who a job may be handed to ("" takes no hand-offs).
	worker string
	// Under h.mu: taken for a hand-off (it stays in its queues' lists but
	// wake-ups pass it by), the wake-up it missed meanwhile (N 0: none),
	// closed, and the job handed over and not yet picked up.
	taken, closed bool
	missed        records.ReadyNote
	handed        *records.Job
}

// C receives a note when a job the waiter can run may be claimable.
func (w *Waiter) C() <-chan records.ReadyNote { return w.c }

// NewWaiter registers a waiter on queues of namespace ns ("" is the
// default one). Register before checking the database, so a job committed
// between the check and the wait still wakes it. onWake, when set, is
// called after each note is put in C: a waiter that does not select on C
// (a parked connection) is told that way.
func (h *Hub) NewWaiter(ns string, queues, caps []string, onWake func()) *Waiter {
	return h.NewWorkerWaiter(ns, "", queues, caps, onWake)
}

// NewWorkerWaiter registers a waiter that jobs may also be handed to
// directly, as worker's (TakeWaiter).
func (h *Hub) NewWorkerWaiter(ns, worker string, queues, caps []string, onWake func()) *Waiter {
	w := &Waiter{h: h, ns: keyOf(ns, "").ns, queues: queues, caps: caps, c: make(chan records.ReadyNote, 1), onWake: onWake,
		worker: worker}
	h.mu.Lock()
	for _, q := range queues {
		k := keyOf(w.ns, q)
		h.byQueue[k] = append(h.byQueue[k], w)
	}
	h.mu.Unlock()
	return w
}

// Close unregisters the waiter and passes on the wake-ups it received but
// did not use — pending in its channel, or given back as unused — so no job
// waits for a re-check because its note went to a waiter that left, took a
// job from another queue, or found nothing to do.
//
// A job handed over and not picked up stays for Handed; none is handed
// after Close.
func (w *Waiter) Close(unused ...records.ReadyNote) {
	h := w.h
	h.mu.Lock()
	w.closed = true
	h.unlist(w)
	if w.missed.N > 0 {
		unused = append(unused, w.missed)
	}
	h.mu.Unlock()
	select {
	case note := <-w.c:
		if note.N > 0 { // not a hand-off's signal
			unused = append(unused, note)
		}
	default:
	}
	for _, note := range unused {
		note.N = 1
		note.At = 0
		h.deliver(note)
	}
}

// unlist takes w out of its queues' lists; h.mu is held.
func (h *Hub) unlist(w *Waiter) {
	for _, q := range w.queues {
		k := keyOf(w.ns, q)
		h.byQueue[k] = slices.DeleteFunc(h.byQueue[k], func(x *Waiter) bool { return x == w })
		if len(h.byQueue[k]) == 0 {
			delete(h.byQueue, k)
		}
	}
}

// TakeWaiter takes, for a hand-off, the longest-waiting idle waiter of
// queue of namespace ns that takes hand-offs and can run jobs needing
// requires: wake-ups pass it by until Hand or Untake. Nil when there is
// none.
func (h *Hub) TakeWaiter(ns, queue string, requires []string) *Waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.byQueue[keyOf(ns, queue)] {
		if w.worker != "" && !w.taken && len(w.c) == 0 && covers(w.caps, requires) {
			w.taken = true
			return w
		}
	}
	return nil
}

// Worker is whom jobs handed to the waiter go to.
func (w *Waiter) Worker() string { return w.worker }

// Hand gives a taken waiter its job and wakes it; false when the waiter
// closed meanwhile (the job is the caller's to give back). A waiter handed
// a job waits no more: it leaves its queues' lists, and a wake-up it
// missed goes to another.
func (w *Waiter) Hand(job *records.Job) bool {
	h := w.h
	h.mu.Lock()
	if w.closed {
		h.mu.Unlock()
		return false
	}
	w.handed, w.taken = job, false
	h.unlist(w)
	missed := w.missed
	w.missed = records.ReadyNote{}
	h.mu.Unlock()
	select {
	case w.c <- records.ReadyNote{N: 0}:
	default: // a note is pending: it wakes the waiter as well
	}
	w.wake()
	if missed.N > 0 {
		missed.N = 1
		h.deliver(missed)
	}
	return true
}

// Handed picks up the job handed to the waiter, if any.
func (w *Waiter) Handed() (*records.Job, bool) {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	job := w.handed
	w.handed = nil
	return job, job != nil
}

// Untake ends a hand-off that did not happen: the waiter waits as before,
// woken now if a wake-up passed it by meanwhile.
func (w *Waiter) Untake() {
	h := w.h
	h.mu.Lock()
	if w.closed || !w.taken {
		h.mu.Unlock()
		return
	}
	w.taken = false
	missed := w.missed
	w.missed = records.ReadyNote{}
	if missed.N > 0 {
		select {
		case w.c <- missed:
		default:
		}
	}
	h.mu.Unlock()
	if missed.N > 0 {
		w.wake()
	}
}

// RetryTimed re-arms a note that came due but whose job a waiter could not
// claim yet: the database clock, which decides, may run slightly behind
// ours. A few retries 50 ms apart cover any sane clock skew.
func (h *Hub) RetryTimed(note records.ReadyNote) {
	if !note.Timed || note.Tries >= 5 {
		return
	}
	note.Tries++
	note.At = time.Now().Add(50 * time.Millisecond).UnixMilli()
	h.deliver(note)
}

// deliver wakes up to note.N idle waiters of the note's queue (of its
// namespace) able to run jobs needing note.Requires, oldest first; a
// future note is kept for its time.
func (h *Hub) deliver(note records.ReadyNote) {
	if note.At > time.Now().UnixMilli() {
		h.mu.Lock()
		// Past this many pending due times, blocked pops' periodic re-check
		// finds the rest; memory stays bounded.
		if h.timers.Len() < maxTimers {
			heap.Push(&h.timers, note)
		}
		h.mu.Unlock()
		select {
		case h.timerSig <- struct{}{}:
		default:
		}
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	woken := 0
	var passed []*Waiter // taken for a hand-off
	for _, w := range h.byQueue[keyOf(note.Namespace, note.Queue)] {
		if woken >= note.N {
			break
		}
		if !covers(w.caps, note.Requires) {
			continue
		}
		if w.taken {
			passed = append(passed, w)
			continue
		}
		select {
		case w.c <- note:
			woken++
			w.wake()
		default: // already woken and not yet back
		}
	}
	// A note not used up is kept for the waiters it passed by: each gets
	// it when its hand-off ends without a job.
	for _, w := range passed {
		if woken < note.N && w.missed.N == 0 {
			w.missed = note
			woken++
		}
	}
}

func (w *Waiter) wake() {
	if w.onWake != nil {
		w.onWake()
	}
}

// wakeAll wakes every waiter: after a LISTEN reconnect notes may be lost.
func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, ws := range h.byQueue {
		for _, w := range ws {
			note := records.ReadyNote{Namespace: k.ns, Queue: k.queue, N: 1}
			if w.taken {
				w.missed = note
				continue
			}
			select {
			case w.c <- note:
				w.wake()
			default:
			}
		}
	}
	for _, set := range h.jobWait {
		for jw := range set {
			jw.signal()
		}
	}
}

// WakeWorker has the pops of worker look at the database again: it
// registered again, and they wait with the capabilities it had. (Rare: a
// scan of every waiter is cheaper than a worker index kept on each wait.)
func (h *Hub) WakeWorker(worker string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ws := range h.byQueue {
		for _, w := range ws {
			if w.worker != worker || w.taken {
				continue // a taken waiter's hand-off is checked by the database
			}
			select {
			case w.c <- records.ReadyNote{N: 0}: // as a hand-off's signal: no note to pass on
				w.wake()
			default: // a note is pending: it wakes the waiter as well
			}
		}
	}
}

func covers(caps, requires []string) bool {
	for _, r := range requires {
		if !slices.Contains(caps, r) {
			return false
		}
	}
	return true
}

// JobWaiter waits for one job to finish.
type JobWaiter struct {
	h      *Hub
	id     string
	c      chan struct{}
	onWake func()
}

// C receives when the job may have finished.
func (jw *JobWaiter) C() <-chan struct{} { return jw.c }

func (jw *JobWaiter) signal() {
	select {
	case jw.c <- struct{}{}:
		if jw.onWake != nil {
			jw.onWake()
		}
	default:
	}
}

// NewJobWaiter registers interest in a job's end; register before reading
// it. onWake is as for NewWaiter.
func (h *Hub) NewJobWaiter(id string, onWake func()) *JobWaiter {
	jw := &JobWaiter{h: h, id: id, c: make(chan struct{}, 1), onWake: onWake}
	h.mu.Lock()
	if h.jobWait[id] == nil {
		h.jobWait[id] = map[*JobWaiter]struct{}{}
	}
	h.jobWait[id][jw] = struct{}{}
	h.mu.Unlock()
	return jw
}

// Close unregisters the job waiter.
func (jw *JobWaiter) Close() {
	h := jw.h
	h.mu.Lock()
	delete(h.jobWait[jw.id], jw)
	if len(h.jobWait[jw.id]) == 0 {
		delete(h.jobWait, jw.id)
	}
	h.mu.Unlock()
}

func (h *Hub) jobDone(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for jw := range h.jobWait[id] {
		jw.signal()
	}
}

// timerLoop delivers future notes when their time comes.
func (h *Hub) timerLoop(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		h.mu.Lock()
		var due []records.ReadyNote
		now := time.Now().UnixMilli()
		for h.timers.Len() > 0 && h.timers[0].At <= now {
			due = append(due, heap.Pop(&h.timers).(records.ReadyNote))
		}
		wait := time.Hour
		if h.timers.Len() > 0 {
			wait = time.Duration(h.timers[0].At-now) * time.Millisecond
		}
		h.mu.Unlock()
		for _, note := range due {
			note.At = 0
			note.Timed = true
			h.deliver(note)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.timerSig:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
	}
}

// dueHeap orders future notes by time.
type dueHeap []records.ReadyNote

func (d dueHeap) Len() int           { return len(d) }
func (d dueHeap) Less(i, j int) bool { return d[i].At < d[j].At }
func (d dueHeap) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *dueHeap) Push(x any)        { *d = append(*d, x.(records.ReadyNote)) }
func (d *dueHeap) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}
