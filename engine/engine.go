// Package engine is the life of a job: every transition (submit, claim,
// acknowledge, report, snooze, cancel, retry, what becomes of a worker's
// jobs when it registers or leaves), the rules that decide them, the
// groups that let many clients share one statement, the hand-offs to
// waiting pops, the limits on running jobs, and the events each transition
// publishes. The RESP commands and the dashboard both call it, through
// the api.Engine interface it implements; neither knows SQL nor the
// store. Each transition collects its Effects and the engine publishes
// them after the commit, in one place (publish). The records it takes and
// returns are package records', the store's own.
package engine

import (
	"cmp"
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/clock"
	"github.com/agq/agq/internal/tracing"
	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
	"github.com/agq/agq/registry"
	"github.com/agq/agq/store"
)

// Config configures an Engine.
type Config struct {
	// HeartbeatInterval is the workers' interval: a held job's lease is
	// three of them.
	HeartbeatInterval time.Duration
	// AckTimeout is how long a delivery may stay unacknowledged.
	AckTimeout time.Duration
	// MaxSnoozes is how often a job may be snoozed; the next snooze fails it.
	MaxSnoozes int
	// MaxAttempts and JobTimeout are a job's when its submission gives
	// none.
	MaxAttempts int
	JobTimeout  time.Duration
	// CommandTimeout bounds the database work of one transition run off a
	// client's path (a group, a give-back).
	CommandTimeout time.Duration
	Logger         zerolog.Logger
	// Registerer takes the engine's metrics; nil: not registered.
	Registerer prometheus.Registerer
	// MaxParentResults bounds the parents' results a delivery carries,
	// and a page of JOB.PARENTS; default 1 MiB.
	MaxParentResults int64
	// Clock tells the engine's own time (the database keeps the jobs'):
	// when limits were seen, when events happened; nil: the real clock.
	Clock clock.Clock
	// Tracer records the jobs' spans; nil: tracing is off.
	Tracer *tracing.Tracer
	// Presence keeps which workers hold connections to this node; nil:
	// none is kept, and workers are lost by their heartbeats alone.
	Presence *registry.Presence
}

// Engine runs the transitions of jobs and workers, acting in one
// namespace: In gives the same engine acting in another. Everything but
// the namespace and its store is shared by all of them (core).
type Engine struct {
	// Reads are the queries that change nothing: the store answers them
	// with the records it returns everywhere.
	api.Reads
	*core
	// store acts in ns.
	store *store.Store
	ns    string
}

// core is what the engines of every namespace share.
type core struct {
	cfg     Config
	hub     *wakeup.Hub
	log     zerolog.Logger
	clock   clock.Clock
	metrics *metrics
	groups  groups
	// limited remembers the queues with limits this node's claims saw.
	limited limitedPops
	// deep remembers the queues too deep for LPUSH to count on every push.
	deep deepQueues
	// trace is Config.Tracer, nil when tracing is off.
	trace *tracing.Tracer
	// root is the store of the default namespace, for the work that spans
	// namespaces (the groups, the sweeps).
	root *store.Store
	// namespaces is what this node last read of the namespaces.
	namespaces namespaceCache
}

// New builds an engine over st, publishing through hub; it acts in the
// default namespace.
func New(cfg Config, st *store.Store, hub *wakeup.Hub) *Engine {
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, 30*time.Second)
	cfg.AckTimeout = cmp.Or(cfg.AckTimeout, 30*time.Second)
	cfg.MaxSnoozes = cmp.Or(cfg.MaxSnoozes, 100)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 3)
	cfg.JobTimeout = cmp.Or(cfg.JobTimeout, time.Hour)
	cfg.CommandTimeout = cmp.Or(cfg.CommandTimeout, 10*time.Second)
	cfg.MaxParentResults = cmp.Or(cfg.MaxParentResults, 1<<20)
	st = st.In(records.DefaultNamespace)
	e := &Engine{
		Reads: st,
		core: &core{
			cfg:     cfg,
			hub:     hub,
			log:     cfg.Logger,
			clock:   clock.Or(cfg.Clock),
			metrics: newMetrics(cfg.Registerer),
			trace:   cfg.Tracer,
			root:    st,
		},
		store: st,
		ns:    records.DefaultNamespace,
	}
	e.groups = e.newGroups()
	// Jobs that left running, on any node, make room for this node's
	// pops that limits held back.
	wakeup.Listen(hub, wakeup.RoomFreed, func(f records.Room) {
		for _, note := range e.RoomNotes(f) {
			hub.Wake(note)
		}
	})
	// Each node hears a move itself: its own subscribers are told here.
	wakeup.Listen(hub, wakeup.Moved, func(m records.Moved) {
		hub.DeliverLocal(movedMessages(m))
	})
	return e
}

// In is the engine acting in namespace ns.
func (e *Engine) In(ns string) api.Engine { return e.in(ns) }

func (e *Engine) in(ns string) *Engine {
	if ns == e.ns {
		return e
	}
	st := e.store.In(ns)
	return &Engine{Reads: st, core: e.core, store: st, ns: ns}
}

// Namespace is the namespace e acts in.
func (e *Engine) Namespace() string { return e.ns }

// Lease is how long a held job survives without a heartbeat.
func (e *Engine) Lease() time.Duration { return 3 * e.cfg.HeartbeatInterval }

// HeartbeatInterval is the interval workers are told to heartbeat at.
func (e *Engine) HeartbeatInterval() time.Duration { return e.cfg.HeartbeatInterval }

// offPath is a context for work done off any client's path.
func (e *Engine) offPath() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.cfg.CommandTimeout)
}

// DashboardSecret is the dashboard's signing secret, shared by every
// node: the one stored, or fresh when none is.
func (e *Engine) DashboardSecret(ctx context.Context, fresh []byte) ([]byte, error) {
	return e.store.DashboardSecret(ctx, fresh)
}

// DropIdleConns closes the pool's idle connections: a command that failed
// on a broken one runs again on a fresh one.
func (e *Engine) DropIdleConns() { e.store.DropIdleConns() }

type metrics struct {
	groupSize *prometheus.HistogramVec
	handoffs  prometheus.Counter
	// jobs counts jobs submitted and started, by namespace.
	jobs *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		groupSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agq_group_size",
			Help:    "Requests served together by one statement: submissions, final reports, acknowledgements, pops.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 500},
		}, []string{"kind"}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agq_handoffs_total", Help: "Submitted jobs handed straight to a worker waiting in a pop, in the submission's own transaction.",
		}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agq_jobs_total", Help: "Jobs submitted (created, not re-sent) and started (delivered to a worker), by namespace, on this node.",
		}, []string{"namespace", "event"}),
	}
	if reg != nil {
		reg.MustRegister(m.groupSize, m.handoffs, m.jobs)
	}
	return m
}

var _ api.Engine = (*Engine)(nil)
