package commands

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// queueKeys parses queue:<name> keys.
func queueKeys(args [][]byte) ([]string, error) {
	queues := make([]string, len(args))
	for i, a := range args {
		name, ok := strings.CutPrefix(string(a), "queue:")
		if !ok || !names.Queue(name) {
			return nil, resp.Errorf("keys must be queue:<name> (got '%s')", a)
		}
		queues[i] = name
	}
	return queues, nil
}

// popWorker resolves the popping worker; a dead or unregistered one must
// register again.
func (s *Server) popWorker(ctx context.Context, sess *Session) (records.Worker, error) {
	w, err := s.hotWorker(ctx, sess)
	if err != nil {
		return w, err
	}
	if w.State != records.WorkerActive && w.State != records.WorkerDraining {
		return w, &records.WorkerNotRegisteredError{ID: w.ID}
	}
	return w, nil
}

// lookupPopWorker is popWorker under the command deadline.
func (s *Server) lookupPopWorker(sess *Session) (records.Worker, error) {
	ctx, cancel := s.ctxForCommand(sess)
	defer cancel()
	return s.popWorker(ctx, sess)
}

// RPOP queue:<name> [count]
func (s *Server) cmdRPop(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	queues, err := queueKeys(args[1:2])
	if err != nil {
		return nil, err
	}
	limit := 1
	if len(args) == 3 {
		n, err := resp.ParseInt(args[2])
		if err != nil || n < 1 || n > maxPopCount {
			return nil, resp.Errorf("value is out of range, must be positive")
		}
		limit = int(n)
	} else if len(args) > 3 {
		return nil, resp.ErrSyntax
	}
	_, jobs, err := s.popNow(ctx, sess, queues, limit)
	if err != nil {
		return nil, err
	}
	if len(args) == 2 {
		if len(jobs) == 0 {
			return resp.Nil, nil
		}
		return resp.Bulk(deliveryJSON(jobs[0])), nil
	}
	if len(jobs) == 0 {
		return resp.NilArray, nil
	}
	return deliveries(jobs), nil
}

// BRPOP queue:<a> [queue:<b> …] timeout
func (s *Server) cmdBRPop(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	queues, err := queueKeys(args[1 : len(args)-1])
	if err != nil {
		return nil, err
	}
	timeout, err := resp.ParseTimeout(args[len(args)-1])
	if err != nil {
		return nil, err
	}
	queue, jobs, err := s.popWaiting(ctx, sess, queues, timeout, 1)
	if err != nil || len(jobs) == 0 {
		return resp.NilArray, err
	}
	return resp.Array{resp.BulkString("queue:" + queue), resp.Bulk(deliveryJSON(jobs[0]))}, nil
}

// BLMPOP timeout numkeys queue:<a> [queue:<b> …] RIGHT [COUNT n]
//
// Redis 7's blocking pop of several elements: up to n jobs from the first
// queue that has any for the worker, in the order BRPOP hands them out.
func (s *Server) cmdBLMPop(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	timeout, err := resp.ParseTimeout(args[1])
	if err != nil {
		return nil, err
	}
	queues, count, err := parseMPop(args[2:])
	if err != nil {
		return nil, err
	}
	queue, jobs, err := s.popWaiting(ctx, sess, queues, timeout, count)
	if err != nil || len(jobs) == 0 {
		return resp.NilArray, err
	}
	return mpopReply(queue, jobs), nil
}

// LMPOP numkeys queue:<a> [queue:<b> …] RIGHT [COUNT n]
func (s *Server) cmdLMPop(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	queues, count, err := parseMPop(args[1:])
	if err != nil {
		return nil, err
	}
	queue, jobs, err := s.popNow(ctx, sess, queues, count)
	if err != nil || len(jobs) == 0 {
		return resp.NilArray, err
	}
	return mpopReply(queue, jobs), nil
}

// maxPopCount bounds the jobs one pop takes.
const maxPopCount = 1000

