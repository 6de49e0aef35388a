// Package store is agq's only door to PostgreSQL: every SQL statement lives
// here, one file per table or aggregate, with pgx errors translated to the
// domain errors below in one place.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/agq/agq/records"
)

// Domain errors returned by store functions.
var (

	// ErrNoRules means a report or a failed attempt had to be decided by a
	// store opened without Config.Rules.
	ErrNoRules = errors.New("store has no rules (Config.Rules is nil)")
)

// Store wraps the connection pool. A Store acts in one namespace (In
// gives the same pool in another): the statements a client's command runs
// name it, so that no command reads or changes another namespace's rows.
// The leader's sweeps span every namespace and take each row's own.
type Store struct {
	*shared
	ns string
}

// shared is what every namespace's Store has in common.
type shared struct {
	Pool *pgxpool.Pool
	// limitedQueues holds the queues (by namespace and name) whose last
	// claim found limits (the queue's own or some job type's): their next
	// claim goes straight to the locking claim.
	limitedQueues sync.Map
	// rules decide every report the locked path applies and every
	// failed attempt.
	rules records.Rules
	// recovered is Config.Recovered.
	recovered func(reason string, jobs []RecoveredJob)
	// pooled is Config.Pooled: the connections may not have JIT off
	// (noJIT).
	pooled bool
}

// In is the store acting in namespace ns.
func (s *Store) In(ns string) *Store { return &Store{shared: s.shared, ns: ns} }

// Namespace is the namespace s acts in.
func (s *Store) Namespace() string { return s.ns }

// ForPool is a store over an open pool, acting in the default namespace,
// without rules (tests that watch statements use it).
func ForPool(pool *pgxpool.Pool) *Store {
	return &Store{shared: &shared{Pool: pool}, ns: records.DefaultNamespace}
}

// Config sizes the pool and gives the rules the store applies.
type Config struct {
	URL      string
	MaxConns int32
	// Rules decide what a report does to its job, and whether a failed
	// attempt runs again, and when. A store without them refuses, with
	// ErrNoRules, to apply a report or fail an attempt.
	Rules records.Rules
	// Pooled says URL leads to a connection pooler in transaction mode
	// (ThroughPooler): statements are then sent without server-side
	// prepared statements, unless URL's default_query_exec_mode says
	// otherwise.
	Pooled bool
	// Recovered, when set, hears of the jobs that a recovery (the
	// watchdog's, a worker's registration or departure) took out of
	// running, with their trace context when they carry one, and why:
	// "unacked_delivery", "expired_lease", "timed_out_job",
	// "dead_worker", "worker_left", "worker_restarted".
	Recovered func(reason string, jobs []RecoveredJob)
}

// Open connects to the database and checks that it answers.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parsing database url: %w", err)
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	} else {
		// Hot statements are grouped, one group of each kind in flight;
		// the rest is for the locked paths and the other commands.
		pc.MaxConns = 8
	}
	pc.ConnConfig.ConnectTimeout = 5 * time.Second
	if cfg.Pooled && !execModeChosen(cfg.URL) {
		// A named prepared statement lives on one server connection, which
		// the pooler gives to another client after each transaction. The
		// statements' descriptions are cached here instead, so each still
		// takes one round trip, but PostgreSQL plans it at every call.
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "agq"
	if !cfg.Pooled {
		// agq's statements are short, and JIT compilation is not: a
		// recursive walk's estimate for a chain of 5,000 jobs passed
		// jit_above_cost, and compiling took 560 ms of a 600 ms settling
		// whose work took 5. A SET, not a startup parameter, which a
		// proxy may refuse. Through a pooler in transaction mode a
		// session's settings do not hold: there the hot statements
		// (hotQueryOn) and the graph's transactions (noJIT) turn it off
		// for themselves.
		pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, `SET jit = off`)
			return err
		}
	}
	// Connections idle for a while are closed: a node whose clients are all
	// blocked holds no more than its LISTEN and leader connections and the
	// one its sweeps use.
	pc.MaxConnIdleTime = 10 * time.Second
	// The check only closes what idled too long (no round trip): checked
	// every second, nothing idles much past the ten.
	pc.HealthCheckPeriod = time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("creating pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to database: %w", err)
	}
	return &Store{shared: &shared{Pool: pool, rules: cfg.Rules, recovered: cfg.Recovered, pooled: cfg.Pooled}, ns: records.DefaultNamespace}, nil
}

