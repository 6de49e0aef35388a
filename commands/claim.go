package commands

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/agq/agq/store"
)

// claimRequest is one pop: a worker, its capabilities as it registered
// them, its queues in the order given, and how many jobs it takes.
type claimRequest struct {
	worker string
	caps   []string
	queues []string
	limit  int
}

// claimResult is what a pop got: jobs from one queue, nothing, or the
// worker's own refusal (not ACTIVE, re-registered with other capabilities).
type claimResult struct {
	queue string
	jobs  []store.Job
	err   error
}

// runClaims serves a group of pops. Pops with the same queues and
// capabilities share one statement per queue, in the order the queues were
// given, the longest-waiting pop first; each takes from the first queue
// that has a job for it.
func (s *Server) runClaims(ctx context.Context, reqs []claimRequest) []claimResult {
	out := make([]claimResult, len(reqs))
	kinds := map[string][]int{}
	var order []string
	for i, r := range reqs {
		k := strings.Join(r.queues, "\x00") + "\x01" + strings.Join(r.caps, "\x00")
		if _, ok := kinds[k]; !ok {
			order = append(order, k)
		}
		kinds[k] = append(kinds[k], i)
	}
	for _, k := range order {
		idx := kinds[k]
		first := reqs[idx[0]]
		waiting := idx
		for _, q := range first.queues {
			// A claim whose limits' locks held back jobs another claim may
			// take goes again at once. Past the bound, the pops still
			// waiting are woken to try again.
			for round := 0; len(waiting) > 0; round++ {
				var again bool
				if waiting, again = s.claimQueue(ctx, q, first.caps, reqs, waiting, out); !again {
					break
				}
				if round == maxClaimRounds-1 {
					s.hub.Publish([]store.ReadyNote{{Queue: q, N: len(waiting)}}, nil)
					break
				}
			}
		}
	}
	return out
}

// maxClaimRounds bounds the claims of one queue for one group of pops.
const maxClaimRounds = 16

// claimQueue runs one claim of queue q for the waiting pops, fills in
// their results, and returns those still waiting, and whether to claim
// again at once (ClaimOutcome.Again).
func (s *Server) claimQueue(ctx context.Context, q string, caps []string, reqs []claimRequest, waiting []int, out []claimResult) ([]int, bool) {
	var workers []string
	for _, i := range waiting {
		for range reqs[i].limit {
			workers = append(workers, reqs[i].worker)
		}
	}
	outcome, err := s.store.JobsClaim(ctx, store.JobsClaimParams{
		Queue: q, Workers: workers, Capabilities: caps, AckTimeout: s.opts.AckTimeout, Lease: s.lease(),
	})
	if err != nil {
		for _, i := range waiting {
			out[i].err = err
		}
		return nil, false
	}
	claimed, refused := outcome.Claimed, outcome.Refused
	if outcome.Limited {
		s.limited.sawQueue(q)
	}
	held := len(workers) - len(claimed)
	if !outcome.RateLimited.IsZero() {
		// The queue's rate held jobs back: wake its waiters when the
		// next start is allowed.
		s.hub.Publish([]store.ReadyNote{{Queue: q, N: held, At: outcome.RateLimited.Add(time.Millisecond).UnixMilli()}}, nil)
	}
	for _, h := range outcome.Types {
		s.limited.sawType(h.Type, q)
		if !h.RateLimited.IsZero() && held > 0 {
			s.hub.Publish([]store.ReadyNote{{Queue: q, N: held, At: h.RateLimited.Add(time.Millisecond).UnixMilli()}}, nil)
		}
	}
	s.publishStarted(claimed)
	// A worker popping on several connections at once appears in several
	// requests: its jobs go to them in arrival order.
	byWorker := map[string][]store.Job{}
	for _, c := range claimed {
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

// releaseClaimed gives back jobs claimed for a pop that stopped waiting.
func (s *Server) releaseClaimed(r claimRequest, res claimResult) {
	for _, j := range res.jobs {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommandTimeout)
		rel, err := s.store.JobRelease(ctx, j, r.worker)
		if err != nil {
			cancel()
			s.log.Warn().Err(err).Str("job", j.ID).Msg("releasing a job claimed for a departed client")
			continue
		}
		s.hub.Publish(rel, nil)
		if len(rel) > 0 {
			s.publishAsIs(ctx, func(store.JobState) string { return "released" }, j.ID)
		}
		cancel()
	}
}

// claim runs one pop through the node's claim groups.
func (s *Server) claim(ctx context.Context, sess *Session, w store.Worker, queues []string, limit int) (string, []store.Job, error) {
	res, err := s.groups.claims.Do(ctx, claimRequest{worker: w.ID, caps: w.Capabilities, queues: queues, limit: limit})
	if err == nil {
		err = res.err
	}
	if err != nil {
		var inactive *store.WorkerNotActiveError
		if errors.As(err, &inactive) || errors.Is(err, store.ErrCapabilitiesChanged) {
			sess.forgetWorker()
		}
		return "", nil, err
	}
	return res.queue, res.jobs, nil
}
