// Package worker is agw's worker: a client.Worker (registration,
// heartbeats, pops, reports, cancellation and drain) whose one handler runs
// each job's plan through a pipeline.Executor and reports the pipeline's
// results. It imports none of the server's packages.
package worker

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/agq/agq/client"
	"github.com/agq/agq/cmd/agw/internal/pipeline"
	"github.com/agq/agq/cmd/agw/internal/stats"
)

// Config is what a Worker is told. Zero durations take the defaults below.
type Config struct {
	Addr            string
	TLS             *tls.Config // nil: plaintext
	WorkerID        string
	Key             string
	Queues          []string // in priority order, without the "queue:" prefix
	Concurrency     int
	ShutdownTimeout time.Duration
	Executor        *pipeline.Executor
	Version         string
	Hostname        string // default os.Hostname()
	Log             zerolog.Logger
	// Tracer records a span per job, child of the span its delivery's
	// traceparent names; nil: no tracing.
	Tracer trace.Tracer

	PopTimeout time.Duration // BLMPOP's timeout (5s)
	BackoffMin time.Duration // first wait after a connection error (1s)
	BackoffMax time.Duration // longest wait (60s)
	// ReportGrace is how long, after the shutdown timeout has cancelled
	// the jobs still running, their last reports may take (KillGrace+15s).
	ReportGrace time.Duration
	// UnregisterTimeout bounds WORKER.UNREGISTER at exit (10s).
	UnregisterTimeout time.Duration
	// IgnoreCancelChannel hears cancellations in heartbeat and update
	// replies only, not on job.cancel.
	IgnoreCancelChannel bool
	// MaxReportBytes bounds a JOB.UPDATE's JSON: output beyond it is cut
	// (default: 2 MiB − 64 KiB, under agq's default AGQ_MAX_PAYLOAD, or the
	// executor's MaxOutput plus 256 KiB if that is more).
	MaxReportBytes int
}

// Worker is one agw process's connection to agq.
type Worker struct {
	cfg     Config
	log     zerolog.Logger
	client  *client.Worker
	sampler *stats.Sampler
}

// New checks cfg and prepares a worker; nothing is connected until Run.
func New(cfg Config) (*Worker, error) {
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, 5*time.Minute)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 1)
	cfg.Version = cmp.Or(cfg.Version, "0.0.0")
	switch {
	case len(cfg.Queues) == 0:
		return nil, errors.New("no queues")
	case cfg.Executor == nil || cfg.Executor.Tools == nil || cfg.Executor.Tools.Len() == 0:
		return nil, errors.New("no tools to offer")
	}
	cfg.ReportGrace = cmp.Or(cfg.ReportGrace, cmp.Or(cfg.Executor.KillGrace, pipeline.DefaultKillGrace)+15*time.Second)
	cfg.MaxReportBytes = cmp.Or(cfg.MaxReportBytes, max(2<<20-64<<10, cmp.Or(cfg.Executor.MaxOutput, pipeline.DefaultMaxOutput)+256<<10))

	w := &Worker{
		cfg:     cfg,
		log:     cfg.Log.With().Str("worker_id", cfg.WorkerID).Logger(),
		sampler: stats.NewSampler(cmp.Or(cfg.Executor.TempDir, os.TempDir())),
	}
	c, err := client.NewWorker(client.WorkerOptions{
		Addr:                cfg.Addr,
		WorkerID:            cfg.WorkerID,
		Key:                 cfg.Key,
		TLSConfig:           cfg.TLS,
		Queues:              cfg.Queues,
		Capabilities:        client.Capabilities{Tools: cfg.Executor.Tools.Names()},
		Concurrency:         cfg.Concurrency,
		Logger:              slog.New(zerologHandler{log: cfg.Log}),
		Hostname:            cfg.Hostname,
		Version:             cfg.Version,
		ShutdownGrace:       cfg.ShutdownTimeout,
		PopTimeout:          cfg.PopTimeout,
		ReportGrace:         cfg.ReportGrace,
		UnregisterTimeout:   cfg.UnregisterTimeout,
		BackoffMin:          cfg.BackoffMin,
		BackoffMax:          cfg.BackoffMax,
		IgnoreCancelChannel: cfg.IgnoreCancelChannel,
		HeartbeatStats: func(s client.WorkerStats) any {
			return w.sampler.Sample(stats.Counters{Active: s.ActiveJobs, Completed: s.CompletedJobsTotal, Failed: s.FailedJobsTotal})
		},
	})
	if err != nil {
		return nil, err
	}
	c.HandleDefault(w.runJob)
	w.client = c
	return w, nil
}

// Run works until ctx ends, then drains: it stops popping, waits up to
// ShutdownTimeout for the running jobs, cancels and reports what is left,
// and unregisters. It returns an error only when agq refuses the worker
// (its key or its registration); a drained worker returns nil.
func (w *Worker) Run(ctx context.Context) error {
	w.log.Info().Str("addr", w.cfg.Addr).Strs("queues", w.cfg.Queues).Int("concurrency", w.cfg.Concurrency).
		Strs("tools", w.cfg.Executor.Tools.Names()).Msg("agw starting")
	return w.client.Run(ctx)
}

// ForceStop stops waiting for running jobs during a shutdown: they are
// cancelled and reported at once (a second SIGTERM or SIGINT).
func (w *Worker) ForceStop() { w.client.StopNow() }
