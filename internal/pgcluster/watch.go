package pgcluster

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/agq/agq/internal/service"
)

const (
	// restartTimeout bounds one attempt to start postgres again.
	restartTimeout = 60 * time.Second
	// maxRestartWait is the longest pause between failed attempts.
	maxRestartWait = 30 * time.Second
)

// watch is the service that starts postgres again when it exits while the
// cluster is neither stopped nor closed (it crashed, or was killed): agq
// owns it, and nothing else would bring it back. Start begins it once
// postgres is ready; Stop, Crash and Close stop it, and so end the
// attempts of a restart in progress.
type watch struct {
	c    *Cluster
	base service.BaseStartStop
}

var _ service.Service = (*watch)(nil)

// Start watches the running postgres until Stop. It never fails.
func (w *watch) Start(ctx context.Context) error {
	w.base.StartFuncs(ctx, w.run)
	return nil
}

// Stop ends the watch, and any restart it has under way, and waits.
func (w *watch) Stop() { w.base.Stop() }

// run waits for the running postmaster to exit, restarts it if the exit
// was unexpected, and then watches the new one.
func (w *watch) run(ctx context.Context) {
	c := w.c
	for {
		c.mu.Lock()
		pm := c.pm
		c.mu.Unlock()
		if pm == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-pm.exited:
		}
		if !w.restart(ctx, pm) {
			return
		}
	}
}

// restart starts postgres again after pm exited, if that was unexpected.
// Its backends are killed first, so that the new postmaster never shares
// the data dir with an orphan of the old one. The attempts go on, further
// apart, until one succeeds (true), or a Stop or Close comes (false).
func (w *watch) restart(ctx context.Context, pm *postmaster) bool {
	c := w.c
	c.mu.Lock()
	// Without the data dir's lock, the cluster may be another agq's now.
	unexpected := c.pm == pm && !c.closed && c.lock.held()
	stops := c.stops
	c.mu.Unlock()
	if !unexpected {
		return false
	}
	c.log.Error().Int("pid", pm.pid()).Str("status", exitStatus(pm.waitErr)).
		Msg("postgres exited unexpectedly; starting it again")
	killGroup(pm.pid())
	for wait := time.Second; ; wait = min(2*wait, maxRestartWait) {
		attemptCtx, cancel := context.WithTimeout(ctx, restartTimeout)
		err := c.start(attemptCtx, stops)
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil || c.stoppedSince(stops) {
			return false
		}
		c.log.Error().Err(err).Dur("retry_in", wait).Msg("starting postgres again failed")
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		if c.stoppedSince(stops) {
			return false
		}
	}
}

// stoppedSince reports whether the cluster was closed, or stopped since
// the count of stops was stops.
func (c *Cluster) stoppedSince(stops int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed || c.stops != stops
}

// killGroup kills what is left of a postmaster's process group (its
// backends: see Setpgid) and waits, up to quitTimeout, until none is left.
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	deadline := time.Now().Add(quitTimeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(orphanPollInterval)
	}
}
