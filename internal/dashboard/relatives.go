package dashboard

import (
	"context"
	"net/url"
	"slices"
	"strings"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/records"
)

// jobRelativesShown bounds the parents, and the children, a page of a
// job's tables lists.
const jobRelativesShown = 100

// relativesData is a job's place in its graph on its page: the graph
// drawn, and paged tables of its parents (with their results) and its
// children.
type relativesData struct {
	Graph    *graphView
	Parents  []relative
	Children []relative
	// ParentsAt and ChildrenAt are the cursors of the pages shown ("" the
	// first); NextParents and NextChildren those of the pages after them
	// ("" when none).
	ParentsAt, NextParents   string
	ChildrenAt, NextChildren string
}

// relative is a parent or a child of a job; Result a parent's result.
type relative struct {
	ID, Status string
	Result     []byte
}

// relatives reads job j's graph and one page of its parents, in id order,
// and of its children, at the cursors the page's address names.
func (d *Dashboard) relatives(ctx context.Context, eng api.Engine, data *relativesData, j records.Job, q url.Values) {
	if g, err := eng.JobGraph(ctx, j.ID, graphSide); err == nil {
		data.Graph = layoutGraph(g)
	}
	if len(j.After) > 0 {
		data.ParentsAt = q.Get("parents")
		page, next, err := eng.JobParents(ctx, "", j.ID, data.ParentsAt)
		if err == nil {
			for id, p := range page {
				data.Parents = append(data.Parents, relative{ID: id, Status: p.Status, Result: p.Result})
			}
			slices.SortFunc(data.Parents, func(a, b relative) int { return strings.Compare(a.ID, b.ID) })
			data.NextParents = next
		}
	}
	data.ChildrenAt = q.Get("children")
	kids, err := eng.JobChildren(ctx, j.ID, data.ChildrenAt, jobRelativesShown+1)
	if err != nil {
		return
	}
	if len(kids) > jobRelativesShown {
		kids = kids[:jobRelativesShown]
		data.NextChildren = kids[len(kids)-1].ID
	}
	for _, k := range kids {
		data.Children = append(data.Children, relative{ID: k.ID, Status: k.Status})
	}
}
