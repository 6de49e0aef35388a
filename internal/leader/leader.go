// Package leader elects one agq node among those sharing a database to run
// the leader-only services (watchdog, scheduler). The leader holds a
// session advisory lock on a dedicated connection: when its process dies
// the connection closes, PostgreSQL releases the lock, and another node
// takes it at its next attempt.
package leader

import (
	"cmp"
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/service"
	"github.com/agq/agq/store"
)

// lockKey is the advisory lock of leadership ("agqlead" in hex).
const lockKey int64 = 0x6167716c656164

// Config configures an Elector.
type Config struct {
	ConnString string
	NodeID     string
	Logger     zerolog.Logger
	// Lead runs while this node leads; its context ends when leadership is
	// lost or the elector stops, and Lead must then return.
	Lead func(ctx context.Context)
	// Interval between attempts to take the lock and checks that it is
	// still held; default 1s.
	Interval time.Duration
}

// Elector campaigns for leadership until stopped.
type Elector struct {
	cfg    Config
	leader atomic.Bool
	base   service.BaseStartStop
}

// New returns an elector; Start begins campaigning.
func New(cfg Config) *Elector {
	cfg.Interval = cmp.Or(cfg.Interval, time.Second)
	return &Elector{cfg: cfg}
}

// IsLeader reports whether this node leads now.
func (e *Elector) IsLeader() bool { return e.leader.Load() }

// Start campaigns in the background until Stop or the end of ctx. It
// never fails: a database that cannot be reached is tried again.
func (e *Elector) Start(ctx context.Context) error {
	e.base.StartFuncs(ctx, e.campaignLoop)
	return nil
}

// Stop ends the campaign, and the leader-only work if this node leads.
func (e *Elector) Stop() { e.base.Stop() }

func (e *Elector) campaignLoop(ctx context.Context) {
	for ctx.Err() == nil {
		if err := e.campaign(ctx); err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn().Err(err).Msg("leader election")
		}
		select {
		case <-ctx.Done():
		case <-time.After(e.cfg.Interval):
		}
	}
}

// campaign connects, waits until it holds the lock, leads while the
// connection proves the lock is still held, and returns when it is not.
func (e *Elector) campaign(ctx context.Context) error {
	cc, err := store.DedicatedConnConfig(e.cfg.ConnString)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	t := time.NewTicker(e.cfg.Interval)
	defer t.Stop()
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lockKey).Scan(&got); err != nil {
			return err
		}
		if got {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	if err := store.LeaderRecord(ctx, conn, e.cfg.NodeID); err != nil {
		return err
	}
	e.cfg.Logger.Info().Msg("this node is now the leader")
	e.leader.Store(true)
	leadCtx, stopLead := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if e.cfg.Lead != nil {
			e.cfg.Lead(leadCtx)
		}
	}()
	defer func() {
		e.leader.Store(false)
		stopLead()
		<-done
		e.cfg.Logger.Info().Msg("this node no longer leads")
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// A session lock lives as long as its connection: a live
		// connection means the lock is still ours.
		pingCtx, cancel := context.WithTimeout(ctx, 3*e.cfg.Interval)
		err := conn.Ping(pingCtx)
		cancel()
		if err != nil {
			return err
		}
	}
}