// parseMPop reads numkeys key [key …] LEFT|RIGHT [COUNT n], as Redis's
// LMPOP and BLMPOP take them. Jobs come oldest first (the right end of a
// list LPUSH fills): LEFT, newest first, is not offered.
func parseMPop(args [][]byte) (queues []string, count int, err error) {
	n, err := resp.ParseInt(args[0])
	if err != nil || n < 1 {
		return nil, 0, resp.Errorf("numkeys should be greater than 0")
	}
	if int64(len(args)-1) < n+1 {
		return nil, 0, resp.ErrSyntax
	}
	if queues, err = queueKeys(args[1 : 1+n]); err != nil {
		return nil, 0, err
	}
	rest := args[1+n:]
	switch {
	case resp.Is(rest[0], "right"):
	case resp.Is(rest[0], "left"):
		return nil, 0, resp.Errorf("agq queues hand out their oldest job first: pop with RIGHT")
	default:
		return nil, 0, resp.ErrSyntax
	}
	count = 1
	switch {
	case len(rest) == 1:
	case len(rest) == 3 && resp.Is(rest[1], "count"):
		c, err := resp.ParseInt(rest[2])
		if err != nil || c < 1 || c > maxPopCount {
			return nil, 0, resp.Errorf("count should be between 1 and %d", maxPopCount)
		}
		count = int(c)
	default:
		return nil, 0, resp.ErrSyntax
	}
	return queues, count, nil
}

// mpopReply is [queue:<name>, [job, …]], as LMPOP answers.
func mpopReply(queue string, jobs []records.Job) resp.Reply {
	return resp.Array{resp.BulkString("queue:" + queue), deliveries(jobs)}
}

// deliveries is the jobs' JSON, as pops of several jobs answer them.
func deliveries(jobs []records.Job) resp.Array {
	return resp.ArrayOf(jobs, func(j records.Job) resp.Reply { return resp.Bulk(deliveryJSON(j)) })
}

// popNow takes up to limit jobs from the first of the queues that has any
// for the worker, in one claim, without waiting. A worker that registered
// again with other capabilities is looked up once more; a draining one
// gets nothing.
func (s *Server) popNow(ctx context.Context, sess *Session, queues []string, limit int) (string, []records.Job, error) {
	for try := 0; ; try++ {
		w, err := s.popWorker(ctx, sess)
		if err != nil {
			return "", nil, err
		}
		queue, jobs, err := sess.eng.Claim(ctx, w, queues, limit)
		s.forgetChangedWorker(sess, err)
		switch {
		case errors.Is(err, records.ErrWorkerDraining):
			return "", nil, nil
		case errors.Is(err, records.ErrCapabilitiesChanged) && try == 0:
			continue
		case errors.Is(err, records.ErrCapabilitiesChanged):
			return "", nil, nil
		}
		return queue, jobs, err
	}
}

// forgetChangedWorker drops the session's copy of its worker when a claim
// found it changed.
func (s *Server) forgetChangedWorker(sess *Session, err error) {
	var gone *records.WorkerNotRegisteredError
	if errors.Is(err, records.ErrWorkerDraining) || errors.Is(err, records.ErrCapabilitiesChanged) || errors.As(err, &gone) {
		sess.forgetWorker()
	}
}

// popWaiting takes up to limit jobs from the first of the queues that has
// any for the worker, waiting up to timeout (0: forever) for one; no jobs
// and no error at the timeout. While blocked, the socket is watched: a
// client that leaves is never handed a job.
func (s *Server) popWaiting(ctx context.Context, sess *Session, queues []string, timeout time.Duration, limit int) (string, []records.Job, error) {
	w, err := s.lookupPopWorker(sess)
	if err != nil {
		return "", nil, err
	}
	b := newBlocking(ctx, sess, timeout, api.PopRecheck)
	defer b.close()
	refresh := func() (records.Worker, error) {
		sess.forgetWorker()
		return s.lookupPopWorker(sess)
	}
	queue, jobs, err := sess.eng.PopWaiting(ctx, w, refresh, queues, limit, popWait{b})
	s.forgetChangedWorker(sess, err)
	return queue, jobs, err
}
