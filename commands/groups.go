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

// maxGroup bounds a group: its arrays and its reply fan-out.
const maxGroup = 500

func (s *Server) newGroups() groups {
	observe := func(kind string) func(int) {
		h := s.metrics.groupSize.WithLabelValues(kind)
		return func(n int) { h.Observe(float64(n)) }
	}
	return groups{
		submits: group.New(group.Config[store.NewJob, submitOutcome]{
			MaxSize: maxGroup, Timeout: s.opts.CommandTimeout, Observe: observe("submit"),
			Run: func(ctx context.Context, jobs []store.NewJob) []submitOutcome {
				res, errs, notes := s.store.JobsSubmitEach(ctx, jobs)
				s.hub.Publish(notes, nil)
				s.publishSubmitted(jobs, res, errs)
				out := make([]submitOutcome, len(jobs))
				for i := range jobs {
					out[i] = submitOutcome{res[i], errs[i]}
				}
				return out
			},
		}),
		finishes: group.New(group.Config[store.JobUpdateParams, error]{
			MaxSize: maxGroup, Timeout: s.opts.CommandTimeout, Observe: observe("final_report"),
			Run: func(ctx context.Context, reports []store.JobUpdateParams) []error {
				errs, fx := s.store.JobsFinish(ctx, reports)
				s.hub.Publish(append(fx.Ready, s.limited.roomNotes(fx.Freed)...), fx.Done)
				s.publishFinished(ctx, reports, errs)
				return errs
			},
		}),
		acks: group.New(group.Config[store.JobUpdateParams, error]{
			MaxSize: maxGroup, Timeout: s.opts.CommandTimeout, Observe: observe("acknowledgement"),
			Run: s.store.JobsAck,
		}),
		claims: group.New(group.Config[claimRequest, claimResult]{
			MaxSize: maxGroup, Timeout: s.opts.CommandTimeout, Observe: observe("pop"),
			Run:       s.runClaims,
			Abandoned: s.releaseClaimed,
		}),
	}
}
