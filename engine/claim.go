package engine

import (
	"cmp"
	"context"
	"strings"
	"time"

	"github.com/agq/agq/internal/group"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// claimRequest is one pop: a worker's namespace, the worker, its
// capabilities as it registered them, its queues in the order given, and
// how many jobs it takes.
type claimRequest struct {
	ns     string
	worker string
	caps   []string
	queues []string
	limit  int
}

// claimResult is what a pop got: jobs from one queue, nothing, or the
// worker's own refusal (not ACTIVE, re-registered with other capabilities).
type claimResult struct {
	queue string
	jobs  []records.Job
	err   error
}

// runClaims serves a group of pops. Pops of the same namespace with the
// same queues and capabilities share one statement per queue, in the order
// the queues were given, the longest-waiting pop first; each takes from
// the first queue that has a job for it.
//
// Kinds of pops that share no queue run side by side, so that many small
// workers on queues of their own are not served one after another. Those
// sharing a queue run one after the other, in arrival order: two claims of
// one queue at once would each skip, row by row, what the other locked.
func (e *Engine) runClaims(ctx context.Context, reqs []claimRequest) []claimResult {
	out := make([]claimResult, len(reqs))
	kinds := map[string][]int{}
	var order []string
	for i, r := range reqs {
		k := r.ns + "\x02" + strings.Join(r.queues, "\x00") + "\x01" + strings.Join(r.caps, "\x00")
		if _, ok := kinds[k]; !ok {
			order = append(order, k)
		}
		kinds[k] = append(kinds[k], i)
	}
	lanes := claimLanes(len(order), func(n int) (string, []string) {
		first := reqs[kinds[order[n]][0]]
		return first.ns, first.queues
	})
	group.Each(len(lanes), parallelClaims, func(l int) {
		for _, n := range lanes[l] {
			idx := kinds[order[n]]
			first := reqs[idx[0]]
			e.in(first.ns).claimKind(ctx, first, reqs, idx, out)
		}
	})
	return out
}

// claimKind claims, queue after queue, for the pops idx of one kind (those
// of first's namespace, queues and capabilities).
func (e *Engine) claimKind(ctx context.Context, first claimRequest, reqs []claimRequest, idx []int, out []claimResult) {
	waiting := idx
	for _, q := range first.queues {
		// A claim whose limits' locks held back jobs another claim may
		// take goes again at once. Past the bound, the pops still
		// waiting are woken to try again.
		for round := 0; len(waiting) > 0; round++ {
			var again bool
			if waiting, again = e.claimQueue(ctx, q, first.caps, reqs, waiting, out); !again {
				break
			}
			if round == maxClaimRounds-1 {
				e.publish(ctx, effects{Effects: records.Effects{Ready: []records.ReadyNote{{Namespace: e.ns, Queue: q,
					N: len(waiting)}}}})
				break
			}
		}
	}
}

// claimLanes splits kinds 0 to n-1 (each naming its namespace and queues)
// into lanes, each in kind order, such that kinds sharing a queue of a
// namespace are in one lane.
func claimLanes(n int, queuesOf func(int) (string, []string)) [][]int {
	lane := make([]int, n) // a union-find over the kinds
	for i := range lane {
		lane[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if lane[i] != i {
			lane[i] = find(lane[i])
		}
		return lane[i]
	}
	first := map[[2]string]int{} // the first kind naming a queue
	for i := range n {
		ns, queues := queuesOf(i)
		for _, q := range queues {
			key := [2]string{ns, q}
			if j, ok := first[key]; ok {
				a, b := find(i), find(j)
				lane[max(a, b)] = min(a, b)
			} else {
				first[key] = i
			}
		}
	}
	at := map[int]int{}
	var lanes [][]int
	for i := range n {
		root := find(i)
		l, ok := at[root]
		if !ok {
			l = len(lanes)
			at[root] = l
			lanes = append(lanes, nil)
		}
		lanes[l] = append(lanes[l], i)
	}
	return lanes
}

// parallelClaims bounds the claims of one group of pops run at once.
const parallelClaims = 4

// maxClaimRounds bounds the claims of one queue for one group of pops.
const maxClaimRounds = 16

// claimQueue runs one claim of queue q of e's namespace for the waiting
// pops, fills in
// their results, and returns those still waiting, and whether to claim
// again at once (ClaimOutcome.Again).
func (e *Engine) claimQueue(ctx context.Context, q string, caps []string, reqs []claimRequest, waiting []int, out []claimResult) ([]int, bool) {
	total := 0
	for _, i := range waiting {
		total += reqs[i].limit
	}
	workers := make([]string, 0, total)
	for _, i := range waiting {
		for range reqs[i].limit {
			workers = append(workers, reqs[i].worker)
		}
	}
	outcome, err := e.store.JobsClaim(ctx, store.JobsClaimParams{
		Queue: q, Workers: workers, Capabilities: caps, AckTimeout: e.cfg.AckTimeout, Lease: e.Lease(),
	})
	if err != nil {
		for _, i := range waiting {
			out[i].err = err
		}
		return nil, false
	}
	claimed, refused := outcome.Claimed, outcome.Refused
	if outcome.Limited {
		e.limited.sawQueue(e.ns, q, e.clock.Now())
	}
	if outcome.NamespaceLimited {
		e.limited.sawNamespace(e.ns, q, e.clock.Now())
	}
	held := len(workers) - len(claimed)
	fx := effects{Started: claimed}
	if !outcome.RateLimited.IsZero() {
		// The queue's rate held jobs back: wake its waiters when the
		// next start is allowed.
		fx.Ready = append(fx.Ready, records.ReadyNote{Namespace: e.ns, Queue: q, N: held, At: outcome.RateLimited.Add(time.Millisecond).UnixMilli()})
	}
	for _, h := range outcome.Types {
		e.limited.sawType(e.ns, h.Type, q, e.clock.Now())
		if !h.RateLimited.IsZero() && held > 0 {
			fx.Ready = append(fx.Ready, records.ReadyNote{Namespace: e.ns, Queue: q, N: held, At: h.RateLimited.Add(time.Millisecond).UnixMilli()})
		}
	}
	e.publish(ctx, fx)
	// A worker popping on several connections at once appears in several
	// requests: its jobs go to them in arrival order.
	byWorker := map[string][]records.Job{}
	counts := map[string]int{}
	for _, c := range claimed {
		counts[c.Worker]++
	}
	for _, c := range claimed {
		if byWorker[c.Worker] == nil {
			byWorker[c.Worker] = make([]records.Job, 0, counts[c.Worker])
		}
		byWorker[c.Worker] = append(byWorker[c.Worker], c.Job)
	}
	next := waiting[:0:0]
	for _, i := range waiting {
		r := reqs[i]
		if err := refused[r.worker]; err != nil {
			out[i].err = err
			continue
		}
		jobs := byWorker[r.worker]
		if len(jobs) == 0 {
			next = append(next, i)
			continue
		}
		n := min(r.limit, len(jobs))
		out[i] = claimResult{queue: q, jobs: jobs[:n:n]}
		byWorker[r.worker] = jobs[n:]
	}
	return next, outcome.Again
}

// giveBackNow gives back jobs claimed for a pop that stopped waiting:
// each is released only for the delivery it was claimed with, in its own
// namespace.
func (e *Engine) giveBackNow(worker string, jobs []records.Job) {
	for _, j := range jobs {
		e := e.in(cmp.Or(j.Namespace, e.ns))
		ctx, cancel := e.offPath()
		rel, err := e.store.JobRelease(ctx, j, worker)
		if err != nil {
			cancel()
			e.log.Warn().Err(err).Str("job", j.ID).Msg("releasing a job claimed for a departed client")
			continue
		}
		fx := effects{Effects: records.Effects{Ready: rel}}
		if len(rel) > 0 {
			fx.AsIs = []AsIs{named("released", j.ID)}
		}
		e.publish(ctx, fx)
		cancel()
	}
}

// giveBack gives back jobs handed over to no pop, off the caller's path.
func (e *Engine) giveBack(worker string, jobs ...records.Job) {
	go e.giveBackNow(worker, jobs)
}
