// Package watchdog recovers jobs whose holders stopped answering: deliveries
// nobody acknowledged go back to their queues. Every recovery re-checks the
// job's state in the same statement, so a job that just moved is left alone.
package watchdog

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/agq/agq/store"
)

// Config configures the watchdog.
type Config struct {
	Store    *store.Store
	Logger   zerolog.Logger
	Interval time.Duration // between sweeps; default 1s
	Batch    int           // rows per statement; default 500
}

// Watchdog runs the recovery sweeps.
type Watchdog struct {
	cfg    Config
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New validates cfg and fills defaults.
func New(cfg Config) *Watchdog {
	cfg.Interval = cmp.Or(cfg.Interval, time.Second)
	cfg.Batch = cmp.Or(cfg.Batch, 500)
	return &Watchdog{cfg: cfg}
}

// Start runs sweeps every Interval until Stop.
func (w *Watchdog) Start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(ctx)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(w.cfg.Interval)
		defer t.Stop()
		for {
			if err := w.RunOnce(ctx); err != nil && ctx.Err() == nil {
				w.cfg.Logger.Warn().Err(err).Msg("watchdog sweep failed")
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the loop and waits for it.
func (w *Watchdog) Stop() {
	if w.cancel != nil {
		w.cancel()
	}
	w.wg.Wait()
}

// RunOnce performs one sweep.
func (w *Watchdog) RunOnce(ctx context.Context) error {
	for {
		n, err := w.cfg.Store.JobsRequeueUnacked(ctx, w.cfg.Batch)
		if err != nil {
			return err
		}
		if n > 0 {
			w.cfg.Logger.Info().Int("jobs", n).Msg("unacknowledged deliveries returned to their queues")
		}
		if n < w.cfg.Batch {
			return nil
		}
	}
}
