package commands

import (
	"context"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/resp"
	"github.com/agq/agq/store"
)

// limitedPops remembers the queues whose claims on this node found limits
// — the queue's own, or a job type's that held its jobs back — so that a
// job leaving running wakes a pop those limits held, while finishing other
// jobs costs nothing more. An entry is forgotten an hour after a claim last
// saw it (waking a pop for nothing is harmless; the LISTEN connection's
// re-check finds what a missed wake-up left).
type limitedPops struct {
	mu     sync.Mutex
	queues map[string]time.Time
	types  map[string]map[string]time.Time // type → queue → when
}

const limitedMemory = time.Hour

// sawQueue records that the queue has limits.
func (l *limitedPops) sawQueue(queue string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queues == nil {
		l.queues = map[string]time.Time{}
	}
	l.queues[queue] = time.Now()
	forgetOld(l.queues)
}

// sawType records that the type's limits held back jobs of the queue.
func (l *limitedPops) sawType(typ, queue string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.types == nil {
		l.types = map[string]map[string]time.Time{}
	}
	if l.types[typ] == nil {
		l.types[typ] = map[string]time.Time{}
	}
	l.types[typ][queue] = time.Now()
	forgetOld(l.types[typ])
	if len(l.types) > 1000 {
		for t, qs := range l.types {
			if forgetOld(qs); len(qs) == 0 {
				delete(l.types, t)
			}
		}
	}
}

// forgetOld drops entries older than limitedMemory once there are many.
func forgetOld(seen map[string]time.Time) {
	if len(seen) <= 1000 {
		return
	}
	now := time.Now()
	for k, t := range seen {
		if now.Sub(t) > limitedMemory {
			delete(seen, k)
		}
	}
}

// RoomNotes wakes, for each queue whose pops limits held back, as many
// pops as jobs of the queue, or of the type holding it, left running.
func (s *Server) RoomNotes(f store.Freed) []store.ReadyNote {
	l := &s.limited
	l.mu.Lock()
	defer l.mu.Unlock()
	var notes []store.ReadyNote
	for q, n := range f.Queues {
		if t, ok := l.queues[q]; ok && time.Since(t) < limitedMemory {
			notes = append(notes, store.ReadyNote{Queue: q, N: n})
		}
	}
	for typ, n := range f.Types {
		for q, t := range l.types[typ] {
			if time.Since(t) < limitedMemory {
				notes = append(notes, store.ReadyNote{Queue: q, N: n})
			}
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
	change, err := parseLimits(args[2:])
	if err != nil {
		return nil, err
	}
	var limits store.Limits
	if change == (store.LimitsChange{}) {
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
	return limitsMap(name, limits), nil
}

// TYPE.CONFIG type [MAXRUNNING n|NONE] [RATE n PER seconds | RATE NONE]
//
// QUEUE.CONFIG for a job type: its running jobs and starts are counted
// across every queue.
func (s *Server) cmdTypeConfig(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	name := string(args[1])
	if name == "" || len(name) > 128 || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
		return nil, resp.Errorf("a job type is 1 to 128 bytes of text without control characters")
	}
	change, err := parseLimits(args[2:])
	if err != nil {
		return nil, err
	}
	if change == (store.LimitsChange{}) {
		limits, err := s.store.TypeLimitsGet(ctx, name)
		if err != nil {
			return nil, err
		}
		return limitsMap(name, limits), nil
	}
	if sess.principal().Role != auth.RoleAdmin {
		return nil, resp.CodeErrorf("NOPERM", "only admins may change a job type's limits")
	}
	limits, err := s.store.TypeConfigure(ctx, name, change)
	if err != nil {
		return nil, err
	}
	// Loosened limits may leave room at once: wake, on every node, the
	// pops the type held back.
	s.hub.Free(store.Freed{Types: map[string]int{name: 1_000_000}})
	return limitsMap(name, limits), nil
}

// parseLimits reads [MAXRUNNING n|NONE] [RATE n PER seconds | RATE NONE],
// each at most once.
func parseLimits(args [][]byte) (store.LimitsChange, error) {
	var change store.LimitsChange
	for i := 0; i < len(args); {
		switch strings.ToUpper(string(args[i])) {
		case "MAXRUNNING":
			if i+1 >= len(args) || change.MaxRunning != nil {
				return change, resp.ErrSyntax
			}
			n, err := limitValue(args[i+1], 1_000_000, "MAXRUNNING", true)
			if err != nil {
				return change, err
			}
			change.MaxRunning = &n
			i += 2
		case "RATE":
			if i+1 >= len(args) || change.Rate != nil {
				return change, resp.ErrSyntax
			}
			if strings.EqualFold(string(args[i+1]), "NONE") {
				change.Rate = &store.Rate{}
				i += 2
				continue
			}
			if i+3 >= len(args) || !strings.EqualFold(string(args[i+2]), "PER") {
				return change, resp.ErrSyntax
			}
			n, err := limitValue(args[i+1], 100_000, "RATE", false)
			if err != nil {
				return change, err
			}
			secs, err := limitValue(args[i+3], 86_400, "RATE period", false)
			if err != nil {
				return change, err
			}
			change.Rate = &store.Rate{Limit: n, Period: time.Duration(secs) * time.Second}
			i += 4
		default:
			return change, resp.ErrSyntax
		}
	}
	return change, nil
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

func limitsMap(name string, l store.Limits) resp.Map {
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
	return append(queueStatsMap(qs[0]), limitsMap(name, limits)[1:]...), nil
}
