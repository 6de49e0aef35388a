package engine

import (
	"context"

	"github.com/agq/agq/internal/group"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// The node's groups: single submissions and final reports from all
// connections share commits; acknowledgements and pops share statements.
type groups struct {
	submits  *group.Runner[records.NewJob, submitOutcome]
	finishes *group.Runner[records.Report, error]
	acks     *group.Runner[records.Report, error]
	// stepCompletes are STEP.COMPLETEs, sharing commits as final reports do.
	stepCompletes *group.Runner[store.StepCompletion, store.StepCompleteResult]
	// stepBegins are STEP.BEGINs, sharing commits likewise.
	stepBegins *group.Runner[records.StepBeginParams, store.StepBeginOutcome]
	claims     *group.Runner[claimRequest, claimResult]
}

type submitOutcome struct {
	res records.SubmitResult
	err error
}

// parallelGroups bounds the groups of a kind in flight at once. The second
// runs only while a whole group waits behind the first — workers taking
// and reporting batches — so that a backlog keeps more than one of the
// database's cores busy; one-at-a-time clients keep sharing one group.
const parallelGroups = 2

func (e *Engine) newGroups() groups {
	observe := func(kind string) func(int) {
		h := e.metrics.groupSize.WithLabelValues(kind)
		return func(n int) { h.Observe(float64(n)) }
	}
	return groups{
		submits: group.New(group.Config[records.NewJob, submitOutcome]{
			MaxSize: records.MaxGroup, Parallel: parallelGroups, Timeout: e.cfg.CommandTimeout, Observe: observe("submit"),
			Run: e.runSubmits,
		}),
		finishes: group.New(group.Config[records.Report, error]{
			MaxSize: records.MaxGroup, Parallel: parallelGroups, Timeout: e.cfg.CommandTimeout, Observe: observe("final_report"),
			Run: func(ctx context.Context, reports []records.Report) []error {
				traces := e.attemptTraces(ctx, reportIDs(reports))
				errs, rfx := e.store.JobsFinish(ctx, reports)
				e.traceReports(traces, reports, errs, rfx.Moved)
				e.publish(ctx, stored(rfx, records.StatusRetrying))
				return errs
			},
		}),
		acks: group.New(group.Config[records.Report, error]{
			MaxSize: records.MaxGroup, Parallel: parallelGroups, Timeout: e.cfg.CommandTimeout, Observe: observe("acknowledgement"),
			Run: func(ctx context.Context, reports []records.Report) []error {
				errs, afx := e.store.JobsAck(ctx, reports)
				// An acknowledgement moves its job only when it finds the
				// job's cancellation asked: the job ends cancelled.
				e.publish(ctx, stored(afx, records.StatusRetrying))
				return errs
			},
		}),
		stepCompletes: group.New(group.Config[store.StepCompletion, store.StepCompleteResult]{
			MaxSize: records.MaxGroup, Parallel: parallelGroups, Timeout: e.cfg.CommandTimeout, Observe: observe("step_complete"),
			Run: e.runStepCompletes,
		}),
		stepBegins: group.New(group.Config[records.StepBeginParams, store.StepBeginOutcome]{
			MaxSize: records.MaxGroup, Parallel: parallelGroups, Timeout: e.cfg.CommandTimeout, Observe: observe("step_begin"),
			Run: e.runStepBegins,
		}),
		claims: group.New(group.Config[claimRequest, claimResult]{
			// One claim at a time: two on one queue would each skip,
			// row by row, what the other has locked.
			MaxSize: records.MaxGroup, Timeout: e.cfg.CommandTimeout, Observe: observe("pop"),
			Weight:    func(r claimRequest) int { return r.limit },
			Run:       e.runClaims,
			Abandoned: func(r claimRequest, res claimResult) { e.giveBackNow(r.worker, res.jobs) },
		}),
	}
}

// runSubmits serves a group of single submissions in one transaction,
// handing jobs over to waiting pops where it can.
func (e *Engine) runSubmits(ctx context.Context, jobs []records.NewJob) []submitOutcome {
	spans := e.startSubmissions(jobs)
	takers := e.offerJobs(jobs)
	var res []records.SubmitResult
	defer func() { e.endOffers(takers, res) }() // after a panic midway
	res, errs, notes := e.store.JobsSubmitEach(ctx, jobs)
	endSubmissions(spans, res, errs, nil)
	started := settleOffers(takers, res, errs)
	e.publish(ctx, effects{Effects: records.Effects{Ready: notes}, Events: submittedEvents(jobs, res, errs), Started: started})
	if len(started) > 0 {
		e.metrics.handoffs.Add(float64(len(started)))
		e.handJobs(takers, res)
	}
	out := make([]submitOutcome, len(jobs))
	for i := range jobs {
		out[i] = submitOutcome{res[i], errs[i]}
	}
	return out
}

// reportIDs are the ids of the jobs reports are about.
func reportIDs(reports []records.Report) []string {
	ids := make([]string, len(reports))
	for i, r := range reports {
		ids[i] = r.ID
	}
	return ids
}
