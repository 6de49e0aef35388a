// Package watchdog recovers work whose holders stopped answering and keeps
// the jobs table small: deliveries nobody acknowledged go back to their
// queues, workers silent for three heartbeat intervals, or none of whose
// connections is left for GoneAfter, become DEAD and lose their jobs,
// running jobs past their lease or timeout have that attempt
// failed. Finished jobs move into history a few seconds after they end,
// in batches, and history drops its periods once they expire (their
// namespace's retention, or the server's). Its sweeps span namespaces:
// each job and worker is handled in its own. Every recovery re-checks the job's state in the same statement,
// so a job that just moved on is left alone. It runs on the leader only.
package watchdog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/clock"
	"github.com/agq/agq/internal/service"
	"github.com/agq/agq/store"
)

// Config configures the watchdog.
type Config struct {
	Store  *store.Store
	Logger zerolog.Logger
	// HeartbeatInterval is the workers' interval; they are dead after 3.
	HeartbeatInterval time.Duration
	// AckTimeout is how long a delivery may stay unacknowledged; default 30s.
	AckTimeout time.Duration
	// GoneAfter is how long a worker may have no connection left to any
	// node (registry.Presence) before it is lost; negative: never.
	// Default 10s; it is also the nodes' start-up grace, in which the
	// connections they lose do not count.
	GoneAfter time.Duration
	// NodeSilence is how long a node may go unseen and still be taken
	// to run; default 5s.
	NodeSilence time.Duration
	// RetainCompleted and RetainFailed (also for cancelled jobs) are how
	// long finished jobs are kept, in every namespace that sets no
	// retention of its own (NAMESPACE.CONFIG RETAINCOMPLETED,
	// RETAINFAILED); defaults 7 and 30 days.
	RetainCompleted time.Duration
	RetainFailed    time.Duration
	Interval        time.Duration // between sweeps; default 1s
	RetentionEvery  time.Duration // between retention passes; default 1m
	Batch           int           // rows per statement; default 500
	// HistoryAfter is how long a finished job stays among the unfinished
	// before it moves into history; default 5s.
	HistoryAfter time.Duration
	// HistoryBatch is how many finished jobs one statement moves; default
	// 5,000.
	HistoryBatch int
	// Settle settles up to limit marks of jobs after other jobs that a
	// crash or a path without settling left (engine.SettleDependencies),
	// publishing what it released; optional.
	Settle func(ctx context.Context, limit int) (int, error)
	// ExpireWaits ends the step waits whose deadline passed
	// (engine.ExpireWaits), publishing the jobs it woke; optional.
	ExpireWaits func(ctx context.Context, limit int) (int, error)
	// DeleteNamespaces carries on deleting the namespaces whose deletion
	// a crash left half done, up to limit batches
	// (engine.ContinueNamespaceDeletions); optional.
	DeleteNamespaces func(ctx context.Context, limit int) (int, error)
	// Recovered counts recoveries by kind; optional.
	Recovered *prometheus.CounterVec
	// Clock times the grace windows and retention passes, and the sweeps;
	// default the real clock. The ages of jobs and workers are the
	// database's.
	Clock clock.Clock
}

// Watchdog runs the sweeps.
type Watchdog struct {
	cfg           Config
	lastRetention time.Time
	// Loop runs a sweep at Start and every Interval until Stop or the
	// end of its context.
	*service.Loop

	// heardSince is when this watchdog could last start hearing workers:
	// its start (a new leader, an agq restart) or the end of a database
	// outage it saw. Silence before it is not the workers' fault: while
	// agq or PostgreSQL was away their heartbeats and acknowledgements
	// failed, so nothing is recovered for lack of them until a full
	// window has passed since.
	heardSince time.Time
	outage     bool
}

// NewRecoveredCounter is the counter Config.Recovered expects, to be
// registered once per process.
func NewRecoveredCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agq_watchdog_recovered_total",
		Help: "Jobs and workers the watchdog recovered or removed, by kind.",
	}, []string{"kind"})
}

