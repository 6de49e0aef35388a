package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// HandlerFunc runs one job. Its ctx ends on the job's timeout, on its
// cancellation and when the worker shuts down. A nil error completes the
// job with result (encoded as JSON) as its output; an error fails the
// attempt (retried unless wrapped with Permanent); Snooze puts it back.
type HandlerFunc func(ctx context.Context, j *Job) (result any, err error)

// Capabilities are what a worker offers; a job runs on a worker whose
// capabilities contain all of the job's requires.
type Capabilities struct {
	Tools        []string
	AgenticUnits []string
	Types        []string // the types given to Handle are added
}

// WorkerOptions configure a Worker. Zero values take the defaults named.
type WorkerOptions struct {
	Addr      string // host:port of agq
	WorkerID  string // 1-64 of A-Za-z0-9_-
	Key       string // the worker's key (KEY.CREATE worker <id>)
	TLSConfig *tls.Config
	// Queues in priority order, without the "queue:" prefix (["ready"]).
	Queues       []string
	Capabilities Capabilities
	Concurrency  int // jobs run at once (1)
	Logger       *slog.Logger
	Hostname     string            // os.Hostname()
	Version      string            // sent as agw_version ("client")
	Tags         map[string]string // sent with the registration

	// HeartbeatInterval replaces the interval agq names at registration.
	HeartbeatInterval time.Duration
	// ShutdownGrace is how long running jobs may go on after Run's ctx
	// ended before they are cancelled (30s).
	ShutdownGrace time.Duration
	// AckAfter is how long a job runs before its delivery is acknowledged
	// on its own (10s, under agq's 30s acknowledgement timeout): a job that
	// ends sooner is acknowledged by its final report.
	AckAfter time.Duration
	// PopTimeout is how long one BLMPOP waits (5s).
	PopTimeout time.Duration
	// ReportGrace is how long the reports of the jobs cancelled at the
	// end of ShutdownGrace may take before they are abandoned (15s).
	ReportGrace time.Duration
	// UnregisterTimeout bounds WORKER.UNREGISTER at the end of Run (10s).
	UnregisterTimeout time.Duration
	// BackoffMin and BackoffMax bound the waits after connection errors
	// (1s doubling to 60s, and never more than the heartbeat interval).
	BackoffMin, BackoffMax time.Duration
	// IgnoreCancelChannel leaves job.cancel unsubscribed: cancellations are
	// then heard in heartbeat replies and report replies only (through a
	// proxy without pub/sub, or to hold one connection fewer).
	IgnoreCancelChannel bool
	// HeartbeatStats, when set, is what each heartbeat sends as its stats
	// (encoded as JSON), given the worker's own; else those are sent.
	HeartbeatStats func(WorkerStats) any
}

// WorkerStats are a worker's counts, sent with each heartbeat.
type WorkerStats struct {
	ActiveJobs         int64 `json:"active_jobs"`          // jobs held: running, or their final report on its way
	CompletedJobsTotal int64 `json:"completed_jobs_total"` // handlers that returned no error
	FailedJobsTotal    int64 `json:"failed_jobs_total"`    // failed attempts, those ended by a shutdown included
	UptimeSeconds      int64 `json:"uptime_seconds"`
}

// Worker runs jobs from agq. Create it with NewWorker, add handlers with
// Handle, then call Run.
type Worker struct {
	opts     WorkerOptions
	log      *slog.Logger
	handlers map[string]HandlerFunc
	fallback HandlerFunc
	started  time.Time

	rdb     *redis.Client // registration, heartbeats, reports, steps
	poppers [2]*popper    // made by NewWorker, connected by Run
	popped  chan struct{} // the first pop loop got a full batch (capacity 1)

	reg      registration
	interval atomic.Int64 // heartbeat interval, ns

	mu         sync.Mutex
	free       int                    // slots without a running handler
	unreported int                    // final reports not answered yet
	running    map[string]*runningJob // by job id, until agq has the final report

	reports batchQueue[*pendingReport]
	// stepCalls are the slots' STEP.* calls waiting for a pipeline.
	stepCalls batchQueue[*pendingCall]

	idleSlots chan delivery // a job for a slot goroutine waiting for one
	slotsEnd  chan struct{} // closed when Run returns: idle slot goroutines end

	completed, failed atomic.Int64

	popCtx    context.Context // ends when popping stops (shutdown or drain)
	stopPop   context.CancelFunc
	popOnce   sync.Once
	jobsCtx   context.Context // parent of every handler's ctx
	stopJobs  context.CancelCauseFunc
	reportCtx context.Context // ends when the last reports are abandoned
	stopRep   context.CancelFunc
	fatal     chan error // a refusal that ends Run (NOPERM)
	fatalOnce sync.Once
	now       chan struct{} // closed by StopNow
	nowOnce   sync.Once
	jobs      sync.WaitGroup
}

