package store_test

import (
	"testing"

	"github.com/agq/agq/records"
)

// A parent's end leaves a mark the sweep settles even when no caller
// settled it at once (a crash right after the commit).
func TestDependencies(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	parent := trJob("dep-parent", 1, 1)
	child := trJob("dep-child", 1, 1)
	child.After = []string{parent.ID}
	b.submit(t, parent, child)
	if got := b.get(t, child.ID); got.Status != records.StatusPending || got.PendingParents != 1 {
		t.Fatalf("child: %s, %d pending parents", got.Status, got.PendingParents)
	}

	t.Run("ASweepReleasesAChildWhoseParentsEndWasNotSettled", func(t *testing.T) {
		j := b.claim(t, parent.ID, holder)
		errs, fx := b.st.JobsFinish(b.ctx, []records.Report{{ID: j.ID, WorkerID: holder, Status: records.StatusCompleted,
			Delivery: *j.Delivery, Raw: []byte(`{"status":"completed"}`)}})
		if errs[0] != nil || len(fx.Parents) != 1 {
			t.Fatalf("finishing the parent: %v, parents %v", errs[0], fx.Parents)
		}
		// Nothing settles the mark but the sweep.
		st, err := b.st.DependenciesSettle(b.ctx, nil, 100)
		if err != nil || len(st.Released) != 1 || st.Released[0].ID != child.ID || st.Released[0].Status != records.StatusQueued {
			t.Fatalf("sweep: %+v, %v", st, err)
		}
		if st, err := b.st.DependenciesSettle(b.ctx, nil, 100); err != nil || len(st.Released)+len(st.Cancelled) != 0 {
			t.Fatalf("a second sweep: %+v, %v", st, err)
		}
	})

}
