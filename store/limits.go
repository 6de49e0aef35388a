package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// QueueLimitsGet returns a queue's limits (none for a queue without a row).
func (s *Store) QueueLimitsGet(ctx context.Context, name string) (records.Limits, error) {
	return s.limitsGet(ctx, `, coalesce(max_running_per_key, 0) FROM queues WHERE namespace = $2 AND name = $1`, name)
}

// TypeLimitsGet returns a job type's limits (none for a type without a row).
func (s *Store) TypeLimitsGet(ctx context.Context, name string) (records.Limits, error) {
	return s.limitsGet(ctx, `, 0 FROM job_types WHERE namespace = $2 AND name = $1`, name)
}

func (s *Store) limitsGet(ctx context.Context, from, name string) (records.Limits, error) {
	var l records.Limits
	if !storable(name) {
		return l, nil
	}
	err := s.Pool.QueryRow(ctx, limitsColumns+from, name, s.ns).Scan(&l.MaxRunning, &l.Rate.Limit, &l.Rate.Period, &l.MaxRunningPerKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return records.Limits{}, nil
	}
	return l, interpretError(err)
}

const limitsColumns = `SELECT coalesce(max_running, 0), coalesce(rate_limit, 0), coalesce(rate_period, interval '0') `

// QueueConfigure changes a queue's limits (creating its row if needed) and
// returns those now in force. Loosened limits may leave room at once: the
// queue's waiters on every node are woken, as a resume wakes them.
func (s *Store) QueueConfigure(ctx context.Context, name string, c records.LimitsChange) (records.Limits, error) {
	var l records.Limits
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var err error
		if l, err = configure(ctx, tx, "queues", s.ns, name, c); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, json_build_object('ns', $3::text, 'q', $2::text, 'n', 1000000)::text)`,
			ChannelJobs, name, s.ns)
		return err
	})
	return l, interpretError(err)
}

// TypeConfigure changes a job type's limits and returns those now in
// force. A type left without limits loses its row, so that claims have no
// row of it to lock. The caller wakes the pops its old limits held back.
func (s *Store) TypeConfigure(ctx context.Context, name string, c records.LimitsChange) (records.Limits, error) {
	var l records.Limits
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var err error
		if l, err = configure(ctx, tx, "job_types", s.ns, name, c); err != nil || l != (records.Limits{}) {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM job_types WHERE namespace = $2 AND name = $1`, name, s.ns)
		return err
	})
	return l, interpretError(err)
}

// configure upserts the limits of the row name of namespace ns in table
// (queues or job_types) and returns those in force.
func configure(ctx context.Context, tx pgx.Tx, table, ns, name string, c records.LimitsChange) (records.Limits, error) {
	var maxRunning, rateLimit, perKey *int
	var period *time.Duration
	setMax, setRate, setPerKey := c.MaxRunning != nil, c.Rate != nil, c.MaxRunningPerKey != nil
	if setMax && *c.MaxRunning > 0 {
		maxRunning = c.MaxRunning
	}
	if setPerKey && *c.MaxRunningPerKey > 0 {
		perKey = c.MaxRunningPerKey
	}
	if setRate && c.Rate.Limit > 0 {
		rateLimit, period = &c.Rate.Limit, &c.Rate.Period
	}
	// Only queues have a cap per fair key.
	perKeyColumn, perKeySet, insertColumns, insertValues := `0`, ``, ``, ``
	args := []any{name, setMax, maxRunning, setRate, rateLimit, period, ns}
	if table == "queues" {
		perKeyColumn, insertColumns, insertValues = `coalesce(max_running_per_key, 0)`, `, max_running_per_key`, `, $9`
		perKeySet = `, max_running_per_key = CASE WHEN $8 THEN $9::int ELSE q.max_running_per_key END`
		args = append(args, setPerKey, perKey)
	}
	var l records.Limits
	err := tx.QueryRow(ctx, `
		INSERT INTO `+table+` AS q (namespace, name, max_running, rate_limit, rate_period`+insertColumns+`)
		VALUES ($7, $1, $3, $5, $6`+insertValues+`)
		ON CONFLICT (namespace, name) DO UPDATE SET
			max_running = CASE WHEN $2 THEN excluded.max_running ELSE q.max_running END,
			rate_limit = CASE WHEN $4 THEN excluded.rate_limit ELSE q.rate_limit END,
			rate_period = CASE WHEN $4 THEN excluded.rate_period ELSE q.rate_period END`+perKeySet+`
		RETURNING coalesce(max_running, 0), coalesce(rate_limit, 0), coalesce(rate_period, interval '0'), `+perKeyColumn,
		args...).Scan(&l.MaxRunning, &l.Rate.Limit, &l.Rate.Period, &l.MaxRunningPerKey)
	return l, err
}