// NewWorker checks opts and prepares a worker; nothing connects until Run.
func NewWorker(opts WorkerOptions) (*Worker, error) {
	opts.Concurrency = cmp.Or(opts.Concurrency, 1)
	opts.ShutdownGrace = cmp.Or(opts.ShutdownGrace, 30*time.Second)
	opts.AckAfter = cmp.Or(opts.AckAfter, 10*time.Second)
	opts.PopTimeout = cmp.Or(opts.PopTimeout, 5*time.Second)
	opts.ReportGrace = cmp.Or(opts.ReportGrace, 15*time.Second)
	opts.UnregisterTimeout = cmp.Or(opts.UnregisterTimeout, 10*time.Second)
	opts.BackoffMin = cmp.Or(opts.BackoffMin, time.Second)
	opts.BackoffMax = cmp.Or(opts.BackoffMax, time.Minute)
	opts.Version = cmp.Or(opts.Version, "client")
	if len(opts.Queues) == 0 {
		opts.Queues = []string{"ready"}
	}
	if opts.Hostname == "" {
		opts.Hostname, _ = os.Hostname()
		opts.Hostname = cmp.Or(opts.Hostname, "unknown")
	}
	switch {
	case opts.Addr == "":
		return nil, errors.New("client: no server address")
	case opts.WorkerID == "":
		return nil, errors.New("client: no worker id")
	case opts.Key == "":
		return nil, errors.New("client: no key")
	case opts.Concurrency < 1 || opts.Concurrency > 1000:
		return nil, errors.New("client: concurrency must be 1 to 1000")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Worker{
		opts:      opts,
		log:       log.With("worker_id", opts.WorkerID),
		handlers:  map[string]HandlerFunc{},
		free:      opts.Concurrency,
		running:   map[string]*runningJob{},
		poppers:   [2]*popper{{blocking: true, freed: make(chan struct{}, 1)}, {freed: make(chan struct{}, 1)}},
		popped:    make(chan struct{}, 1),
		idleSlots: make(chan delivery),
		slotsEnd:  make(chan struct{}),
		reports:   newBatchQueue[*pendingReport](maxReportBatch),
		stepCalls: newBatchQueue[*pendingCall](maxStepCalls),
		fatal:     make(chan error, 1),
		now:       make(chan struct{}),
	}
	w.started = time.Now()
	w.popCtx, w.stopPop = context.WithCancel(context.Background())
	w.jobsCtx, w.stopJobs = context.WithCancelCause(context.Background())
	w.reportCtx, w.stopRep = context.WithCancel(context.Background())
	w.interval.Store(int64(cmp.Or(opts.HeartbeatInterval, 30*time.Second)))
	w.reg.stale.Store(1) // not registered yet
	return w, nil
}

// Handle runs jobs of type jobType with h.
func (w *Worker) Handle(jobType string, h HandlerFunc) { w.handlers[jobType] = h }

// HandleDefault runs jobs of types without a handler of their own.
func (w *Worker) HandleDefault(h HandlerFunc) { w.fallback = h }

func newRedis(addr, user, key string, tlsConfig *tls.Config, poolSize int, readTimeout time.Duration) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:        addr,
		Username:    user,
		Password:    key,
		ClientName:  user,
		TLSConfig:   tlsConfig,
		PoolSize:    poolSize,
		ReadTimeout: readTimeout,
		// The worker retries on its own schedule and must see each lost
		// connection: agq may have restarted or declared it dead meanwhile.
		MaxRetries:               -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Run works until ctx ends, then drains: it pops nothing more, lets the
// running jobs finish within ShutdownGrace, cancels and reports the rest,
// and unregisters. It returns an error when agq refuses the worker (a
// wrong key, an id of another key); a drained worker returns nil. A
// Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	w.rdb = newRedis(w.opts.Addr, w.opts.WorkerID, w.opts.Key, w.opts.TLSConfig, min(w.opts.Concurrency, 32)+8, 30*time.Second)
	for _, p := range w.poppers {
		p.conn = newRedis(w.opts.Addr, w.opts.WorkerID, w.opts.Key, w.opts.TLSConfig, 1, 0)
	}
	defer w.rdb.Close()
	defer w.stopRep()
	defer w.stopJobs(ErrShuttingDown)
	defer w.endPopping()
	defer close(w.slotsEnd)

	w.log.Info("worker starting", "addr", w.opts.Addr, "queues", w.opts.Queues, "concurrency", w.opts.Concurrency)
	if err := w.registerAtStart(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	bgCtx, stopBG := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { w.heartbeatLoop(bgCtx) })
	if !w.opts.IgnoreCancelChannel {
		bg.Go(func() { w.cancelListener(bgCtx) })
	}
	var rep, steps sync.WaitGroup
	rep.Go(w.reporter)
	steps.Go(w.stepCaller)
	var pops sync.WaitGroup
	pops.Go(func() { w.popLoop(w.poppers[0]) })
	if w.opts.Concurrency > 1 {
		pops.Go(func() { w.popLoop(w.poppers[1]) })
	}

	var fatal error
	select {
	case <-ctx.Done():
	case fatal = <-w.fatal:
		w.log.Error("agq refused this worker; stopping", "error", fatal)
	}
	w.endPopping()
	pops.Wait()
	w.drain(fatal != nil)
	w.stepCalls.close()
	steps.Wait()
	stopBG()
	bg.Wait()
	w.reports.close()
	rep.Wait()
	if fatal == nil {
		w.unregister()
	}
	w.log.Info("worker stopped", "completed_jobs_total", w.completed.Load(), "failed_jobs_total", w.failed.Load())
	return fatal
}

