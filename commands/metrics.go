package commands

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connections      prometheus.Gauge
	connectionsTotal prometheus.Counter
	rejectedConns    *prometheus.CounterVec
	commands         *prometheus.CounterVec
	latency          *prometheus.HistogramVec
	authFailures     prometheus.Counter
	panics           prometheus.Counter
	retried          prometheus.Counter
	slowSubscribers  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agq_connections", Help: "Client connections currently open.",
		}),
		connectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agq_connections_total", Help: "Client connections accepted.",
		}),
		rejectedConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agq_connections_rejected_total",
			Help: "Connections refused (max_clients) or closed before they authenticated (auth_timeout, unauthenticated_limit, address_limit).",
		}, []string{"reason"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agq_commands_total", Help: "Commands run, by command and result (ok or error).",
		}, []string{"command", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agq_command_duration_seconds",
			Help:    "Time from a command's arrival to its reply, blocking waits included.",
			Buckets: []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"command"}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agq_auth_failures_total", Help: "AUTH and HELLO AUTH attempts refused.",
		}),
		slowSubscribers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agq_slow_subscribers_total", Help: "Subscribers disconnected because they did not read their messages.",
		}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agq_command_retries_total", Help: "Commands run again because their database connection was broken before they were sent.",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agq_command_panics_total", Help: "Command handlers that panicked (answered with an error).",
		}),
	}
	for _, reason := range []string{"max_clients", "auth_timeout", "unauthenticated_limit", "address_limit"} {
		m.rejectedConns.WithLabelValues(reason)
	}
	if reg != nil {
		reg.MustRegister(m.connections, m.connectionsTotal, m.rejectedConns, m.commands, m.latency, m.authFailures, m.panics, m.retried, m.slowSubscribers)
	}
	return m
}
