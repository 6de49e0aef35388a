package dashboard

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/agq/agq/records"
)

// graphSide bounds the ancestors, and the descendants, a job's graph
// draws; past that the page's paged tables list the rest.
const graphSide = 150

// graphEdgesDrawn bounds the edges drawn (a job after thousands of
// parents, all drawn, has that many).
const graphEdgesDrawn = 3000

// The geometry of a drawn graph, in pixels: a node's box, and the pitch
// of columns (levels) and rows.
const (
	graphNodeW, graphNodeH = 200, 26
	graphColumn, graphRow  = 260, 34
	graphMargin            = 10
	graphLabelRunes        = 26
)

// graphView is a job's graph laid out to draw: its ancestors in columns
// to its left, its descendants to its right, each column one level (the
// longest path of after from or to the job), each edge from a parent's
// right side to its child's left.
type graphView struct {
	Width, Height                  int
	Nodes                          []graphNode
	Edges                          []string // SVG path data
	MoreAncestors, MoreDescendants bool
	MoreEdges                      bool
}

// graphNode is a job drawn: its box at X, Y; Status "" for a job deleted
// since its children were written.
type graphNode struct {
	ID, Status, Label string
	X, Y              int
	Self              bool
}

// layoutGraph lays out g, whose first node is the job itself; nil when
// the job has neither parents nor children.
func layoutGraph(g records.JobGraph) *graphView {
	if len(g.Nodes) < 2 {
		return nil
	}
	level := graphLevels(g.Nodes)
	columns := map[int][]int{} // level → node indexes
	for i := range g.Nodes {
		columns[level[i]] = append(columns[level[i]], i)
	}
	levels := make([]int, 0, len(columns))
	for l := range columns {
		levels = append(levels, l)
	}
	slices.Sort(levels)
	v := &graphView{MoreAncestors: g.MoreAncestors, MoreDescendants: g.MoreDescendants}
	row := orderRows(g.Nodes, level, columns, levels)
	at := make([]graphNode, len(g.Nodes))
	rows := 0
	for c, l := range levels {
		rows = max(rows, len(columns[l]))
		for _, i := range columns[l] {
			n := g.Nodes[i]
			at[i] = graphNode{ID: n.ID, Status: n.Status, Label: shorten(n.ID, graphLabelRunes), Self: i == 0,
				X: graphMargin + c*graphColumn, Y: graphMargin + row[i]*graphRow}
		}
	}
	v.Nodes = at
	v.Width = 2*graphMargin + (len(levels)-1)*graphColumn + graphNodeW
	v.Height = 2*graphMargin + (rows-1)*graphRow + graphNodeH
	v.Edges, v.MoreEdges = graphEdges(g.Nodes, at)
	return v
}

// graphLevels gives each node its level: 0 for the job (node 0), minus
// the longest path of after from an ancestor down to the job, plus the
// longest path from the job to a descendant. Relaxed until nothing moves,
// at most once a node: the nodes are a DAG.
func graphLevels(nodes []records.GraphNode) []int {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n.ID] = i
	}
	// A node reached from the job through children is a descendant (or
	// the job); every other node is an ancestor.
	down := map[int]bool{0: true}
	for changed := true; changed; {
		changed = false
		for i, n := range nodes {
			for _, p := range n.After {
				if k, ok := index[p]; ok && down[k] && !down[i] {
					down[i], changed = true, true
				}
			}
		}
	}
	level := make([]int, len(nodes))
	for range nodes {
		moved := false
		for i, n := range nodes {
			for _, p := range n.After {
				k, ok := index[p]
				switch {
				case !ok:
				case down[i] && down[k] && level[k]+1 > level[i]:
					level[i], moved = level[k]+1, true
				case !down[k] && (i == 0 || !down[i]) && level[i]-1 < level[k]:
					level[k], moved = level[i]-1, true
				}
			}
		}
		if !moved {
			break
		}
	}
	return level
}

// orderRows orders each column: the job's own column by id, the others
// by the mean row of their neighbours in the column nearer the job
// (parents for descendants, children for ancestors), then by id, so that
// edges cross less.
func orderRows(nodes []records.GraphNode, level []int, columns map[int][]int, levels []int) []int {
	row := make([]int, len(nodes))
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n.ID] = i
	}
	children := make([][]int, len(nodes))
	for i, n := range nodes {
		for _, p := range n.After {
			if k, ok := index[p]; ok {
				children[k] = append(children[k], i)
			}
		}
	}
	mean := func(i int) float64 {
		var sum, n float64
		near := children[i]
		if level[i] > 0 {
			near = near[:0:0]
			for _, p := range nodes[i].After {
				if k, ok := index[p]; ok {
					near = append(near, k)
				}
			}
		}
		for _, k := range near {
			if (level[i] > 0 && level[k] < level[i]) || (level[i] < 0 && level[k] > level[i]) {
				sum, n = sum+float64(row[k]), n+1
			}
		}
		if n == 0 {
			return 0
		}
		return sum / n
	}
	place := func(l int) {
		col := columns[l]
		keys := make(map[int]float64, len(col))
		for _, i := range col {
			keys[i] = mean(i)
		}
		slices.SortFunc(col, func(a, b int) int {
			return cmp.Or(cmp.Compare(keys[a], keys[b]), cmp.Compare(nodes[a].ID, nodes[b].ID))
		})
		for r, i := range col {
			row[i] = r
		}
	}
	zero := slices.Index(levels, 0)
	place(0)
	for c := zero + 1; c < len(levels); c++ {
		place(levels[c])
	}
	for c := zero - 1; c >= 0; c-- {
		place(levels[c])
	}
	return row
}

// graphEdges are the edges between drawn nodes as SVG cubic paths, at
// most graphEdgesDrawn; more says some were left out.
func graphEdges(nodes []records.GraphNode, at []graphNode) (edges []string, more bool) {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n.ID] = i
	}
	for i, n := range nodes {
		for _, p := range n.After {
			k, ok := index[p]
			if !ok {
				continue
			}
			if len(edges) == graphEdgesDrawn {
				return edges, true
			}
			x1, y1 := at[k].X+graphNodeW, at[k].Y+graphNodeH/2
			x2, y2 := at[i].X, at[i].Y+graphNodeH/2
			bend := max((x2-x1)/2, 20)
			edges = append(edges, fmt.Sprintf("M%d,%d C%d,%d %d,%d %d,%d", x1, y1, x1+bend, y1, x2-bend, y2, x2, y2))
		}
	}
	return edges, false
}

// shorten cuts s to n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