// endPopping stops the pop loop: closing its connection cuts a blocked
// BLMPOP off, and agq neither delivers nor loses a job to a client that
// leaves while blocked.
func (w *Worker) endPopping() {
	w.popOnce.Do(func() {
		w.stopPop()
		for _, p := range w.poppers {
			if p.conn != nil {
				p.conn.Close()
			}
		}
	})
}

// drain waits for the running jobs up to the grace, then cancels them and
// waits for their reports a little longer.
func (w *Worker) drain(now bool) {
	done := make(chan struct{})
	go func() { w.jobs.Wait(); close(done) }()
	if !now {
		w.log.Info("draining: no new jobs; waiting for the running ones", "active_jobs", w.active(), "grace", w.opts.ShutdownGrace)
		grace := time.NewTimer(w.opts.ShutdownGrace)
		defer grace.Stop()
		select {
		case <-done:
			return
		case <-grace.C:
		case <-w.now:
		}
	}
	w.log.Warn("cancelling the jobs still running", "job_ids", w.runningIDs())
	w.stopJobs(ErrShuttingDown)
	last := time.NewTimer(w.opts.ReportGrace)
	defer last.Stop()
	select {
	case <-done:
	case <-last.C:
		w.log.Error("giving up reporting the cancelled jobs; agq re-queues them when the worker unregisters", "job_ids", w.runningIDs())
		w.stopRep()
		<-done
	}
}

func (w *Worker) unregister() {
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.UnregisterTimeout)
	defer cancel()
	b := w.newBackoff()
	for {
		err := w.rdb.Do(ctx, "WORKER.UNREGISTER", w.opts.WorkerID).Err()
		switch classify(err) {
		case outcomeOK:
			w.log.Info("unregistered")
			return
		case outcomeConn:
			if sleep(ctx, b.Next()) {
				continue
			}
		}
		w.log.Warn("could not unregister; agq declares the worker dead after missed heartbeats", "error", err)
		return
	}
}

// StopNow ends the wait for running jobs during a drain: they are
// cancelled and reported at once (an operator's second interrupt).
func (w *Worker) StopNow() { w.nowOnce.Do(func() { close(w.now) }) }

// Draining reports whether the worker takes no more jobs: Run's ctx
// ended, or agq asked it to drain.
func (w *Worker) Draining() bool { return w.popCtx.Err() != nil }

// Stats are the worker's counts now.
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{ActiveJobs: int64(w.active()), CompletedJobsTotal: w.completed.Load(), FailedJobsTotal: w.failed.Load(),
		UptimeSeconds: int64(time.Since(w.started).Seconds())}
}

func (w *Worker) fail(err error) {
	w.fatalOnce.Do(func() { w.fatal <- err })
}

func (w *Worker) active() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

func (w *Worker) runningIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]string, 0, len(w.running))
	for id := range w.running {
		ids = append(ids, id)
	}
	return ids
}

// cancelJob ends a running job's ctx with cause; it reports whether this
// worker runs the job.
func (w *Worker) cancelJob(id string, cause error) bool {
	w.mu.Lock()
	r := w.running[id]
	w.mu.Unlock()
	if r == nil {
		return false
	}
	r.cancel(cause)
	return true
}
