package commands

import (
	"context"
	"strings"
	"time"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// QUEUE.CONFIG name [MAXRUNNING n|NONE] [RATE n PER seconds | RATE NONE]
// [MAXRUNNINGPERKEY n|NONE]
//
// Without options it reads the queue's limits; with them (admins only) it
// sets them and answers the limits now in force.
func (s *Server) cmdQueueConfig(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	name := strings.TrimPrefix(string(args[1]), "queue:")
	if !names.Queue(name) {
		return nil, resp.Errorf("invalid queue name '%s'", name)
	}
	change, err := parseLimits(args[2:], true)
	if err != nil {
		return nil, err
	}
	var limits records.Limits
	if change == (records.LimitsChange{}) {
		limits, err = sess.eng.QueueLimitsGet(ctx, name)
	} else {
		if sess.principal().Role != auth.RoleAdmin {
			return nil, resp.CodeErrorf("NOPERM", "only admins may change a queue's limits")
		}
		limits, err = sess.eng.ConfigureQueue(ctx, name, change)
	}
	if err != nil {
		return nil, err
	}
	return queueLimitsMap(name, limits), nil
}

// TYPE.CONFIG type [MAXRUNNING n|NONE] [RATE n PER seconds | RATE NONE]
//
// QUEUE.CONFIG for a job type: its running jobs and starts are counted
// across every queue.
func (s *Server) cmdTypeConfig(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	name := string(args[1])
	if !names.JobType(name) {
		return nil, resp.Errorf("a job type is 1 to 128 bytes of text without control characters")
	}
	change, err := parseLimits(args[2:], false)
	if err != nil {
		return nil, err
	}
	if change == (records.LimitsChange{}) {
		limits, err := sess.eng.TypeLimitsGet(ctx, name)
		if err != nil {
			return nil, err
		}
		return limitsMap(name, limits), nil
	}
	if sess.principal().Role != auth.RoleAdmin {
		return nil, resp.CodeErrorf("NOPERM", "only admins may change a job type's limits")
	}
	limits, err := sess.eng.ConfigureType(ctx, name, change)
	if err != nil {
		return nil, err
	}
	return limitsMap(name, limits), nil
}

// parseLimits reads [MAXRUNNING n|NONE] [RATE n PER seconds | RATE NONE],
// and for a queue [MAXRUNNINGPERKEY n|NONE], each at most once.
func parseLimits(args [][]byte, queue bool) (records.LimitsChange, error) {
	var change records.LimitsChange
	for i := 0; i < len(args); {
		switch resp.Upper(args[i]) {
		case "MAXRUNNING", "MAXRUNNINGPERKEY":
			field, name := &change.MaxRunning, "MAXRUNNING"
			if resp.Is(args[i], "MAXRUNNINGPERKEY") {
				field, name = &change.MaxRunningPerKey, "MAXRUNNINGPERKEY"
			}
			if i+1 >= len(args) || *field != nil || (field == &change.MaxRunningPerKey && !queue) {
				return change, resp.ErrSyntax
			}
			n, err := limitValue(args[i+1], 1_000_000, name, true)
			if err != nil {
				return change, err
			}
			*field = &n
			i += 2
		case "RATE":
			if i+1 >= len(args) || change.Rate != nil {
				return change, resp.ErrSyntax
			}
			if resp.Is(args[i+1], "NONE") {
				change.Rate = &records.Rate{}
				i += 2
				continue
			}
			if i+3 >= len(args) || !resp.Is(args[i+2], "PER") {
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
			change.Rate = &records.Rate{Limit: n, Period: time.Duration(secs) * time.Second}
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
	if none && resp.Is(arg, "NONE") {
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

func limitsMap(name string, l records.Limits) resp.Map {
	return resp.Map{
		{Key: "name", Value: resp.BulkString(name)},
		{Key: "max_running", Value: resp.Int(int64(l.MaxRunning))},
		{Key: "rate_limit", Value: resp.Int(int64(l.Rate.Limit))},
		{Key: "rate_period_seconds", Value: resp.Int(int64(l.Rate.Period / time.Second))},
	}
}

// queueLimitsMap is limitsMap with the queue's cap per fair key.
func queueLimitsMap(name string, l records.Limits) resp.Map {
	return append(limitsMap(name, l), resp.KV{Key: "max_running_per_key", Value: resp.Int(int64(l.MaxRunningPerKey))})
}

// QUEUE.INFO name — the queue's counts (as QUEUE.STATS) and its limits.
func (s *Server) cmdQueueInfo(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	name := strings.TrimPrefix(string(args[1]), "queue:")
	qs, err := sess.eng.QueueStats(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(qs) == 0 {
		return nil, resp.Errorf("no such queue '%s'", name)
	}
	limits, err := sess.eng.QueueLimitsGet(ctx, name)
	if err != nil {
		return nil, err
	}
	return append(queueStatsMap(qs[0]), queueLimitsMap(name, limits)[1:]...), nil
}
