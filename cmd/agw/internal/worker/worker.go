// Package worker is agw's side of the agq worker protocol: it registers,
// heartbeats, pops jobs with BRPOP from AGW_CONCURRENCY loops, runs each
// job's plan through a pipeline.Executor, reports it with JOB.UPDATE, and
// drains gracefully. It speaks to agq through go-redis only and imports
// none of the server's packages.
//
// Lifecycle of Run: register (retrying while the server is unreachable) →
// heartbeat loop + pop loops → on ctx's end stop popping, wait up to
// ShutdownTimeout for the running jobs, cancel and report what is left,
// WORKER.UNREGISTER → return.
package worker

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

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

	PopTimeout       time.Duration // BRPOP's timeout (5s)
	BackoffMin       time.Duration // first wait after a connection error (1s)
	BackoffMax       time.Duration // longest wait (60s)
	DefaultHeartbeat time.Duration // when the server names no interval (30s)
	DialTimeout      time.Duration // (5s)
	// ReportGrace is how long, after the shutdown timeout has cancelled
	// the jobs still running, their last reports may take (KillGrace+15s).
	ReportGrace time.Duration
	// UnregisterTimeout bounds WORKER.UNREGISTER at exit (10s).
	UnregisterTimeout time.Duration
	// MaxReportBytes bounds a JOB.UPDATE's JSON: output beyond it is cut
	// (default: 2 MiB − 64 KiB, under agq's default AGQ_MAX_PAYLOAD, or the
	// executor's MaxOutput plus 256 KiB if that is more).
	MaxReportBytes int
}

// Causes of a job's cancellation, seen by the executor through
// context.Cause.
var (
	// errCancelledByServer: a heartbeat reply named the job (cancel=<id>).
	// agq keeps the job running until its holder says it stopped it, so
	// the job is reported cancelled once its processes are gone.
	errCancelledByServer = errors.New("cancelled by agq")
	// errCancelConfirmed: an update about the job was answered
	// -CANCELLED, which has ended the job on agq already.
	errCancelConfirmed = errors.New("cancelled by agq (confirmed in an update reply)")
	errShuttingDown    = errors.New("agw shutting down")
)

// Worker is one agw process's connection to agq.
type Worker struct {
	cfg     Config
	log     zerolog.Logger
	rdb     *redis.Client // registration, heartbeats, reports
	pop     *redis.Client // the pop loops' BRPOPs; closed when popping stops
	sampler *stats.Sampler
	regBody []byte

	// Registration state: lost counts the times the registration was
	// marked stale (a lost connection, "not registered"); registeredAt is
	// the value of lost when the last successful registration began. The
	// worker is registered while they are equal.
	regMu        sync.Mutex // one registration at a time
	lost         atomic.Uint64
	registeredAt atomic.Uint64
	interval     atomic.Int64 // heartbeat interval from the last registration, ns

	jobsMu                    sync.Mutex
	running                   map[string]context.CancelCauseFunc
	active, completed, failed atomic.Int64

	popCtx    context.Context // ends when popping must stop (shutdown or drain)
	endPop    context.CancelFunc
	popOnce   sync.Once
	draining  atomic.Bool
	jobsCtx   context.Context // parent of every job; ended by the shutdown timeout
	stopJobs  context.CancelCauseFunc
	reportCtx context.Context // ends only when the last reports must be abandoned
	stopRep   context.CancelFunc
	force     chan struct{}
	forceOnce sync.Once
}