// New fills defaults.
func New(cfg Config) *Watchdog {
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, 30*time.Second)
	cfg.AckTimeout = cmp.Or(cfg.AckTimeout, 30*time.Second)
	cfg.GoneAfter = cmp.Or(cfg.GoneAfter, 10*time.Second)
	cfg.NodeSilence = cmp.Or(cfg.NodeSilence, 5*time.Second)
	cfg.RetainCompleted = cmp.Or(cfg.RetainCompleted, 7*24*time.Hour)
	cfg.RetainFailed = cmp.Or(cfg.RetainFailed, 30*24*time.Hour)
	cfg.Interval = cmp.Or(cfg.Interval, time.Second)
	cfg.RetentionEvery = cmp.Or(cfg.RetentionEvery, time.Minute)
	cfg.Batch = cmp.Or(cfg.Batch, 500)
	cfg.HistoryAfter = cmp.Or(cfg.HistoryAfter, 5*time.Second)
	cfg.HistoryBatch = cmp.Or(cfg.HistoryBatch, 5000)
	if cfg.Recovered == nil {
		cfg.Recovered = NewRecoveredCounter()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	w := &Watchdog{cfg: cfg}
	w.Loop = service.NewLoop("watchdog", cfg.Interval, cfg.Clock, w.RunOnce, cfg.Logger)
	return w
}

// RunOnce performs one sweep of every recovery, and retention when due.
func (w *Watchdog) RunOnce(ctx context.Context) error {
	if err := w.cfg.Store.Ping(ctx); err != nil {
		w.outage = true
		return fmt.Errorf("database unavailable: %w", err)
	}
	now := w.cfg.Clock.Now()
	if w.heardSince.IsZero() || w.outage {
		if w.outage {
			w.cfg.Logger.Info().Msg("database back: workers get a fresh grace before any is declared lost")
		}
		w.heardSince, w.outage = now, false
	}
	heard := now.Sub(w.heardSince)
	var steps []step
	if heard >= w.cfg.AckTimeout {
		steps = append(steps, step{kind: "unacked_delivery", run: func() (int, error) { return w.cfg.Store.JobsRequeueUnacked(ctx, w.cfg.Batch) }})
	}
	if w.cfg.GoneAfter > 0 && heard >= w.cfg.GoneAfter {
		steps = append(steps, step{kind: "gone_worker", run: func() (int, error) { return w.markGone(ctx) }})
	}
	if heard >= 3*w.cfg.HeartbeatInterval {
		steps = append(steps, w.livenessSteps(ctx)...)
	}
	steps = append(steps, step{kind: "timed_out_job", run: func() (int, error) {
		return w.cfg.Store.JobsFailTimedOut(ctx, w.cfg.HeartbeatInterval, w.cfg.Batch)
	}})
	// Settling comes after the recoveries: parents they ended release
	// their children in the same sweep.
	if w.cfg.Settle != nil {
		steps = append(steps, step{kind: "dependency_check", run: func() (int, error) { return w.cfg.Settle(ctx, w.cfg.Batch) }})
	}
	if w.cfg.ExpireWaits != nil {
		steps = append(steps, step{kind: "wait_deadline", run: func() (int, error) { return w.cfg.ExpireWaits(ctx, w.cfg.Batch) }})
	}
	steps = append(steps, step{kind: "history_move", batch: w.cfg.HistoryBatch, run: func() (int, error) {
		return w.cfg.Store.HistoryMove(ctx, store.HistoryParams{After: w.cfg.HistoryAfter, RetentionParams: store.RetentionParams{
			Completed: w.cfg.RetainCompleted, Failed: w.cfg.RetainFailed, Limit: w.cfg.HistoryBatch,
		}})
	}})
	// Once a sweep, however much is left: a changed retention's walk of
	// history must not hold the recoveries up.
	steps = append(steps, step{kind: "history_reexpire", batch: math.MaxInt, run: func() (int, error) {
		return w.cfg.Store.HistoryReexpire(ctx, store.RetentionParams{
			Completed: w.cfg.RetainCompleted, Failed: w.cfg.RetainFailed, Limit: reexpireReadsPerSweep,
		})
	}})
	if now.Sub(w.lastRetention) >= w.cfg.RetentionEvery {
		steps = append(steps, step{kind: "retention_expire", batch: historyPeriodsAtOnce, run: func() (int, error) {
			return w.cfg.Store.HistoryExpire(ctx, historyPeriodsAtOnce)
		}}, step{kind: "forgotten_node", run: func() (int, error) { return w.cfg.Store.NodesForget(ctx, forgetNodesAfter) }},
			step{kind: "submission_counts", run: func() (int, error) { return 0, w.cfg.Store.SubmissionsSweep(ctx) }})
	}
	if w.cfg.DeleteNamespaces != nil {
		// A few batches a sweep, every sweep: the recoveries never wait
		// long behind a large namespace's rows.
		steps = append(steps, step{kind: "namespace_delete", run: func() (int, error) { return w.cfg.DeleteNamespaces(ctx, 5) }})
	}
	return w.run(steps)
}

