package store_test

import (
	"fmt"
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

// A chain cancelled from its root, some of it moved into history and some
// not — as the mover leaves it while a cancel of a long chain is under
// way — is restored whole by a retry of the root: each job waits for its
// parent again, and none is released before it.
func TestHistoryRetryRestoresAChainPartlyInHistory(t *testing.T) {
	t.Parallel()
	const n = 40
	for _, c := range []struct {
		name  string
		moved func(i int) bool
	}{
		{"EveryOther", func(i int) bool { return i%2 == 1 }},
		{"EveryThird", func(i int) bool { return i%3 == 0 }},
		{"FirstHalf", func(i int) bool { return i < n/2 }},
		{"SecondHalf", func(i int) bool { return i >= n/2 }},
		{"AllButTheRoot", func(i int) bool { return i > 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newTrBundle(t)
			ids := make([]string, n)
			jobs := make([]records.NewJob, n)
			for i := range n {
				ids[i] = fmt.Sprintf("p-%02d", i)
				jobs[i] = trJob(ids[i], 1, 1)
				jobs[i].Queue = "chain"
				if i > 0 {
					jobs[i].After = []string{ids[i-1]}
				}
			}
			b.submit(t, jobs...)
			if _, err := b.st.JobCancel(b.ctx, ids[0]); err != nil {
				t.Fatal(err)
			}
			b.settleAll(t)
			var cancelled int
			if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM jobs WHERE status = 'cancelled'`).Scan(&cancelled); err != nil || cancelled != n {
				t.Fatalf("%d of the chain's %d jobs cancelled (%v)", cancelled, n, err)
			}
			var stay, move []string
			for i, id := range ids {
				if c.moved(i) {
					move = append(move, id)
				} else {
					stay = append(stay, id)
				}
			}
			// The mover takes jobs finished before now: those that stay
			// end in the future for it.
			if _, err := b.st.Pool.Exec(b.ctx, `UPDATE jobs SET finished_at = now() + interval '1 hour' WHERE id = ANY($1)`, stay); err != nil {
				t.Fatal(err)
			}
			b.moveAll(t, time.Hour, len(move))
			if _, err := b.st.Pool.Exec(b.ctx, `UPDATE jobs SET finished_at = now() WHERE id = ANY($1)`, stay); err != nil {
				t.Fatal(err)
			}
			if _, err := b.st.JobRetry(b.ctx, ids[0]); err != nil {
				t.Fatalf("retrying the root: %v", err)
			}
			b.drainWalks(t, store.WalkRestore)
			b.settleAll(t)
			for i, id := range ids {
				j := b.get(t, id)
				want := records.StatusPending
				if i == 0 {
					want = records.StatusQueued
				}
				if j.Status != want || i > 0 && j.PendingParents != 1 {
					t.Errorf("%s (moved %v): %s waiting for %d parents, want %s", id, c.moved(i), j.Status, j.PendingParents, want)
				}
			}
		})
	}
}

// settleAll settles dependencies and cascades until nothing is left.
func (b *trBundle) settleAll(t *testing.T) {
	t.Helper()
	for range 1000 {
		b.drainWalks(t, store.WalkCascade)
		out, err := b.st.DependenciesSettle(b.ctx, nil, 7)
		if err != nil {
			t.Fatal(err)
		}
		var left int
		if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM dependency_checks`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 && len(out.Released)+len(out.Cancelled) == 0 && !out.More {
			return
		}
	}
	t.Fatal("settling does not end")
}

// drainWalks runs the graph walks of kind until none is left, in small
// batches.
func (b *trBundle) drainWalks(t *testing.T, kind string) {
	t.Helper()
	if err := b.walkAll(kind, 7); err != nil {
		t.Fatal(err)
	}
}
