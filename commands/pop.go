package commands

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/resp"
	"github.com/agq/agq/store"
)

// queueKeys parses queue:<name> keys.
func queueKeys(args [][]byte) ([]string, error) {
	names := make([]string, len(args))
	for i, a := range args {
		name, ok := strings.CutPrefix(string(a), "queue:")
		if !ok || !queuePattern.MatchString(name) {
			return nil, resp.Errorf("keys must be queue:<name> (got '%s')", a)
		}
		names[i] = name
	}
	return names, nil
}

// popWorker resolves the popping worker; a dead or unregistered one must
// register again.
func (s *Server) popWorker(ctx context.Context, sess *Session) (store.Worker, error) {
	w, err := s.hotWorker(ctx, sess)
	if err != nil {
		return w, err
	}
	if w.State != store.WorkerActive && w.State != store.WorkerDraining {
		return w, errNotRegistered(w.ID)
	}
	return w, nil
}

// lookupPopWorker is popWorker under the command deadline.
func (s *Server) lookupPopWorker(sess *Session) (store.Worker, error) {
	ctx, cancel := s.ctxForCommand(sess)
	defer cancel()
	return s.popWorker(ctx, sess)
}

func errNotRegistered(id string) error { return resp.Errorf("Worker not registered: %s", id) }

