package commands

import (
	"context"
	"strings"

	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

func (s *Server) queueCommands() []*Command {
	return []*Command{
		{Name: "llen", Arity: 2, Roles: readers, Handler: s.cmdLLen},
		{Name: "lrange", Arity: 4, Roles: readers, Handler: s.cmdLRange},
		{Name: "queue.list", Arity: 1, Roles: readers, Handler: s.cmdQueueList},
		{Name: "queue.stats", Arity: -1, Roles: readers, Handler: s.cmdQueueStats},
		{Name: "queue.pause", Arity: 2, Roles: roleAdmin, Handler: s.cmdQueuePause},
		{Name: "queue.resume", Arity: 2, Roles: roleAdmin, Handler: s.cmdQueueResume},
		// Anyone who reads queues may read limits; setting them is for
		// admins (checked by the command).
		{Name: "queue.config", Arity: -2, Roles: readers, Handler: s.cmdQueueConfig},
		{Name: "queue.info", Arity: 2, Roles: readers, Handler: s.cmdQueueInfo},
		{Name: "type.config", Arity: -2, Roles: readers, Handler: s.cmdTypeConfig},
	}
}

// LLEN queue:<name> — the number of jobs claimable now.
func (s *Server) cmdLLen(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	q, err := queueKeys(args[1:2])
	if err != nil {
		return nil, err
	}
	n, err := sess.eng.QueueDepth(ctx, q[0])
	if err != nil {
		return nil, err
	}
	return resp.Int(n), nil
}

// LRANGE queue:<name> start stop — peeks at claimable jobs. As in a Redis
// list fed by LPUSH and drained by BRPOP, the last element is the next to
// be popped.
func (s *Server) cmdLRange(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	q, err := queueKeys(args[1:2])
	if err != nil {
		return nil, err
	}
	start, err1 := resp.ParseInt(args[2])
	stop, err2 := resp.ParseInt(args[3])
	if err1 != nil || err2 != nil {
		return nil, resp.ErrNotInteger
	}
	total, err := sess.eng.QueueDepth(ctx, q[0])
	if err != nil {
		return nil, err
	}
	if start < 0 {
		start = max(total+start, 0)
	}
	if stop < 0 {
		stop = total + stop
	}
	stop = min(stop, total-1)
	if start > stop || total == 0 {
		return resp.Array{}, nil
	}
	// List index i is pop position total-1-i.
	first := total - 1 - stop
	n := stop - start + 1
	jobs, err := sess.eng.QueuePeek(ctx, q[0], first, min(n, 10000))
	if err != nil {
		return nil, err
	}
	out := make(resp.Array, len(jobs))
	for i, j := range jobs {
		out[len(jobs)-1-i] = resp.Bulk(deliveryJSON(j))
	}
	return out, nil
}

// QUEUE.LIST
func (s *Server) cmdQueueList(ctx context.Context, sess *Session, _ [][]byte) (resp.Reply, error) {
	names, err := sess.eng.QueueNames(ctx)
	if err != nil {
		return nil, err
	}
	return resp.ArrayOf(names, func(n string) resp.Reply { return resp.BulkString(n) }), nil
}

// QUEUE.STATS [name] — one queue's counts as a map, or every queue's as an
// array of maps.
func (s *Server) cmdQueueStats(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	if len(args) > 2 {
		return nil, resp.ErrSyntax
	}
	name := ""
	if len(args) == 2 {
		name = strings.TrimPrefix(string(args[1]), "queue:")
	}
	qs, err := sess.eng.QueueStats(ctx, name)
	if err != nil {
		return nil, err
	}
	if name != "" {
		if len(qs) == 0 {
			return nil, resp.Errorf("no such queue '%s'", name)
		}
		return queueStatsMap(qs[0]), nil
	}
	out := make(resp.Array, len(qs))
	for i, q := range qs {
		out[i] = queueStatsMap(q)
	}
	return out, nil
}

func queueStatsMap(q records.Queue) resp.Map {
	m := resp.Map{{Key: "name", Value: resp.BulkString(q.Name)}}
	paused := int64(0)
	if q.Paused {
		paused = 1
	}
	m = append(m, resp.KV{Key: "paused", Value: resp.Int(paused)})
	for _, st := range records.Statuses {
		m = append(m, resp.KV{Key: st, Value: resp.Int(q.Counts[st])})
	}
	m = append(m, resp.KV{Key: "oldest_queued_age_ms", Value: resp.Int(q.OldestAge.Milliseconds())},
		resp.KV{Key: "fair_keys_ready", Value: resp.Int(q.FairKeysReady)})
	return m
}

// QUEUE.PAUSE name
func (s *Server) cmdQueuePause(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	return s.setPaused(ctx, sess, args[1], true)
}

// QUEUE.RESUME name
func (s *Server) cmdQueueResume(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	return s.setPaused(ctx, sess, args[1], false)
}

func (s *Server) setPaused(ctx context.Context, sess *Session, arg []byte, paused bool) (resp.Reply, error) {
	return okOr(sess.eng.PauseQueue(ctx, strings.TrimPrefix(string(arg), "queue:"), paused))
}
