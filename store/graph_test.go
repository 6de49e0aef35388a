package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agq/agq/records"
)

// A job's graph holds the job first, then its nearest ancestors and
// descendants, at most the limit of each side, saying which side was cut
// short; a job met on two paths comes once.
func TestJobGraphIsBoundedAndNearestFirst(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	// A chain c000 → … → c299, a diamond under c150 (c150 → l, r → end),
	// and 400 children of c299.
	var jobs []records.NewJob
	for i := range 300 {
		j := trJob(fmt.Sprintf("c%03d", i), 1, 1)
		if i > 0 {
			j.After = []string{fmt.Sprintf("c%03d", i-1)}
		}
		jobs = append(jobs, j)
	}
	l, r, end := trJob("l", 1, 1), trJob("r", 1, 1), trJob("end", 1, 1)
	l.After, r.After, end.After = []string{"c150"}, []string{"c150"}, []string{"l", "r"}
	jobs = append(jobs, l, r, end)
	for i := range 400 {
		k := trJob(fmt.Sprintf("k%03d", i), 1, 1)
		k.After = []string{"c299"}
		jobs = append(jobs, k)
	}
	b.submit(t, jobs...)

	g, err := b.st.JobGraph(b.ctx, "c150", 50)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for i, n := range g.Nodes {
		if _, twice := ids[n.ID]; twice {
			t.Fatalf("%s twice in the graph", n.ID)
		}
		ids[n.ID] = i
	}
	if g.Nodes[0].ID != "c150" || g.Nodes[0].Status != records.StatusPending || len(g.Nodes) != 101 {
		t.Fatalf("graph of c150: first %+v, %d nodes; want c150 and 50 a side", g.Nodes[0], len(g.Nodes))
	}
	if !g.MoreAncestors || !g.MoreDescendants {
		t.Errorf("more ancestors %v, more descendants %v; want both cut short", g.MoreAncestors, g.MoreDescendants)
	}
	for _, id := range []string{"c149", "c100", "l", "r", "end", "c151", "c197"} {
		if _, ok := ids[id]; !ok {
			t.Errorf("%s, among the nearest, is not in the graph", id)
		}
	}
	for _, id := range []string{"c099", "c299", "k000"} {
		if _, ok := ids[id]; ok {
			t.Errorf("%s, past the limit, is in the graph", id)
		}
	}

	g, err = b.st.JobGraph(b.ctx, "c299", 500)
	if err != nil || len(g.Nodes) != 1+299+400 || g.MoreAncestors || g.MoreDescendants {
		t.Fatalf("graph of c299: %d nodes, more %v/%v, %v; want all 700", len(g.Nodes), g.MoreAncestors, g.MoreDescendants, err)
	}
	if _, err := b.st.JobGraph(b.ctx, "nope", 10); !errors.Is(err, records.ErrNotFound) {
		t.Errorf("graph of an unknown job: %v", err)
	}
}
