package engine

import (
	"cmp"
	"context"
	"slices"

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
				return byNamespace(e, reports, reportNamespace, func(e *Engine, reports []records.Report) []error {
					traces := e.attemptTraces(ctx, reportIDs(reports))
					errs, rfx := e.store.JobsFinish(ctx, reports)
					e.traceReports(traces, reports, errs, rfx.Moved)
					e.publish(ctx, stored(rfx, records.StatusRetrying))
					return errs
				})
			},
		}),
		acks: group.New(group.Config[records.Report, error]{
			MaxSize: records.MaxGroup, Parallel: parallelGroups, Timeout: e.cfg.CommandTimeout, Observe: observe("acknowledgement"),
			Run: func(ctx context.Context, reports []records.Report) []error {
				return byNamespace(e, reports, reportNamespace, func(e *Engine, reports []records.Report) []error {
					errs, afx := e.store.JobsAck(ctx, reports)
					// An acknowledgement moves its job only when it finds
					// the job's cancellation asked: the job ends cancelled.
					e.publish(ctx, stored(afx, records.StatusRetrying))
					return errs
				})
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

// byNamespace serves a group's requests namespace by namespace, each part
// by run in the engine acting in it, and answers each request's result in
// its place. The statements take a namespace per request, but what a
// transition announces (its effects, events and traces) is told by the
// engine of one namespace. A group of one namespace, the usual case, is
// served whole.
func byNamespace[Req, Res any](e *Engine, reqs []Req, nsOf func(Req) string, run func(*Engine, []Req) []Res) []Res {
	first := cmp.Or(nsOf(reqs[0]), e.ns)
	if !slices.ContainsFunc(reqs, func(r Req) bool { return cmp.Or(nsOf(r), e.ns) != first }) {
		return run(e.in(first), reqs)
	}
	at := map[string][]int{}
	var order []string
	for i, r := range reqs {
		ns := cmp.Or(nsOf(r), e.ns)
		if _, ok := at[ns]; !ok {
			order = append(order, ns)
		}
		at[ns] = append(at[ns], i)
	}
	// Each part is a transaction of its own: they run side by side, so
	// that a group spread over many namespaces shares its commits' waits.
	out := make([]Res, len(reqs))
	group.Each(len(order), parallelParts, func(n int) {
		ns := order[n]
		part := make([]Req, len(at[ns]))
		for k, i := range at[ns] {
			part[k] = reqs[i]
		}
		for k, res := range run(e.in(ns), part) {
			out[at[ns][k]] = res
		}
	})
	return out
}

// parallelParts bounds the namespaces' parts of one group run at once.
const parallelParts = 4

func reportNamespace(p records.Report) string { return p.Namespace }

func jobNamespace(j records.NewJob) string { return j.Namespace }

// runSubmits serves a group of single submissions, one transaction a
// namespace, handing jobs over to waiting pops where it can.
func (e *Engine) runSubmits(ctx context.Context, jobs []records.NewJob) []submitOutcome {
	return byNamespace(e, jobs, jobNamespace, func(e *Engine, jobs []records.NewJob) []submitOutcome {
		return e.runSubmitsIn(ctx, jobs)
	})
}

// runSubmitsIn is runSubmits for jobs of e's namespace.
func (e *Engine) runSubmitsIn(ctx context.Context, jobs []records.NewJob) []submitOutcome {
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
