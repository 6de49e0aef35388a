package node

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agq/agq/internal/leader"
	"github.com/agq/agq/internal/service"
	"github.com/agq/agq/scheduler"
	"github.com/agq/agq/watchdog"
)

// newElector makes the elector that campaigns for leadership once
// started; the leader runs the watchdog and the scheduler.
func (n *Node) newElector() {
	sweeps := n.sweeps
	recovered := watchdog.NewRecoveredCounter()
	isLeader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "agq_leader", Help: "1 when this node is the leader running the watchdog and scheduler.",
	}, func() float64 {
		if n.elector != nil && n.elector.IsLeader() {
			return 1
		}
		return 0
	})
	n.registry.MustRegister(recovered, isLeader)
	// Created once, so its metrics are registered once however often this
	// node gains and loses leadership.
	sched := scheduler.New(scheduler.Config{
		Store:      sweeps,
		Logger:     n.log.With().Str("component", "scheduler").Logger(),
		Registerer: n.registry,
	})
	n.elector = leader.New(leader.Config{
		ConnString: n.directURL,
		NodeID:     n.ID,
		Logger:     n.log.With().Str("component", "leader").Logger(),
		Lead: func(ctx context.Context) {
			wd := watchdog.New(watchdog.Config{
				Store:             sweeps,
				Logger:            n.log.With().Str("component", "watchdog").Logger(),
				HeartbeatInterval: n.cfg.HeartbeatInterval,
				AckTimeout:        n.cfg.AckTimeout,
				GoneAfter:         n.cfg.WorkerGoneAfter,
				RetainCompleted:   n.cfg.RetainCompleted,
				RetainFailed:      n.cfg.RetainFailed,
				Recovered:         recovered,
				Settle:            n.engine.SettleDependencies,
				ExpireWaits:       n.engine.ExpireWaits,
				DeleteNamespaces:  n.engine.ContinueNamespaceDeletions,
			})
			leading := []service.Service{wd, sched}
			if err := service.StartAll(ctx, leading...); err != nil {
				n.log.Error().Err(err).Msg("the leader's services did not start")
				return
			}
			<-ctx.Done()
			// Each sweeps on its own; neither waits for the other.
			service.StopAllParallel(leading...)
		},
	})
}

// IsLeader reports whether this node runs the leader-only services now.
func (n *Node) IsLeader() bool { return n.elector != nil && n.elector.IsLeader() }
