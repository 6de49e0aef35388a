package dashboard

import (
	"fmt"
	"testing"

	"github.com/agq/agq/records"
)

// Every edge of a laid-out graph runs left to right (a parent's column
// before its child's), the job stands in its own column with its
// ancestors left and its descendants right, and no two nodes share a box.
func TestLayoutGraphPutsEveryParentLeftOfItsChild(t *testing.T) {
	node := func(id string, after ...string) records.GraphNode {
		return records.GraphNode{ID: id, Status: records.StatusQueued, After: after}
	}
	for _, c := range []struct {
		name  string
		nodes []records.GraphNode
	}{
		{"chain", []records.GraphNode{node("job", "a2"), node("a2", "a1"), node("a1"), node("d1", "job"), node("d2", "d1")}},
		// An ancestor linked to the job directly and through another
		// (its column is the longest path's), a descendant likewise,
		// and an edge from an ancestor to a descendant around the job.
		{"shortcuts", []records.GraphNode{node("job", "a1", "a2"), node("a1"), node("a2", "a1"),
			node("d1", "job"), node("d2", "job", "d1", "a1")}},
		{"diamond", []records.GraphNode{node("job"), node("l", "job"), node("r", "job"), node("end", "l", "r")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := layoutGraph(records.JobGraph{Nodes: c.nodes})
			if v == nil {
				t.Fatal("no graph for a job with relatives")
			}
			at := map[string]graphNode{}
			boxes := map[string]string{}
			for _, n := range v.Nodes {
				at[n.ID] = n
				box := fmt.Sprint(n.X, ",", n.Y)
				if other, ok := boxes[box]; ok {
					t.Errorf("%s and %s share the box at %s", n.ID, other, box)
				}
				boxes[box] = n.ID
			}
			edges := 0
			for _, n := range c.nodes {
				for _, p := range n.After {
					edges++
					if at[p].X >= at[n.ID].X {
						t.Errorf("edge %s → %s runs from x=%d to x=%d", p, n.ID, at[p].X, at[n.ID].X)
					}
				}
			}
			if len(v.Edges) != edges {
				t.Errorf("%d edges drawn, want %d", len(v.Edges), edges)
			}
			if !at["job"].Self {
				t.Error("the job is not marked as itself")
			}
			if w := v.Width; w < at["job"].X+graphNodeW {
				t.Errorf("width %d leaves the job's box out", w)
			}
		})
	}
	if layoutGraph(records.JobGraph{Nodes: []records.GraphNode{node("alone")}}) != nil {
		t.Error("a job without relatives got a graph")
	}
}