// New checks cfg and prepares a worker; nothing is connected until Run.
func New(cfg Config) (*Worker, error) {
	cfg.PopTimeout = cmp.Or(cfg.PopTimeout, 5*time.Second)
	cfg.BackoffMin = cmp.Or(cfg.BackoffMin, time.Second)
	cfg.BackoffMax = cmp.Or(cfg.BackoffMax, time.Minute)
	cfg.DefaultHeartbeat = cmp.Or(cfg.DefaultHeartbeat, 30*time.Second)
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, 5*time.Second)
	cfg.UnregisterTimeout = cmp.Or(cfg.UnregisterTimeout, 10*time.Second)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, 5*time.Minute)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 1)
	cfg.Version = cmp.Or(cfg.Version, "0.0.0")
	switch {
	case cfg.Addr == "":
		return nil, errors.New("no server address")
	case cfg.WorkerID == "":
		return nil, errors.New("no worker id")
	case cfg.Key == "":
		return nil, errors.New("no key")
	case len(cfg.Queues) == 0:
		return nil, errors.New("no queues")
	case cfg.Concurrency < 1:
		return nil, errors.New("concurrency must be at least 1")
	case cfg.Executor == nil || cfg.Executor.Tools == nil || cfg.Executor.Tools.Len() == 0:
		return nil, errors.New("no tools to offer")
	}
	cfg.ReportGrace = cmp.Or(cfg.ReportGrace, cmp.Or(cfg.Executor.KillGrace, pipeline.DefaultKillGrace)+15*time.Second)
	cfg.MaxReportBytes = cmp.Or(cfg.MaxReportBytes, max(2<<20-64<<10, cmp.Or(cfg.Executor.MaxOutput, pipeline.DefaultMaxOutput)+256<<10))
	if cfg.Hostname == "" {
		cfg.Hostname, _ = os.Hostname()
		cfg.Hostname = cmp.Or(cfg.Hostname, "unknown")
	}

	w := &Worker{
		cfg:     cfg,
		log:     cfg.Log.With().Str("worker_id", cfg.WorkerID).Logger(),
		sampler: stats.NewSampler(cmp.Or(cfg.Executor.TempDir, os.TempDir())),
		running: map[string]context.CancelCauseFunc{},
		force:   make(chan struct{}),
	}
	w.interval.Store(int64(cfg.DefaultHeartbeat))
	w.lost.Store(1) // not registered yet
	var err error
	if w.regBody, err = registrationBody(cfg); err != nil {
		return nil, err
	}
	w.popCtx, w.endPop = context.WithCancel(context.Background())
	w.jobsCtx, w.stopJobs = context.WithCancelCause(context.Background())
	w.reportCtx, w.stopRep = context.WithCancel(context.Background())
	// Reports: one per running job at a time, plus a heartbeat and a
	// registration.
	w.rdb = newClient(cfg, cfg.Concurrency+4)
	w.pop = newClient(cfg, cfg.Concurrency)
	return w, nil
}

// Run works until ctx ends, then drains and unregisters. It returns an
// error only when the worker cannot start (the server refuses its key or
// its registration); a drained, unregistered worker returns nil.
func (w *Worker) Run(ctx context.Context) error {
	defer w.rdb.Close()
	defer w.stopRep()
	defer w.stopJobs(errShuttingDown)
	defer w.stopPop()
	w.log.Info().Str("addr", w.cfg.Addr).Strs("queues", w.cfg.Queues).Int("concurrency", w.cfg.Concurrency).
		Strs("tools", w.cfg.Executor.Tools.Names()).Msg("agw starting")

	if err := w.registerAtStart(ctx); err != nil {
		if ctx.Err() != nil {
			w.log.Info().Msg("stopped before registering")
			return nil
		}
		return err
	}

	hbCtx, stopHB := context.WithCancel(context.Background())
	var hb sync.WaitGroup
	hb.Go(func() { w.heartbeatLoop(hbCtx) })

	var loops sync.WaitGroup
	for i := range w.cfg.Concurrency {
		loops.Go(func() { w.popLoop(i) })
	}

	<-ctx.Done()
	w.shutdown(&loops)
	stopHB()
	hb.Wait()
	w.unregister()
	w.log.Info().Int64("completed_jobs_total", w.completed.Load()).Int64("failed_jobs_total", w.failed.Load()).Msg("agw stopped")
	return nil
}