// step is one recovery: it returns how many rows it handled, a full batch
// (batch, or Config.Batch) when there may be more.
type step struct {
	kind  string
	run   func() (int, error)
	batch int
}

// reexpireReadsPerSweep is how many jobs of history a sweep reads to apply
// a changed retention (HistoryReexpire).
const reexpireReadsPerSweep = 20000

// historyPeriodsAtOnce is how many expired history periods one retention
// pass drops.
const historyPeriodsAtOnce = 10

// livenessSteps declare silent workers dead and take back expired leases.
func (w *Watchdog) livenessSteps(ctx context.Context) []step {
	return []step{
		{kind: "dead_worker", run: func() (int, error) {
			dead, err := w.cfg.Store.WorkersMarkDead(ctx, 3*w.cfg.HeartbeatInterval, w.cfg.Batch)
			for _, id := range dead {
				w.cfg.Logger.Warn().Str("worker", id).Msg("worker missed three heartbeats: DEAD, its jobs re-queued")
			}
			return len(dead), err
		}},
		{kind: "expired_lease", run: func() (int, error) { return w.cfg.Store.JobsRecoverExpiredLeases(ctx, w.cfg.Batch) }},
	}
}

// forgetNodesAfter is how long a node that died without leaving keeps its
// rows: one silent longer is not coming back under that id.
const forgetNodesAfter = 10 * time.Minute

// markGone declares lost the workers none of whose connections is left.
func (w *Watchdog) markGone(ctx context.Context) (int, error) {
	dead, err := w.cfg.Store.WorkersMarkGone(ctx, store.GoneParams{After: w.cfg.GoneAfter, Grace: w.cfg.GoneAfter,
		NodeSilence: w.cfg.NodeSilence, Limit: w.cfg.Batch})
	for _, id := range dead {
		w.cfg.Logger.Warn().Str("worker", id).Dur("after", w.cfg.GoneAfter).
			Msg("worker's connections all closed and it did not come back: DEAD, its jobs re-queued")
	}
	return len(dead), err
}

// run runs the steps; one failing must not keep the others from running.
func (w *Watchdog) run(steps []step) error {
	var errs []error
	for _, step := range steps {
		// A full batch means there may be more: repeat, within reason.
		full := false
		for range 100 {
			n, err := step.run()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", step.kind, err))
				break
			}
			if n > 0 {
				w.cfg.Recovered.WithLabelValues(step.kind).Add(float64(n))
				w.cfg.Logger.Info().Str("kind", step.kind).Int("count", n).Msg("watchdog")
			}
			if full = n >= cmp.Or(step.batch, w.cfg.Batch); !full {
				break
			}
		}
		if step.kind == "retention_expire" && !full {
			// Still behind after 100 batches: go on at the next sweep
			// rather than in a minute.
			w.lastRetention = w.cfg.Clock.Now()
		}
	}
	return errors.Join(errs...)
}
