package store_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/agq/agq/records"
)

// A namespace's deletion carried on by two nodes at once (the one asked,
// and the leader after a crash left it half done) ends with nothing of it
// left and b untouched; a step of the old deletion arriving late never
// touches a namespace created again under the name.
func TestNamespaceDeletionByTwoNodesAndAgain(t *testing.T) {
	t.Parallel()
	b := newReadsBundle(t)
	for i := range 2500 {
		b.insert(t, "a", fmt.Sprintf("j-%d", i), "q", records.StatusCompleted, "")
	}
	b.insert(t, "b", "j-1", "q", records.StatusCompleted, "")
	if err := b.st.NamespaceDeleteBegin(b.ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// Begun again (a client re-sending): nothing changes.
	if err := b.st.NamespaceDeleteBegin(b.ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := b.st.NamespaceCreate(b.ctx, "a"); err != records.ErrNamespaceDeleting {
		t.Fatalf("creating a namespace being deleted: %v", err)
	}
	deleting, err := b.st.NamespacesDeleting(b.ctx)
	if err != nil || len(deleting) != 1 || deleting[0] != "a" {
		t.Fatalf("NamespacesDeleting = %v, %v", deleting, err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 100 {
				gone, err := b.st.NamespaceDeleteStep(b.ctx, "a")
				if err != nil {
					t.Error(err)
					return
				}
				if gone {
					return
				}
			}
			t.Error("the namespace was not gone after 100 steps")
		})
	}
	wg.Wait()
	var left int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM jobs WHERE namespace = 'a') + (SELECT count(*) FROM namespaces WHERE name = 'a')`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("rows of a left: %d, %v", left, err)
	}
	if _, err := b.b.JobGet(b.ctx, "j-1"); err != nil {
		t.Fatalf("b's job: %v", err)
	}

	if err := b.st.NamespaceCreate(b.ctx, "a"); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "a", "new-1", "q", records.StatusQueued, "")
	if gone, err := b.st.NamespaceDeleteStep(b.ctx, "a"); err != nil || !gone {
		t.Fatalf("a late step of the old deletion: gone %v, %v", gone, err)
	}
	if _, err := b.a.JobGet(b.ctx, "new-1"); err != nil {
		t.Fatalf("the namespace created again lost its job: %v", err)
	}
}
