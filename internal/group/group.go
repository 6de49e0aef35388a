// Package group gathers requests that many goroutines make at the same time
// and serves them together: one database statement and one commit for a
// whole group instead of one each. No timer paces it: a request that finds
// no group in flight starts one at once, and requests arriving meanwhile
// form the next group, which starts as soon as the previous one returned.
// A lone request pays one round trip, a busy node shares each among many.
// When more than a whole group waits behind the one in flight, further
// groups run beside it, up to a bound: a backlog uses more than one of the
// database's cores, while a steady trickle keeps sharing one group.
package group

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// Config configures a Runner.
type Config[Req, Res any] struct {
	// Run serves one group and returns one result per request, in order.
	// Its context is the runner's own, bounded by Timeout: a group serves
	// many clients, so no single client's departure may cut it short.
	Run func(ctx context.Context, reqs []Req) []Res
	// MaxSize bounds a group's total weight; more requests wait for the
	// next one. A group always takes at least one request.
	MaxSize int
	// Weight, when set, is a request's share of MaxSize (default 1): a pop
	// of 100 jobs weighs 100.
	Weight func(Req) int
	// Parallel bounds the groups in flight at once (default 1). A group
	// beyond the first starts only while a whole group's weight waits.
	Parallel int
	// Timeout bounds one group's run.
	Timeout time.Duration
	// Abandoned, when set, receives the result of a request whose caller
	// stopped waiting (its context ended) — to undo what was done for it.
	Abandoned func(Req, Res)
	// Observe, when set, is told the size of each group.
	Observe func(size int)
}

// Runner serves requests in groups.
type Runner[Req, Res any] struct {
	cfg     Config[Req, Res]
	mu      sync.Mutex
	pending []call[Req, Res]
	weight  int // of pending
	running int // groups in flight
	wg      sync.WaitGroup
}

type call[Req, Res any] struct {
	req    Req
	weight int
	done   chan outcome[Res]
}

type outcome[Res any] struct {
	res Res
	err error
}

// New returns a runner.
func New[Req, Res any](cfg Config[Req, Res]) *Runner[Req, Res] {
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = 1000
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 1
	}
	if cfg.Weight == nil {
		cfg.Weight = func(Req) int { return 1 }
	}
	return &Runner[Req, Res]{cfg: cfg}
}

// Do adds req to the next group and waits for its result. When ctx ends
// first it returns ctx's error; the request may still be served.
func (r *Runner[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	return r.Add(req).Wait(ctx)
}

// Pending is a request added to a group, its result still to come.
type Pending[Req, Res any] struct {
	r *Runner[Req, Res]
	c call[Req, Res]
}

// Add adds req to the next group without waiting for its result: a caller
// with many requests adds them all, then waits for each, from one
// goroutine.
func (r *Runner[Req, Res]) Add(req Req) Pending[Req, Res] {
	c := call[Req, Res]{req: req, weight: max(r.cfg.Weight(req), 1), done: make(chan outcome[Res], 1)}
	r.mu.Lock()
	r.pending = append(r.pending, c)
	r.weight += c.weight
	if r.running == 0 || (r.running < r.cfg.Parallel && r.weight >= r.cfg.MaxSize) {
		r.running++
		r.wg.Add(1)
		go r.loop()
	}
	r.mu.Unlock()
	return Pending[Req, Res]{r: r, c: c}
}

// Wait waits for the request's result. When ctx ends first it returns
// ctx's error; the request may still be served.
func (p Pending[Req, Res]) Wait(ctx context.Context) (Res, error) {
	select {
	case out := <-p.c.done:
		return out.res, out.err
	case <-ctx.Done():
		if abandoned := p.r.cfg.Abandoned; abandoned != nil {
			go func() {
				if out := <-p.c.done; out.err == nil {
					abandoned(p.c.req, out.res)
				}
			}()
		}
		var zero Res
		return zero, ctx.Err()
	}
}

// Wait blocks until no group is in flight or pending.
func (r *Runner[Req, Res]) Wait() { r.wg.Wait() }

// loop serves groups until none is pending, or until it is an extra loop
// and less than a whole group waits: what waits then goes with the next
// group of the loop still in flight, as it would with one loop. The next
// Do starts a loop again.
func (r *Runner[Req, Res]) loop() {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		if len(r.pending) == 0 || (r.running > 1 && r.weight < r.cfg.MaxSize) {
			r.running--
			r.mu.Unlock()
			return
		}
		n, w := 1, r.pending[0].weight
		for n < len(r.pending) && w+r.pending[n].weight <= r.cfg.MaxSize {
			w += r.pending[n].weight
			n++
		}
		calls := r.pending[:n:n]
		r.pending = append([]call[Req, Res](nil), r.pending[n:]...)
		r.weight -= w
		r.mu.Unlock()

		if r.cfg.Observe != nil {
			r.cfg.Observe(len(calls))
		}
		reqs := make([]Req, len(calls))
		for i, c := range calls {
			reqs[i] = c.req
		}
		res, err := r.run(reqs)
		for i, c := range calls {
			if err != nil {
				c.done <- outcome[Res]{err: err}
			} else {
				c.done <- outcome[Res]{res: res[i]}
			}
		}
	}
}

// ErrPanicked means serving a group panicked; the panic is in the error.
var ErrPanicked = errors.New("serving a group panicked")

func (r *Runner[Req, Res]) run(reqs []Req) (res []Res, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrPanicked, p, debug.Stack())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	res = r.cfg.Run(ctx, reqs)
	if len(res) != len(reqs) {
		return nil, fmt.Errorf("a group of %d requests got %d results", len(reqs), len(res))
	}
	return res, nil
}
