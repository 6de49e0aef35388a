package commands

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/agq/agq/internal/group"
	"github.com/agq/agq/store"
)

// The node's groups: single submissions and final reports from all
// connections share commits; acknowledgements and pops share statements.
type groups struct {
	submits  *group.Runner[store.NewJob, submitOutcome]
	finishes *group.Runner[store.JobUpdateParams, error]
	acks     *group.Runner[store.JobUpdateParams, error]
	claims   *group.Runner[claimRequest, claimResult]
}

type submitOutcome struct {
	res store.SubmitResult
	err error
}

// maxGroup bounds a group: its arrays and its reply fan-out.
const maxGroup = 500

func (s *Server) newGroups() groups {
	return groups{
		submits: group.New(group.Config[store.NewJob, submitOutcome]{
			MaxSize: maxGroup, Timeout: s.opts.CommandTimeout,
			Run: func(ctx context.Context, jobs []store.NewJob) []submitOutcome {
				res, errs, notes := s.store.JobsSubmitEach(ctx, jobs)
				s.hub.Publish(notes, nil)
				out := make([]submitOutcome, len(jobs))
				for i := range jobs {
					out[i] = submitOutcome{res[i], errs[i]}
				}
				return out
			},
		}),
		finishes: group.New(group.Config[store.JobUpdateParams, error]{
			MaxSize: maxGroup, Timeout: s.opts.CommandTimeout,
			Run: func(ctx context.Context, reports []store.JobUpdateParams) []error {
				errs, fx := s.store.JobsFinish(ctx, reports)
				s.hub.Publish(fx.Ready, fx.Done)
				return errs
			},
		}),
		acks: group.New(group.Config[store.JobUpdateParams, error]{
			MaxSize: maxGroup, Timeout: s.opts.CommandTimeout,
			Run: s.store.JobsAck,
		}),
		claims: group.New(group.Config[claimRequest, claimResult]{
			MaxSize: maxGroup, Timeout: s.opts.CommandTimeout,
			Run:       s.runClaims,
			Abandoned: s.releaseClaimed,
		}),
	}
}

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
			if len(waiting) == 0 {
				break
			}
			var workers []string
			for _, i := range waiting {
				for range reqs[i].limit {
					workers = append(workers, reqs[i].worker)
				}
			}
			claimed, refused, err := s.store.JobsClaim(ctx, store.JobsClaimParams{
				Queue: q, Workers: workers, Capabilities: first.caps, AckTimeout: s.opts.AckTimeout, Lease: s.lease(),
			})
			if err != nil {
				for _, i := range waiting {
					out[i].err = err
				}
				waiting = nil
				break
			}
			// A worker popping on several connections at once appears in
			// several requests: its jobs go to them in arrival order.
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
			waiting = next
		}
	}
	return out
}

// releaseClaimed gives back jobs claimed for a pop that stopped waiting.
func (s *Server) releaseClaimed(r claimRequest, res claimResult) {
	for _, j := range res.jobs {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommandTimeout)
		rel, err := s.store.JobRelease(ctx, j.ID, r.worker)
		cancel()
		if err != nil {
			s.log.Warn().Err(err).Str("job", j.ID).Msg("releasing a job claimed for a departed client")
			continue
		}
		s.hub.Publish(rel, nil)
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

// hotWorker is the worker a session acts as, read once and kept: pops and
// reports need only its id and capabilities, and the claim statement
// re-checks its state and capabilities in the database. The copy is
// dropped when the worker registers or unregisters again, when the key is
// revoked, and when a claim finds it changed.
func (s *Server) hotWorker(ctx context.Context, sess *Session) (store.Worker, error) {
	sess.mu.Lock()
	w := sess.worker
	sess.mu.Unlock()
	if w != nil {
		return *w, nil
	}
	got, err := offStack(func() (store.Worker, error) { return s.sessionWorker(ctx, sess) })
	if err != nil {
		return got, err
	}
	if got.State == store.WorkerActive || got.State == store.WorkerDraining {
		keep := got
		keep.Capabilities = slices.Clone(got.Capabilities)
		sess.mu.Lock()
		sess.worker = &keep
		sess.mu.Unlock()
	}
	return got, nil
}

// forgetWorker drops the session's copy of its worker.
func (sess *Session) forgetWorker() {
	sess.mu.Lock()
	sess.worker = nil
	sess.mu.Unlock()
}

// forgetWorkers drops the copies sessions keep of worker id, or of any
// worker of principal: it registered or unregistered.
func (s *Server) forgetWorkers(principal, id string) {
	for _, sess := range s.sessionList() {
		sess.mu.Lock()
		if w := sess.worker; w != nil && (w.ID == id || w.Principal == principal) {
			sess.worker = nil
		}
		sess.mu.Unlock()
	}
}

// offStack runs fn on a goroutine of its own and waits for it. A
// connection's goroutine lives as long as the client, and its stack never
// gives back what a deep call (a database lookup) grew it to: thousands of
// idle clients would each keep that. The lookups a connection makes once —
// its key, its worker — run on a short-lived goroutine instead.
func offStack[T any](fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	c := make(chan result, 1)
	go func() {
		v, err := fn()
		c <- result{v, err}
	}()
	r := <-c
	return r.v, r.err
}
