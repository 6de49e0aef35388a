// Package scheduler fires cron schedules: each sweep claims the schedules
// whose next fire has come, submits one job per fire and advances the
// schedule, in one transaction per schedule (store.ScheduleFireDue). A
// fire's job id is derived from the schedule and the fire time, so a fire
// is never doubled by a restart, a retry or a second scheduler. After
// downtime, missed fires are replayed up to the schedule's max_catchup.
// It runs on the leader only, but stays correct if two nodes run it.
package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/clock"
	"github.com/agq/agq/internal/service"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// Config configures the scheduler.
type Config struct {
	Store  *store.Store
	Logger zerolog.Logger
	// Registerer receives the metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	Interval   time.Duration // between sweeps; default 1s
	// Clock decides which fires are due, and times the sweeps; default
	// the real clock.
	Clock clock.Clock
	// Batch bounds the schedules fired per sweep, so that a sweep ends;
	// default 1000.
	Batch int
}

// Scheduler runs the sweeps. Start and Stop may alternate any number of
// times (leadership lost and regained) on one Scheduler.
type Scheduler struct {
	cfg     Config
	metrics *metrics
	// Loop runs a sweep at Start and every Interval until Stop or the
	// end of its context.
	*service.Loop
}

// New fills cfg's defaults and creates the metrics.
func New(cfg Config) *Scheduler {
	cfg.Interval = cmp.Or(cfg.Interval, time.Second)
	cfg.Batch = cmp.Or(cfg.Batch, 1000)
	cfg.Clock = clock.Or(cfg.Clock)
	s := &Scheduler{cfg: cfg, metrics: newMetrics(cfg.Registerer, cfg.Logger)}
	s.Loop = service.NewLoop("scheduler", cfg.Interval, cfg.Clock, s.RunOnce, cfg.Logger)
	return s
}

// RunOnce performs one sweep: it fires every schedule due at the clock's
// now, up to Batch of them.
func (s *Scheduler) RunOnce(ctx context.Context) error {
	now := s.cfg.Clock.Now()
	params := store.ScheduleFireDueParams{
		Now:  now,
		Plan: func(sc records.Schedule) (store.FirePlan, error) { return planFires(sc, now) },
	}
	for range s.cfg.Batch {
		res, found, err := s.cfg.Store.ScheduleFireDue(ctx, params)
		if err != nil {
			return fmt.Errorf("firing due schedules: %w", err)
		}
		if !found {
			return nil
		}
		s.record(res, now)
	}
	return nil
}

// planFires is the store's plan callback: the fires of a due schedule.
func planFires(sc records.Schedule, now time.Time) (store.FirePlan, error) {
	spec, err := Parse(sc.Cron, sc.Timezone)
	if err != nil {
		return store.FirePlan{}, err
	}
	if sc.NextFireAt == nil {
		return store.FirePlan{}, errors.New("no next fire") // not claimed by the store
	}
	fires, skipped, next := spec.plan(*sc.NextFireAt, now, sc.MaxCatchup)
	return store.FirePlan{Fires: fires, Skipped: skipped, Next: next}, nil
}

// record logs and counts what a fire did.
func (s *Scheduler) record(res store.FireResult, now time.Time) {
	log := s.cfg.Logger.With().Str("namespace", res.Namespace).Str("schedule", res.Schedule).Logger()
	if res.PlanErr != nil {
		log.Error().Err(res.PlanErr).Msg("schedule cannot fire and is stopped; fix it with SCHEDULE.UPDATE")
		return
	}
	s.metrics.fires.Add(float64(res.Created))
	s.metrics.skipped.Add(float64(res.Skipped))
	for _, at := range res.Fires {
		s.metrics.lag.Observe(now.Sub(at).Seconds())
	}
	switch {
	case res.Skipped > 0:
		log.Warn().Int("fired", res.Created).Int64("skipped", res.Skipped).
			Msg("missed fires beyond max_catchup were skipped")
	case len(res.Fires) > 1:
		log.Info().Int("fired", res.Created).Msg("missed fires replayed")
	default:
		log.Debug().Int("fired", res.Created).Str("queue", res.Queue).Msg("schedule fired")
	}
	if res.Next.IsZero() {
		log.Warn().Msg("schedule fires no more")
	}
}

type metrics struct {
	fires   prometheus.Counter
	skipped prometheus.Counter
	lag     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, log zerolog.Logger) *metrics {
	m := &metrics{
		fires: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agq_schedule_fires_total", Help: "Jobs submitted by schedule fires (manual triggers excluded).",
		}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agq_schedule_skipped_fires_total", Help: "Fires missed during downtime and not replayed (beyond max_catchup).",
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agq_scheduler_lag_seconds",
			Help:    "Time from a fire's due time to the submission of its job.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600, 86400},
		}),
	}
	if reg != nil {
		m.fires = register(reg, m.fires, log)
		m.skipped = register(reg, m.skipped, log)
		m.lag = register(reg, m.lag, log)
	}
	return m
}

// register registers c, or returns the collector registered already under
// its name: a scheduler created again with the same Registerer shares it.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log zerolog.Logger) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	log.Warn().Err(err).Msg("scheduler metric not registered")
	return c
}
