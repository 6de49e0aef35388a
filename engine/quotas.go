package engine

import (
	"context"

	"github.com/agq/agq/records"
)

// counted answers whether submissions to e's namespace count against a
// quota, and its settings; records.ErrNoNamespace when it is gone (a
// cluster admin's connection moved into a namespace deleted since).
func (e *Engine) counted(ctx context.Context) (records.Namespace, bool, error) {
	ns, ok, err := e.namespaceOf(ctx, e.ns)
	if err != nil {
		return ns, false, err
	}
	if !ok {
		return ns, false, &records.NoNamespaceError{Name: e.ns}
	}
	return ns, ns.HasQuota(), nil
}

// submitCounted stores jobs of a namespace with a quota (jobs of e's
// namespace), one transaction that locks the namespace, so that its
// submissions on every node are counted in turn: a batch (all or none),
// or one job.
func (e *Engine) submitCounted(ctx context.Context, ns records.Namespace, jobs []records.NewJob, batch bool) ([]records.SubmitResult, error) {
	return e.submitWith(ctx, jobs, func(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, []records.ReadyNote, error) {
		return e.store.JobsSubmitCounted(ctx, ns, jobs, batch)
	})
}
