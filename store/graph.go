package store

import (
	"context"

	"github.com/agq/agq/records"
)

// JobGraph reads job id and up to limit of its ancestors and of its
// descendants, nearest first (the dashboard draws them). Each side is a
// walk that meets each job once (UNION), through jobs_pkey upwards and
// jobs_children downwards, and stops once it has limit+1 jobs: a graph of
// any size costs what its first few hundred jobs cost. The graph is s's
// namespace's (jobs_children filtered by it). ErrNotFound when job id does
// not exist there.
func (s *Store) JobGraph(ctx context.Context, id string, limit int) (records.JobGraph, error) {
	var g records.JobGraph
	if !storable(id) {
		return g, records.ErrNotFound
	}
	rows, err := s.Pool.Query(ctx, `
		WITH RECURSIVE up(id) AS (
			SELECT unnest(after) FROM jobs_all WHERE namespace = $1 AND id = $2
			UNION
			SELECT unnest(j.after) FROM up JOIN jobs_all j ON j.namespace = $1 AND j.id = up.id
		), down(id) AS (
			SELECT $2::text
			UNION
			-- jobs_children, the namespace filtered past the fence (as
			-- childrenOf does).
			SELECT c.id FROM down d CROSS JOIN LATERAL (
				SELECT c.namespace, c.id FROM jobs_all c WHERE c.after @> ARRAY[d.id] AND c.after IS NOT NULL OFFSET 0) c
			WHERE c.namespace = $1
		), side AS (
			SELECT id, -1 AS dir, row_number() OVER () AS n FROM (SELECT id FROM up LIMIT $3 + 1) u
			UNION ALL
			SELECT id, 1, row_number() OVER () FROM (SELECT id FROM down OFFSET 1 LIMIT $3 + 1) d
		)
		SELECT id, queue, status, after, 0 FROM jobs_all WHERE namespace = $1 AND id = $2
		UNION ALL
		(SELECT side.id, coalesce(j.queue, ''), coalesce(j.status, ''), j.after, side.dir
		 FROM side LEFT JOIN jobs_all j ON j.namespace = $1 AND j.id = side.id ORDER BY side.dir, side.n)`, s.ns, id, limit)
	if err != nil {
		return g, interpretError(err)
	}
	defer rows.Close()
	seen := map[int]int{}
	var self *records.GraphNode
	for rows.Next() {
		var n records.GraphNode
		var dir int
		if err := rows.Scan(&n.ID, &n.Queue, &n.Status, &n.After, &dir); err != nil {
			return g, interpretError(err)
		}
		// Each side comes nearest first; its row past limit only says
		// that there are more.
		if seen[dir]++; seen[dir] > limit && dir != 0 {
			if dir < 0 {
				g.MoreAncestors = true
			} else {
				g.MoreDescendants = true
			}
			continue
		}
		if dir == 0 {
			self = &n
			continue
		}
		g.Nodes = append(g.Nodes, n)
	}
	if err := rows.Err(); err != nil {
		return g, interpretError(err)
	}
	if self == nil {
		return g, records.ErrNotFound
	}
	g.Nodes = append([]records.GraphNode{*self}, g.Nodes...)
	return g, nil
}
