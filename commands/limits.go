package commands

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/resp"
	"github.com/agq/agq/store"
)

// limitedQueues remembers the queues whose claims on this node found
// limits, so that a job leaving running there wakes a pop the running cap
// held back, while finishing jobs of other queues costs nothing more. A
// queue is forgotten an hour after a claim last saw its limits (waking a
// pop for nothing is harmless; the LISTEN connection's re-check finds what
// a missed wake-up left).
type limitedQueues struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

const limitedMemory = time.Hour

func (l *limitedQueues) saw(queue string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]time.Time{}
	}
	now := time.Now()
	l.seen[queue] = now
	if len(l.seen) > 1000 {
		for q, t := range l.seen {
			if now.Sub(t) > limitedMemory {
				delete(l.seen, q)
			}
		}
	}
}

// roomNotes wakes, for each limited queue, as many pops as jobs left it.
func (l *limitedQueues) roomNotes(freed map[string]int) []store.ReadyNote {
	if len(freed) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var notes []store.ReadyNote
	for q, n := range freed {
		if t, ok := l.seen[q]; ok && time.Since(t) < limitedMemory {
			notes = append(notes, store.ReadyNote{Queue: q, N: n})
		}
	}
	return notes
}

// QUEUE.CONFIG name [MAXRUNNING n|NONE] [RATE n PER seconds | RATE NONE]
//
// Without options it reads the queue's limits; with them (admins only) it
// sets them and answers the limits now in force.
func (s *Server) cmdQueueConfig(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	name := strings.TrimPrefix(string(args[1]), "queue:")
	if !queuePattern.MatchString(name) {
		return nil, resp.Errorf("invalid queue name '%s'", name)
	}
	var change store.QueueLimitsChange
	for i := 2; i < len(args); {
		switch strings.ToUpper(string(args[i])) {
		case "MAXRUNNING":
			if i+1 >= len(args) || change.MaxRunning != nil {
				return nil, resp.ErrSyntax
			}
			n, err := limitValue(args[i+1], 1_000_000, "MAXRUNNING", true)
			if err != nil {
				return nil, err
			}
			change.MaxRunning = &n
			i += 2
		case "RATE":
			if i+1 >= len(args) || change.Rate != nil {
				return nil, resp.ErrSyntax
			}
			if strings.EqualFold(string(args[i+1]), "NONE") {
				change.Rate = &store.QueueRate{}
				i += 2
				continue
			}
			if i+3 >= len(args) || !strings.EqualFold(string(args[i+2]), "PER") {
				return nil, resp.ErrSyntax
			}
			n, err := limitValue(args[i+1], 100_000, "RATE", false)
			if err != nil {
				return nil, err
			}
			secs, err := limitValue(args[i+3], 86_400, "RATE period", false)
			if err != nil {
				return nil, err
			}
			change.Rate = &store.QueueRate{Limit: n, Period: time.Duration(secs) * time.Second}
			i += 4
		default:
			return nil, resp.ErrSyntax
		}
	}
	var limits store.QueueLimits
	var err error
	if change.MaxRunning == nil && change.Rate == nil {
		limits, err = s.store.QueueLimitsGet(ctx, name)
	} else {
		if sess.principal().Role != auth.RoleAdmin {
			return nil, resp.CodeErrorf("NOPERM", "only admins may change a queue's limits")
		}
		limits, err = s.store.QueueConfigure(ctx, name, change)
	}
	if err != nil {
		return nil, err
	}
	return queueLimitsMap(name, limits), nil
}

// limitValue parses a whole number from 1 to most, or NONE (0) where
// allowed.
func limitValue(arg []byte, most int64, what string, none bool) (int, error) {
	if none && strings.EqualFold(string(arg), "NONE") {
		return 0, nil
	}
	n, err := resp.ParseInt(arg)
	if err != nil || n < 1 || n > most {
		if none {
			return 0, resp.Errorf("%s must be NONE or a whole number from 1 to %d", what, most)
		}
		return 0, resp.Errorf("%s must be a whole number from 1 to %d", what, most)
	}
	return int(n), nil
}

func queueLimitsMap(name string, l store.QueueLimits) resp.Map {
	return resp.Map{
		{Key: "name", Value: resp.BulkString(name)},
		{Key: "max_running", Value: resp.Int(int64(l.MaxRunning))},
		{Key: "rate_limit", Value: resp.Int(int64(l.Rate.Limit))},
		{Key: "rate_period_seconds", Value: resp.Int(int64(l.Rate.Period / time.Second))},
	}
}

// QUEUE.INFO name — the queue's counts (as QUEUE.STATS) and its limits.
func (s *Server) cmdQueueInfo(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	name := strings.TrimPrefix(string(args[1]), "queue:")
	qs, err := s.store.QueueStats(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(qs) == 0 {
		return nil, resp.Errorf("no such queue '%s'", name)
	}
	limits, err := s.store.QueueLimitsGet(ctx, name)
	if err != nil {
		return nil, err
	}
	return append(queueStatsMap(qs[0]), queueLimitsMap(name, limits)[1:]...), nil
}