// stopPop stops the pop loops: no new BRPOP starts, and those blocked are
// cut off by closing their connections (agq neither delivers nor loses a
// job to a client that leaves while blocked). A job a loop already holds is
// still run and reported.
func (w *Worker) stopPop() {
	w.popOnce.Do(func() {
		w.endPop()
		w.pop.Close()
	})
}

// ForceStop stops waiting for running jobs during a shutdown: they are
// cancelled and reported at once (a second SIGTERM or SIGINT).
func (w *Worker) ForceStop() {
	w.forceOnce.Do(func() { close(w.force) })
}

// shutdown stops popping and waits for the pop loops, which run their jobs
// to the end, up to the shutdown timeout; then it cancels the jobs still
// running, which report themselves failed and retryable, and waits for
// those reports a little longer.
func (w *Worker) shutdown(loops *sync.WaitGroup) {
	w.stopPop()
	done := make(chan struct{})
	go func() {
		loops.Wait()
		close(done)
	}()
	n := w.active.Load()
	w.log.Info().Int64("active_jobs", n).Dur("shutdown_timeout", w.cfg.ShutdownTimeout).Msg("draining: no new jobs; waiting for the running ones")

	timeout := time.NewTimer(w.cfg.ShutdownTimeout)
	defer timeout.Stop()
	select {
	case <-done:
		return
	case <-timeout.C:
		w.log.Warn().Strs("job_ids", w.runningIDs()).Msg("shutdown timeout: cancelling the jobs still running")
	case <-w.force:
		w.log.Warn().Strs("job_ids", w.runningIDs()).Msg("second signal: cancelling the jobs still running")
	}
	w.stopJobs(errShuttingDown)

	grace := time.NewTimer(w.cfg.ReportGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		w.log.Error().Strs("job_ids", w.runningIDs()).Msg("giving up reporting the cancelled jobs; agq re-queues them when agw unregisters")
		w.stopRep()
		<-done
	}
}

// unregister tells the server this worker is gone; it re-queues whatever
// the worker still holds.
func (w *Worker) unregister() {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.UnregisterTimeout)
	defer cancel()
	b := w.newBackoff()
	for {
		err := w.cmdUnregister(ctx)
		switch classify(err) {
		case outcomeOK:
			w.log.Info().Msg("unregistered")
			return
		case outcomeConn:
			if ctx.Err() == nil && sleep(ctx, b.Next()) {
				continue
			}
			w.log.Warn().Err(err).Msg("could not unregister; agq will mark this worker dead after missed heartbeats")
			return
		default:
			w.log.Warn().Err(err).Msg("unregister refused")
			return
		}
	}
}

// registrationBody is WORKER.REGISTER's JSON.
func registrationBody(cfg Config) ([]byte, error) {
	type capabilities struct {
		Tools        []string `json:"tools"`
		AgenticUnits []string `json:"agentic_units"`
		Types        []string `json:"types"`
	}
	return marshal(struct {
		WorkerID          string            `json:"worker_id"`
		Hostname          string            `json:"hostname"`
		Platform          string            `json:"platform"`
		AgwVersion        string            `json:"agw_version"`
		Capabilities      capabilities      `json:"capabilities"`
		MaxConcurrentJobs int               `json:"max_concurrent_jobs"`
		Tags              map[string]string `json:"tags"`
	}{
		WorkerID:          cfg.WorkerID,
		Hostname:          cfg.Hostname,
		Platform:          fmt.Sprintf("%s-%s", runtime.GOOS, runtime.GOARCH),
		AgwVersion:        cfg.Version,
		Capabilities:      capabilities{Tools: cfg.Executor.Tools.Names(), AgenticUnits: []string{}, Types: []string{}},
		MaxConcurrentJobs: cfg.Concurrency,
		Tags:              map[string]string{},
	})
}
