package pgcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// orphanPollInterval paces the wait for an orphaned postmaster to exit.
const orphanPollInterval = 50 * time.Millisecond

// clearStalePostmaster makes sure no earlier postmaster blocks the start. A
// live postmaster of this cluster can only be an orphan of an agq that died
// (we hold the data dir's flock), so it is shut down. A pid that is dead, or
// reused by an unrelated process, is a stale file that postgres might
// refuse to start over, so it is removed.
func (c *Cluster) clearStalePostmaster() error {
	pidFile := filepath.Join(c.clusterDir, "postmaster.pid")
	pid, err := readPidFile(pidFile)
	if errors.Is(err, fs.ErrNotExist) {
		return c.removeSocketFiles()
	}
	if err != nil {
		c.log.Warn().Err(err).Str("file", pidFile).Msg("removing unreadable postmaster.pid")
	} else {
		ours, err := c.isOurPostmaster(pid)
		if err != nil {
			return err
		}
		if ours {
			c.log.Warn().Int("pid", pid).Msg("shutting down orphaned postgres left by an earlier agq")
			if err := stopOrphan(pid); err != nil {
				return err
			}
		}
	}
	// postgres removes its pid file on a clean exit; this catches the rest.
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale postmaster.pid: %w", err)
	}
	return c.removeSocketFiles()
}

// readPidFile returns the pid on the first line of a postgres lock file.
func readPidFile(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	pid, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("no pid on the first line of %s", path)
	}
	return pid, nil
}

// isOurPostmaster checks that pid is alive and is a postmaster running in
// our cluster dir (the postmaster chdirs to its data dir), so that a pid
// reused after a reboot is never signalled. A live process we may not
// inspect is an error: removing the pid file would disarm postgres's own
// guard against two postmasters on one cluster.
func (c *Cluster) isOurPostmaster(pid int) (bool, error) {
	if !processAlive(pid) {
		return false, nil
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // exited meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("postmaster.pid names running pid %d, which cannot be inspected (%w); "+
			"stop that process or remove %s", pid, err, filepath.Join(c.clusterDir, "postmaster.pid"))
	}
	want, err := filepath.EvalSymlinks(c.clusterDir)
	if err != nil {
		return false, fmt.Errorf("resolving cluster dir: %w", err)
	}
	return cwd == want, nil
}

// processAlive reports whether pid exists and is not a zombie; a zombie has
// exited already and only waits for its parent to reap it.
func processAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain ") ".
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	return data[i+2] != 'Z'
}

// stopOrphan asks for a fast shutdown, then an immediate one. The orphan is
// not our child, so its exit is observed by polling.
func stopOrphan(pid int) error {
	for _, step := range []struct {
		sig     syscall.Signal
		timeout time.Duration
	}{
		{syscall.SIGINT, stopTimeout},
		{syscall.SIGQUIT, quitTimeout},
	} {
		if err := syscall.Kill(pid, step.sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signalling orphaned postgres (pid %d): %w", pid, err)
		}
		if waitForExit(pid, step.timeout) {
			return nil
		}
	}
	return fmt.Errorf("orphaned postgres (pid %d) did not exit on SIGINT or SIGQUIT", pid)
}

func waitForExit(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(orphanPollInterval)
	}
	return true
}

// removeSocketFiles deletes the socket and its lock file. Once no
// postmaster of ours runs, nothing else uses our private socket dir, and a
// socket lock naming a reused pid would make postgres refuse to start.
func (c *Cluster) removeSocketFiles() error {
	for _, name := range []string{socketName + ".lock", socketName} {
		err := os.Remove(filepath.Join(c.socketDir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing stale %s: %w", name, err)
		}
	}
	return nil
}
