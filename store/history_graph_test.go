package store_test

import (
	"testing"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// A chain cancelled from its root, all of it moved into history, is
// restored by a retry of the root.
func TestHistoryRetryRestoresACancelledChain(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	root, mid, leaf := trJob("c-root", 1, 1), trJob("c-mid", 1, 1), trJob("c-leaf", 1, 1)
	mid.After, leaf.After = []string{root.ID}, []string{mid.ID}
	b.submit(t, root, mid, leaf)
	if _, err := b.st.JobCancel(b.ctx, root.ID); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := b.st.DependenciesSettle(b.ctx, nil, 100); err != nil {
			t.Fatal(err)
		}
	}
	b.moveAll(t, time.Hour, 3)
	if _, err := b.st.JobRetry(b.ctx, root.ID); err != nil {
		t.Fatalf("retrying the root: %v", err)
	}
	w, err := b.st.GraphWalk(b.ctx, store.WalkRestore, nil, 100)
	t.Logf("walk: %+v, %v", w, err)
	for _, id := range []string{root.ID, mid.ID, leaf.ID} {
		t.Logf("%s: %s", id, b.get(t, id).Status)
	}
	if got := b.get(t, leaf.ID); got.Status != records.StatusPending {
		t.Errorf("the leaf: %s, want pending", got.Status)
	}
}
