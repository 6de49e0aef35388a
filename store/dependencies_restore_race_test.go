package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// A parent cancelled with its graph and restored by a retry while its
// cancellation is still being settled: the settling comes wholly before
// the restore or after it, never between its read of the parent and the
// deletion of the parent's waits. The child ends waiting for its restored
// parent, and is not released before it.
func TestARestoreRacingTheSettlingOfACancelledParent(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	root, parent, child := trJob("race-a", 1, 1), trJob("race-p", 1, 1), trJob("race-c", 1, 1)
	parent.After, child.After = []string{root.ID}, []string{parent.ID}
	b.submit(t, root, parent, child)
	if _, err := b.st.JobCancel(b.ctx, root.ID); err != nil {
		t.Fatal(err)
	}
	// Settling the root's end cancels the parent and the child; the
	// parent's own end, and the child's wait for it, are left to settle.
	if _, err := b.st.DependenciesSettle(b.ctx, []string{root.ID}, 100); err != nil {
		t.Fatal(err)
	}
	var waits int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM job_waits WHERE parent_id = $1`, parent.ID).Scan(&waits); err != nil {
		t.Fatal(err)
	}
	if p := b.get(t, parent.ID); p.Status != records.StatusCancelled || waits != 1 {
		t.Fatalf("after the root's cancel: parent %s, %d waits for it", p.Status, waits)
	}

	// A transaction holds the child's wait for the parent, so that the
	// parent's settling stops where it deletes its waits.
	hold, err := b.st.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(context.Background())
	if _, err := hold.Exec(b.ctx, `SELECT 1 FROM job_waits WHERE parent_id = $1 FOR UPDATE`, parent.ID); err != nil {
		t.Fatal(err)
	}
	settled := make(chan error, 1)
	go func() {
		_, err := b.st.DependenciesSettle(b.ctx, []string{parent.ID}, 100)
		settled <- err
	}()
	b.awaitLockWaiters(t, 1)

	// The retry's restore runs meanwhile: it finds the parent, and waits
	// for the settling or, were the parent not locked, goes through.
	if _, err := b.st.JobRetry(b.ctx, root.ID); err != nil {
		t.Fatalf("retrying the root: %v", err)
	}
	restored := make(chan error, 1)
	go func() { restored <- b.walkAll(store.WalkRestore, 100) }()
	agqtest.Eventually(t, 10*time.Second, func() error {
		if len(restored) > 0 || b.lockWaiters(t) >= 2 {
			return nil
		}
		return fmt.Errorf("the restore neither ended nor waits")
	})
	if err := hold.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-settled; err != nil {
		t.Fatalf("settling the parent: %v", err)
	}
	if err := <-restored; err != nil {
		t.Fatalf("restoring: %v", err)
	}
	b.drainWalks(t, store.WalkRestore)
	b.settleAll(t)

	if got := b.get(t, root.ID); got.Status != records.StatusQueued {
		t.Errorf("the root: %s, want queued", got.Status)
	}
	for _, id := range []string{parent.ID, child.ID} {
		if got := b.get(t, id); got.Status != records.StatusPending || got.PendingParents != 1 {
			t.Errorf("%s: %s waiting for %d parents, want pending for 1", id, got.Status, got.PendingParents)
		}
	}
}

// lockWaiters counts the sessions of the test's database waiting for a
// lock.
func (b *trBundle) lockWaiters(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// awaitLockWaiters waits until n sessions wait for a lock.
func (b *trBundle) awaitLockWaiters(t *testing.T, n int) {
	t.Helper()
	agqtest.Eventually(t, 10*time.Second, func() error {
		if got := b.lockWaiters(t); got < n {
			return fmt.Errorf("%d sessions wait for a lock, want %d", got, n)
		}
		return nil
	})
}

// walkAll runs the graph walks of kind, batches of limit jobs, until no
// mark is left.
func (b *trBundle) walkAll(kind string, limit int) error {
	for range 1000 {
		w, err := b.st.GraphWalk(b.ctx, kind, nil, limit)
		if err != nil {
			return err
		}
		if len(w.Restored)+len(w.Cancelled)+len(w.Next) == 0 && !w.More {
			var left int
			if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM graph_walks WHERE kind = $1`, kind).Scan(&left); err != nil || left == 0 {
				return err
			}
		}
	}
	return fmt.Errorf("the %s walks do not end", kind)
}