// Background returns a store for the leader's background services — the
// watchdog and the scheduler sweep every second — on one connection of its
// own, so that the client pool can close every connection while clients
// are idle. Close it apart from s.
func (s *Store) Background(ctx context.Context) (*Store, error) {
	pc := s.Pool.Config().Copy()
	pc.MaxConns, pc.MinConns = 1, 0
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("creating pool: %w", err)
	}
	return &Store{shared: &shared{Pool: pool, rules: s.rules, recovered: s.recovered}, ns: records.DefaultNamespace}, nil
}

// Close closes the pool.
func (s *Store) Close() { s.Pool.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.Pool.Ping(ctx); err != nil {
		return interpretError(err)
	}
	return nil
}

// isUniqueViolation reports whether err is PostgreSQL refusing a row whose
// key a unique index holds already.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// interpretError maps pgx and PostgreSQL errors to the domain errors.
// Every failure that comes from the database's availability — a connection
// refused, reset, closed or timed out, a server shutting down, starting up
// or out of connections — is ErrUnavailable, so that clients are told to
// retry; the original error stays in the chain.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return records.ErrNotFound
	}
	var connErr *pgconn.ConnectError
	if (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && !errors.As(err, &connErr) {
		// The caller's deadline or end met a statement under way: pgx
		// reports it as a timeout of the connection, but the database
		// may be fine. (Not so when no connection could be made.)
		return err
	}
	if errors.Is(err, records.ErrUnavailable) || errors.Is(err, records.ErrNotFound) || errors.Is(err, records.ErrConflict) || errors.Is(err, records.ErrInvalidInput) {
		return err // interpreted already
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23505": // unique_violation
			return fmt.Errorf("%w: %s", records.ErrConflict, pgErr.ConstraintName)
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", // admin or crash shutdown, cannot connect now
			pgErr.Code == "53300", // too many connections
			pgErr.Code == "25006": // read-only transaction: a standby, or a primary being demoted
			return fmt.Errorf("%w: %s: %w", records.ErrUnavailable, pgErr.Message, err)
		case pgErr.Code == "22P02", pgErr.Code == "22P05", pgErr.Code == "22021", pgErr.Code == "22026", pgErr.Code == "54000":
			// bad text or json, untranslatable, not in repertoire, too long
			return fmt.Errorf("%w: %s", records.ErrInvalidInput, pgErr.Message)
		}
		return err
	}
	if connectionFailed(err) {
		return fmt.Errorf("%w: %w", records.ErrUnavailable, err)
	}
	return err
}

// connectionFailed reports whether err comes from the connection to the
// database rather than from a statement.
func connectionFailed(err error) bool {
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, puddle.ErrClosedPool) || strings.Contains(err.Error(), "conn closed")
}

// storable reports whether PostgreSQL can hold s as text: a name or id
// that cannot be stored names nothing, and is looked up as missing rather
// than sent (PostgreSQL would refuse it with an encoding error).
func storable(s ...string) bool {
	for _, v := range s {
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return false
		}
	}
	return true
}

// DropIdleConns closes the pool's idle connections, after one of them was
// found broken: those idle beside it were most likely broken by the same
// restart, and the next statement should get a fresh one.
func (s *Store) DropIdleConns() { s.Pool.Reset() }

