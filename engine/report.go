package engine

import (
	"cmp"
	"context"

	"github.com/agq/agq/records"
)

// Report applies a worker's report. A final one shares the commit of the
// node's next group of final reports, an acknowledgement or progress the
// statement of the next group of those; a snooze takes the locked path
// alone. Re-sending a report that took effect succeeds and changes nothing.
func (e *Engine) Report(ctx context.Context, p records.Report) error {
	if wait, ok := e.ReportLater(p); ok {
		return wait(ctx)
	}
	return e.snooze(ctx, p)
}

// ReportLater adds a report to its group at once and answers how to await
// its outcome, so that a pipeline of reports joins one group; false for a
// snooze, which Report applies alone.
func (e *Engine) ReportLater(r records.Report) (wait func(context.Context) error, ok bool) {
	p := r
	p.MaxSnoozes = e.cfg.MaxSnoozes
	var g = e.groups.finishes
	switch p.Status {
	case records.StatusSnoozed:
		return nil, false
	case "", records.StatusRunning:
		g = e.groups.acks
	}
	pending := g.Add(p)
	return func(ctx context.Context) error {
		err, gerr := pending.Wait(ctx)
		return jobError(p.ID, cmp.Or(gerr, err))
	}, true
}

// snooze puts a running job back to wait for p.SnoozeFor, its attempt
// given back; past the snooze limit the job fails instead.
func (e *Engine) snooze(ctx context.Context, p records.Report) error {
	p.MaxSnoozes = e.cfg.MaxSnoozes
	traces := e.attemptTraces(ctx, []string{p.ID})
	return e.transition(ctx, func() (effects, error) {
		sfx, err := e.store.JobUpdate(ctx, p)
		if err == nil {
			e.traceReports(traces, []records.Report{p}, nil, sfx.Moved)
		}
		// The snooze, or the job's end: failed past the limit, or
		// cancelled when its cancellation was asked.
		return stored(sfx, records.StatusSnoozed), jobError(p.ID, err)
	})
}
