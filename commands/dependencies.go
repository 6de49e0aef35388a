package commands

import (
	"context"
	"encoding/json"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// JOB.PARENTS job_id [CURSOR c] — [next_cursor, {parent_id: {"status",
// "result"}, …}] for the worker holding the job (or an admin): the parents
// a delivery could not carry whole. Cursor "0" starts and ends, as SCAN's.
func (s *Server) cmdJobParents(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	id, cursor := string(args[1]), ""
	switch {
	case len(args) == 4 && resp.Upper(args[2]) == "CURSOR":
		if c := string(args[3]); c != "0" {
			cursor = c
		}
	case len(args) != 2:
		return nil, resp.ErrSyntax
	}
	worker := ""
	if sess.principal().Role != auth.RoleAdmin {
		w, err := s.hotWorker(ctx, sess)
		if err != nil {
			return nil, err
		}
		worker = w.ID
	}
	page, next, err := sess.eng.JobParents(ctx, worker, id, cursor)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(page)
	return resp.Array{resp.BulkString(cmpOrZero(next)), resp.Bulk(b)}, nil
}

// JOB.CHILDREN job_id [CURSOR c] [LIMIT n] — [next_cursor, {child_id:
// {"status"}, …}]: a page of the jobs after the job, in id order, for
// whoever may read it. Cursor "0" starts and ends, as SCAN's.
func (s *Server) cmdJobChildren(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	id, cursor, limit := string(args[1]), "", 100
	for i := 2; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return nil, resp.ErrSyntax
		}
		switch resp.Upper(args[i]) {
		case "CURSOR":
			if cursor = string(args[i+1]); cursor == "0" {
				cursor = ""
			}
		case "LIMIT":
			n, err := resp.ParseInt(args[i+1])
			if err != nil || n < 1 || n > 1000 {
				return nil, resp.Errorf("LIMIT must be between 1 and 1000")
			}
			limit = int(n)
		default:
			return nil, resp.ErrSyntax
		}
	}
	if err := s.mayReadID(ctx, sess, id); err != nil {
		return nil, err
	}
	kids, err := sess.eng.JobChildren(ctx, id, cursor, limit)
	if err != nil {
		return nil, err
	}
	next := ""
	if len(kids) == limit {
		next = kids[len(kids)-1].ID
	}
	return resp.Array{resp.BulkString(cmpOrZero(next)), resp.Bulk(childrenJSON(kids))}, nil
}

// childrenJSON is JOB.CHILDREN's object, its keys in the page's order.
func childrenJSON(kids []records.JobState) []byte {
	b := []byte{'{'}
	for i, k := range kids {
		if i > 0 {
			b = append(b, ',')
		}
		id, _ := json.Marshal(k.ID)
		status, _ := json.Marshal(k.Status)
		b = append(append(append(append(b, id...), `:{"status":`...), status...), '}')
	}
	return append(b, '}')
}

func cmpOrZero(cursor string) string {
	if cursor == "" {
		return "0"
	}
	return cursor
}
