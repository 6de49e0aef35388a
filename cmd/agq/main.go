// Command agq is the job-queue server: a Redis-protocol front door over
// PostgreSQL. Run "agq --help" for its settings.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agq/agq/internal/config"
	"github.com/agq/agq/internal/logging"
	"github.com/agq/agq/internal/node"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	setGCPercent()
	migrate := len(args) > 0 && args[0] == "migrate"
	if migrate {
		args = args[1:]
	}
	cfg, err := config.Load(args, os.Getenv, os.Stderr)
	if config.IsHelp(err) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "agq: %v\n", err)
		return 2
	}
	log, err := logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agq: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if migrate {
		if err := node.Migrate(ctx, cfg, log); err != nil {
			log.Error().Err(err).Msg("migration failed")
			return 1
		}
		return 0
	}

	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	n, err := node.Start(startCtx, cfg, log)
	cancel()
	if err != nil {
		log.Error().Err(err).Msg("agq could not start")
		return 1
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for ctx.Err() == nil {
		select {
		case <-hup:
			if err := n.Reload(); err != nil {
				log.Error().Err(err).Msg("reloading TLS certificates; the old ones stay in use")
			}
		case <-ctx.Done():
		}
	}
	log.Info().Msg("shutting down")
	if err := n.Close(); err != nil {
		log.Error().Err(err).Msg("shutdown")
		return 1
	}
	log.Info().Msg("stopped")
	return 0
}
