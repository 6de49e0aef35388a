package commands

import (
	"context"
	"encoding/json"

	"github.com/agq/agq/internal/auth"
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
	page, next, err := s.eng.JobParents(ctx, worker, id, cursor)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(page)
	return resp.Array{resp.BulkString(cmpOrZero(next)), resp.Bulk(b)}, nil
}

func cmpOrZero(cursor string) string {
	if cursor == "" {
		return "0"
	}
	return cursor
}