// The hot path's statements (claims, acknowledgements, final reports,
// grouped submissions) take arrays whose length changes with every group.
// PostgreSQL plans such a statement afresh on each call whenever its
// generic plan's estimate looks worse than the custom ones (planning the
// submission cost 250 µs a call, more than running it; a claim's first
// five custom plans on each connection cost 4-8 ms each), while the
// generic plans are as fast at every group size: they run with
// plan_cache_mode force_generic_plan, set for their own transaction. JIT
// compilation is off for them: estimates over tables never analyzed (an
// empty job_types reads as hundreds of rows) can push a statement that
// runs in microseconds past jit_above_cost, and compiling it takes 35 ms.
const (
	genericPlan      = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true)`
	genericPlanAsync = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true),
		set_config('synchronous_commit', 'off', true)`
)

// hotQuery runs one statement of the hot path with a generic plan, calling
// scan (if not nil) for each row it returns; before, when set, runs first
// in the same transaction (a lock, say), so that sql sees what was
// committed until it got it. The settings, before and sql go in one round
// trip and run in one implicit transaction (one Sync): the settings apply
// to that transaction alone, on the pool every other statement uses, and
// an error means nothing of it committed. With async the commit does not
// wait for the WAL flush: for statements whose loss in an operating-system
// crash only repeats work — claims, acknowledgements, progress, wake-up
// notices. Submissions and final transitions always wait for the flush.
func (s *Store) hotQuery(ctx context.Context, async bool, before []*pgx.QueuedQuery, scan func(pgx.Rows) error, sql string, args ...any) error {
	return hotQueryOn(ctx, s.Pool, async, before, scan, sql, args...)
}

// batchSender is the pool, or a transaction.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// hotQueryOn is hotQuery on q: within a transaction when q is one.
func hotQueryOn(ctx context.Context, q batchSender, async bool, before []*pgx.QueuedQuery, scan func(pgx.Rows) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	if async {
		b.Queue(genericPlanAsync)
	} else {
		b.Queue(genericPlan)
	}
	b.QueuedQueries = append(b.QueuedQueries, before...)
	main := b.Queue(sql, args...)
	if scan != nil {
		main.Query(func(rows pgx.Rows) error {
			for rows.Next() {
				if err := scan(rows); err != nil {
					return err
				}
			}
			return rows.Err()
		})
	}
	return q.SendBatch(ctx, b).Close()
}

// noJIT turns JIT off for tx where the connection may have it on (through
// a pooler, see Open): the graph's settlings and walks are recursive
// queries whose estimates pass jit_above_cost.
func (s *Store) noJIT(ctx context.Context, tx pgx.Tx) error {
	if !s.pooled {
		return nil
	}
	_, err := tx.Exec(ctx, `SET LOCAL jit = off`)
	return err
}

// asyncQuery is hotQuery committing without waiting for the WAL flush.
func (s *Store) asyncQuery(ctx context.Context, scan func(pgx.Rows) error, sql string, args ...any) error {
	return s.hotQuery(ctx, true, nil, scan, sql, args...)
}

// asyncCommit runs fn in a transaction whose commit does not wait for the
// WAL flush. It is for writes whose loss in an operating-system crash only
// repeats work and never loses a job: claims (the job is delivered again),
// acknowledgements, progress and lease extensions. Submissions and final
// transitions always wait for the flush.
func (s *Store) asyncCommit(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// DedicatedConnConfig is the configuration of a long-lived connection of
// its own (the LISTEN connection, the leader's lock): TCP keepalives on
// both ends, so that a host that vanished without closing its socket is
// noticed within about a minute — by PostgreSQL, which then releases the
// leader's advisory lock, and by us.
func DedicatedConnConfig(connString string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	for k, v := range map[string]string{
		"application_name":        "agq",
		"tcp_keepalives_idle":     "15",
		"tcp_keepalives_interval": "5",
		"tcp_keepalives_count":    "4",
		"tcp_user_timeout":        "45000",
	} {
		cfg.RuntimeParams[k] = v
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	cfg.DialFunc = dialer.DialContext
	return cfg, nil
}
