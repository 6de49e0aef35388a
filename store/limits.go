package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueRate is a limit on starts: at most Limit in any Period. The zero
// value is no limit.
type QueueRate struct {
	Limit  int
	Period time.Duration
}

// QueueLimits are a queue's flow-control limits; zero values mean none.
type QueueLimits struct {
	MaxRunning int
	Rate       QueueRate
}

// QueueLimitsChange says which limits to set: a nil field stays as it is;
// MaxRunning 0 or a zero Rate removes that limit.
type QueueLimitsChange struct {
	MaxRunning *int
	Rate       *QueueRate
}

// QueueLimitsGet returns a queue's limits (none for a queue without a row).
func (s *Store) QueueLimitsGet(ctx context.Context, name string) (QueueLimits, error) {
	var l QueueLimits
	if !storable(name) {
		return l, nil
	}
	err := s.Pool.QueryRow(ctx, queueLimitsSelect+` FROM queues WHERE name = $1`, name).
		Scan(&l.MaxRunning, &l.Rate.Limit, &l.Rate.Period)
	if errors.Is(err, pgx.ErrNoRows) {
		return QueueLimits{}, nil
	}
	return l, interpretError(err)
}

const queueLimitsSelect = `SELECT coalesce(max_running, 0), coalesce(rate_limit, 0), coalesce(rate_period, interval '0')`

// QueueConfigure changes a queue's limits (creating its row if needed) and
// returns those now in force. Loosened limits may leave room at once: the
// queue's waiters on every node are woken, as a resume wakes them.
func (s *Store) QueueConfigure(ctx context.Context, name string, c QueueLimitsChange) (QueueLimits, error) {
	var maxRunning, rateLimit *int
	var period *time.Duration
	setMax, setRate := c.MaxRunning != nil, c.Rate != nil
	if setMax && *c.MaxRunning > 0 {
		maxRunning = c.MaxRunning
	}
	if setRate && c.Rate.Limit > 0 {
		rateLimit, period = &c.Rate.Limit, &c.Rate.Period
	}
	var l QueueLimits
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO queues AS q (name, max_running, rate_limit, rate_period) VALUES ($1, $3, $5, $6)
			ON CONFLICT (name) DO UPDATE SET
				max_running = CASE WHEN $2 THEN excluded.max_running ELSE q.max_running END,
				rate_limit = CASE WHEN $4 THEN excluded.rate_limit ELSE q.rate_limit END,
				rate_period = CASE WHEN $4 THEN excluded.rate_period ELSE q.rate_period END
			RETURNING coalesce(max_running, 0), coalesce(rate_limit, 0), coalesce(rate_period, interval '0')`,
			name, setMax, maxRunning, setRate, rateLimit, period).Scan(&l.MaxRunning, &l.Rate.Limit, &l.Rate.Period)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, json_build_object('q', $2::text, 'n', 1000000)::text)`, ChannelJobs, name)
		return err
	})
	return l, interpretError(err)
}