// claimError words a claim refusal: a draining worker simply gets nothing;
// one that registered again with other capabilities retries.
func claimError(workerID string, err error) (draining, retry bool, _ error) {
	var inactive *store.WorkerNotActiveError
	if errors.As(err, &inactive) {
		if inactive.State == store.WorkerDraining {
			return true, false, nil
		}
		return false, false, errNotRegistered(workerID)
	}
	if errors.Is(err, store.ErrCapabilitiesChanged) {
		return false, true, nil
	}
	return false, false, err
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
	case asciiEqualFold(rest[0], "right"):
	case asciiEqualFold(rest[0], "left"):
		return nil, 0, resp.Errorf("agq queues hand out their oldest job first: pop with RIGHT")
	default:
		return nil, 0, resp.ErrSyntax
	}
	count = 1
	switch {
	case len(rest) == 1:
	case len(rest) == 3 && asciiEqualFold(rest[1], "count"):
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
func mpopReply(queue string, jobs []store.Job) resp.Reply {
	return resp.Array{resp.BulkString("queue:" + queue), deliveries(jobs)}
}

// deliveries is the jobs' JSON, as pops of several jobs answer them.
func deliveries(jobs []store.Job) resp.Array {
	out := make(resp.Array, len(jobs))
	for i, j := range jobs {
		out[i] = resp.Bulk(deliveryJSON(j))
	}
	return out
}

// popNow takes up to limit jobs from the first of the queues that has any
// for the worker, in one claim, without waiting. A worker that registered
// again with other capabilities is looked up once more.
func (s *Server) popNow(ctx context.Context, sess *Session, queues []string, limit int) (string, []store.Job, error) {
	for try := 0; ; try++ {
		w, err := s.popWorker(ctx, sess)
		if err != nil {
			return "", nil, err
		}
		queue, jobs, err := s.claim(ctx, sess, w, queues, limit)
		_, retry, err := claimError(w.ID, err)
		if err != nil {
			return "", nil, err // a draining worker gets no error and no job
		}
		if !retry || try > 0 {
			return queue, jobs, nil
		}
	}
}

// popWaiting takes up to limit jobs from the first of the queues that has
// any for the worker, waiting up to timeout (0: forever) for one; no jobs
// and no error at the timeout.
//
// The wait holds no database connection: the waiter is registered with the
// notification hub before the first check of the database, so a job
// committed between a check and the wait still wakes it. A wake-up the
// waiter does not use — the job went to another, it took a job from another
// queue, or it left — is passed on when it closes. While blocked, the
// socket is watched: a client that leaves is never handed a job.
func (s *Server) popWaiting(ctx context.Context, sess *Session, queues []string, timeout time.Duration, limit int) (string, []store.Job, error) {
	w, err := s.lookupPopWorker(sess)
	if err != nil {
		return "", nil, err
	}

	b := newBlocking(ctx, sess, timeout, popRecheck)
	defer b.close()
	waiter := s.hub.NewWorkerWaiter(w.ID, queues, w.Capabilities, b.onWake())
	var received []store.ReadyNote // wake-ups not yet used
	defer func() {
		if waiter != nil {
			s.closeWaiter(waiter, received)
		}
	}()

	for {
		if job := handedJob(waiter); job != nil {
			return s.takeHanded(waiter, job, b)
		}
		claimCtx, cancel := s.ctxForCommand(sess)
		queue, jobs, err := s.claim(claimCtx, sess, w, queues, limit)
		cancel()
		draining, retry, cerr := claimError(w.ID, err)
		if retry {
			// Registered again, elsewhere, with other capabilities.
			if w, err = s.lookupPopWorker(sess); err != nil {
				return "", nil, err
			}
			s.closeWaiter(waiter, received)
			received = nil
			waiter = s.hub.NewWorkerWaiter(w.ID, queues, w.Capabilities, b.onWake())
			continue
		}
		if draining {
			// A draining worker gets nothing: wait out the timeout
			// without taking wake-ups meant for others.
			s.closeWaiter(waiter, received)
			waiter = nil
			_, err := b.out(resp.NilArray)
			return "", nil, err
		} else if cerr != nil {
			return "", nil, cerr
		}
		if len(jobs) > 0 {
			for range jobs {
				received = dropNoteFor(received, queue)
			}
			if b.peerGone() {
				// Claimed as the client left: give them back untouched.
				s.releaseClaimed(claimRequest{worker: w.ID}, claimResult{jobs: jobs})
				return "", nil, errClientGone
			}
			return queue, jobs, nil
		}
		// Nothing claimable: the jobs those notes announced went to others,
		// except that a timed note may have come a moment early.
		for _, note := range received {
			s.hub.RetryTimed(note)
		}
		received = nil
		note, reply, err := next(b, waiter.C(), resp.NilArray)
		if reply != nil || err != nil {
			return "", nil, err
		}
		if note != nil && note.N > 0 { // N 0: a job handed over
			received = append(received, *note)
		}
	}
}

// handedJob picks up the job a submission handed to the waiter, or nil.
// (Jobs go by pointer: a blocked pop's frame stays small, and with it the
// stack its connection parks on.)
func handedJob(waiter *wakeup.Waiter) *store.Job {
	v, ok := waiter.Handed()
	if !ok {
		return nil
	}
	return v.(*store.Job)
}

// takeHanded answers a pop with the job handed to it, or gives the job
// back when the client left.
func (s *Server) takeHanded(waiter *wakeup.Waiter, job *store.Job, b *blocking) (string, []store.Job, error) {
	if b.peerGone() {
		s.releaseClaimed(claimRequest{worker: waiter.Worker()}, claimResult{jobs: []store.Job{*job}})
		return "", nil, errClientGone
	}
	return job.Queue, []store.Job{*job}, nil
}

// closeWaiter closes a pop's waiter, passing on its unused wake-ups, and
// gives back a job handed to it that the pop did not take.
func (s *Server) closeWaiter(waiter *wakeup.Waiter, unused []store.ReadyNote) {
	waiter.Close(unused...)
	if job := handedJob(waiter); job != nil {
		s.releaseClaimed(claimRequest{worker: waiter.Worker()}, claimResult{jobs: []store.Job{*job}})
	}
}

// dropNoteFor removes one note for queue: the job just claimed used it.
func dropNoteFor(notes []store.ReadyNote, queue string) []store.ReadyNote {
	for i, n := range notes {
		if n.Queue == queue {
			return append(notes[:i], notes[i+1:]...)
		}
	}
	return notes
}
