// Command agw is agq's reference worker: it registers with an agq server,
// takes jobs from its queues, runs each job's plan as a pipeline of Unix
// tools without a shell, and reports the results. Run "agw --help" for its
// settings.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/agq/agq/cmd/agw/internal/pipeline"
	"github.com/agq/agq/cmd/agw/internal/worker"
	"github.com/agq/agq/internal/logging"
)

// version is agw's version, reported at registration; release builds set
// it with -ldflags "-X main.version=…".
var version = "0.1.0"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

func run(args []string, getenv func(string) string, stderr io.Writer) int {
	s, err := parseSettings(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) || errors.Is(err, errVersion) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "agw: %v\n", err)
		return 2
	}
	log, err := logging.New(stderr, s.LogLevel, s.LogFormat)
	if err != nil {
		fmt.Fprintf(stderr, "agw: %v\n", err)
		return 2
	}
	redis.SetLogger(redisLogger{log.With().Str("component", "go-redis").Logger()})
	if err := protectSecrets(); err != nil {
		log.Warn().Err(err).Msg("could not make agw's memory unreadable to its own jobs")
	}
	tools, ok := offeredTools(s, log)
	if !ok {
		return 2
	}
	if os.Geteuid() == 0 {
		log.Warn().Msg("agw runs as root, and so will every job's tools; run it as an unprivileged user")
	}

	tlsConf, err := s.tlsConfig()
	if err != nil {
		log.Error().Err(err).Msg("agw cannot start")
		return 2
	}
	tracer, stopTracing, err := newTracer(context.Background())
	if err != nil {
		log.Error().Err(err).Msg("tracing")
		return 2
	}
	defer flushSpans(stopTracing, log)
	w, err := worker.New(worker.Config{
		Addr:            s.Addr,
		TLS:             tlsConf,
		WorkerID:        s.WorkerID,
		Key:             s.Key,
		Queues:          s.Queues,
		Concurrency:     s.Concurrency,
		ShutdownTimeout: s.ShutdownTimeout,
		Executor:        &pipeline.Executor{Tools: tools, MaxOutput: s.MaxOutput, KillGrace: s.KillGrace},
		Version:         version,
		Log:             log,
		Tracer:          tracer,
	})
	if err != nil {
		log.Error().Err(err).Msg("agw cannot start")
		return 2
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopSignals := onSignals(log, cancel, w)
	defer stopSignals()
	if err := w.Run(ctx); err != nil {
		log.Error().Err(err).Msg("agw stopped")
		return 1
	}
	return 0
}

// offeredTools finds the configured tools on PATH and warns about what is
// offered; ok is false, the reason logged, when there is nothing to offer.
func offeredTools(s settings, log zerolog.Logger) (_ *pipeline.Toolset, ok bool) {
	tools, missing, err := pipeline.ResolveTools(s.Tools, nil)
	if err != nil {
		log.Error().Err(err).Msg("tools")
		return nil, false
	}
	if len(missing) > 0 {
		log.Warn().Strs("tools", missing).Msg("AGW_TOOLS names tools not found on PATH; they are not offered")
	}
	if tools.Len() == 0 {
		log.Error().Msg("no tool to offer: none of the tools was found on PATH")
		return nil, false
	}
	for _, t := range tools.Names() {
		if pipeline.RunsPrograms(t) {
			log.Warn().Str("tool", t).Msg("offering a tool that runs other programs: job submitters can run anything agw's user can")
		}
	}
	return tools, true
}

// flushSpans exports the last jobs' spans before agw exits.
func flushSpans(stopTracing func(context.Context) error, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stopTracing(ctx); err != nil {
		log.Warn().Err(err).Msg("exporting the last spans")
	}
}

// onSignals drains on the first SIGTERM or SIGINT (cancel stops taking
// jobs) and cancels the running jobs on the second. The returned func
// stops listening.
func onSignals(log zerolog.Logger, cancel context.CancelFunc, w *worker.Worker) (stop func()) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-signals
		log.Info().Str("signal", sig.String()).Msg("signal received: draining")
		cancel()
		sig = <-signals
		log.Warn().Str("signal", sig.String()).Msg("second signal: cancelling running jobs now")
		w.ForceStop()
	}()
	return func() { signal.Stop(signals) }
}

// redisLogger sends go-redis's own messages (failed dials and the like,
// which agw reports itself) to the debug log.
type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug().Msgf(format, v...)
}
