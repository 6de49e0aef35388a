package pgcluster

import (
	"context"
	"errors"
	"syscall"
	"time"
)

const (
	// restartTimeout bounds one attempt to start postgres again.
	restartTimeout = 60 * time.Second
	// maxRestartWait is the longest pause between failed attempts.
	maxRestartWait = 30 * time.Second
)

// watch starts postgres again when it exits while the cluster is neither
// stopped nor closed (it crashed, or was killed): agq owns it, and nothing
// else would bring it back. Its backends are killed first, so that the new
// postmaster never shares the data dir with an orphan of the old one. The
// attempts go on, further apart, until one succeeds (its own watch takes
// over), Stop or Close.
func (c *Cluster) watch(pm *postmaster) {
	<-pm.exited
	c.mu.Lock()
	// Without the data dir's lock, the cluster may be another agq's now.
	unexpected := c.pm == pm && !c.closed && c.lock.held()
	stops := c.stops
	c.mu.Unlock()
	if !unexpected {
		return
	}
	c.log.Error().Int("pid", pm.pid()).Str("status", exitStatus(pm.waitErr)).
		Msg("postgres exited unexpectedly; starting it again")
	killGroup(pm.pid())
	for wait := time.Second; ; wait = min(2*wait, maxRestartWait) {
		ctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
		err := c.start(ctx, stops)
		cancel()
		if err == nil {
			return
		}
		if c.stoppedSince(stops) {
			return
		}
		c.log.Error().Err(err).Dur("retry_in", wait).Msg("starting postgres again failed")
		time.Sleep(wait)
		if c.stoppedSince(stops) {
			return
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
