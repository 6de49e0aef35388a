package commands

import (
	"context"

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

// maxGroup bounds a group: its arrays and its reply fan-out (for pops, the
// jobs they ask for).
const maxGroup = 500

// parallelGroups bounds the groups of a kind in flight at once. The second
// runs only while a whole group waits behind the first — workers taking
// and reporting batches — so that a backlog keeps more than one of the
// database's cores busy; one-at-a-time clients keep sharing one group.
const parallelGroups = 2

func (s *Server) newGroups() groups {
	observe := func(kind string) func(int) {
		h := s.metrics.groupSize.WithLabelValues(kind)
		return func(n int) { h.Observe(float64(n)) }
	}
	return groups{
		submits: group.New(group.Config[store.NewJob, submitOutcome]{
			MaxSize: maxGroup, Parallel: parallelGroups, Timeout: s.opts.CommandTimeout, Observe: observe("submit"),
			Run: func(ctx context.Context, jobs []store.NewJob) []submitOutcome {
				takers := s.offerJobs(jobs)
				var res []store.SubmitResult
				defer func() { s.endOffers(takers, res) }() // after a panic midway
				res, errs, notes := s.store.JobsSubmitEach(ctx, jobs)
				started := settleOffers(takers, res, errs)
				s.hub.Publish(notes, nil)
				s.publishSubmitted(jobs, res, errs)
				if len(started) > 0 {
					s.metrics.handoffs.Add(float64(len(started)))
					s.publishStarted(started)
					s.handJobs(takers, res)
				}
				out := make([]submitOutcome, len(jobs))
				for i := range jobs {
					out[i] = submitOutcome{res[i], errs[i]}
				}
				return out
			},
		}),
		finishes: group.New(group.Config[store.JobUpdateParams, error]{
			MaxSize: maxGroup, Parallel: parallelGroups, Timeout: s.opts.CommandTimeout, Observe: observe("final_report"),
			Run: func(ctx context.Context, reports []store.JobUpdateParams) []error {
				errs, fx := s.store.JobsFinish(ctx, reports)
				s.hub.Publish(fx.Ready, fx.Done)
				s.hub.Free(fx.Freed)
				s.publishFinished(ctx, reports, errs)
				return errs
			},
		}),
		acks: group.New(group.Config[store.JobUpdateParams, error]{
			MaxSize: maxGroup, Parallel: parallelGroups, Timeout: s.opts.CommandTimeout, Observe: observe("acknowledgement"),
			Run: func(ctx context.Context, reports []store.JobUpdateParams) []error {
				errs, freed := s.store.JobsAck(ctx, reports)
				s.hub.Free(freed)
				return errs
			},
		}),
		claims: group.New(group.Config[claimRequest, claimResult]{
			// One claim at a time: two on one queue would each skip,
			// row by row, what the other has locked.
			MaxSize: maxGroup, Timeout: s.opts.CommandTimeout, Observe: observe("pop"),
			Weight:    func(r claimRequest) int { return r.limit },
			Run:       s.runClaims,
			Abandoned: s.releaseClaimed,
		}),
	}
}
