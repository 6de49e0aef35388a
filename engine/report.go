package engine

import (
	"cmp"
	"context"

	"github.com/agq/agq/records"
)

// Report applies a worker's report: it joins its group at once and answers
// how to await its outcome, so that a pipeline of reports shares one group.
// A final one shares the commit of the node's next group of final reports,
// an acknowledgement or progress the statement of the next group of
// those; a snooze takes the locked path alone, once awaited. Re-sending a
// report that took effect succeeds and changes nothing.
//
// The report is about a job of e's namespace.
func (e *Engine) Report(p records.Report) (wait func(context.Context) error) {
	p.Namespace = e.ns
	p.MaxSnoozes = e.cfg.MaxSnoozes
	var g = e.groups.finishes
	switch p.Status {
	case records.StatusSnoozed:
		return func(ctx context.Context) error { return e.snooze(ctx, p) }
	case "", records.StatusRunning:
		g = e.groups.acks
	}
	pending := g.Add(p)
	return func(ctx context.Context) error {
		err, gerr := pending.Wait(ctx)
		return refusal(aJob, p.ID, cmp.Or(gerr, err))
	}
}

// snooze puts a running job back to wait for p.SnoozeFor, its attempt
// given back; past the snooze limit the job fails instead.
func (e *Engine) snooze(ctx context.Context, p records.Report) error {
	traces := e.attemptTraces(ctx, []string{p.ID})
	return e.transition(ctx, func() (effects, error) {
		sfx, err := e.store.JobUpdate(ctx, p)
		if err == nil {
			e.traceReports(traces, []records.Report{p}, nil, sfx.Moved)
		}
		// The snooze, or the job's end: failed past the limit, or
		// cancelled when its cancellation was asked.
		return stored(sfx, records.StatusSnoozed), refusal(aJob, p.ID, err)
	})
}
