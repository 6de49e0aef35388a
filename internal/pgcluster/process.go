package pgcluster

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

const (
	// port only names the socket file (.s.PGSQL.5432); there is no TCP port.
	port = 5432

	// stopTimeout is how long a fast shutdown may take before SIGQUIT.
	stopTimeout = 30 * time.Second
	// quitTimeout bounds an immediate shutdown before the group is killed.
	quitTimeout = 10 * time.Second
)

// defaultSettings apply unless Config.Settings overrides them.
var defaultSettings = map[string]string{
	"max_connections": "200",
	// A busy queue's jobs table needs vacuuming within seconds, not the
	// default minute (see migration 008).
	"autovacuum_naptime": "5s",
}

// postmaster is a postgres server started by this process.
type postmaster struct {
	process *os.Process
	// exited is closed once the process has been reaped.
	exited chan struct{}
	// waitErr is cmd.Wait's result; read it only after exited is closed.
	waitErr error
	log     zerolog.Logger
}

// postgresCommand builds the postmaster's command line; stderr goes to
// logFile.
func (c *Cluster) postgresCommand(logFile *os.File) *exec.Cmd {
	args := []string{
		"-D", c.clusterDir,
		"-k", c.socketDir,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=",
	}
	settings := maps.Clone(defaultSettings)
	maps.Copy(settings, c.settings)
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", k+"="+settings[k])
	}

	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), args...)
	cmd.Dir = c.clusterDir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group keeps a terminal's Ctrl-C away from
		// postgres, so agq can stop it in order.
		Setpgid: true,
		// Fast shutdown if agq dies without stopping it.
		Pdeathsig:  syscall.SIGINT,
		Credential: c.runAs.credential(),
	}
	return cmd
}

// startPostmaster starts cmd, tied to this process (StartTied).
func startPostmaster(cmd *exec.Cmd, log zerolog.Logger) (*postmaster, error) {
	pm := &postmaster{exited: make(chan struct{}), log: log}
	err := StartTied(cmd, func() {
		pm.waitErr = cmd.Wait()
		log.Info().Int("pid", cmd.Process.Pid).Str("status", exitStatus(pm.waitErr)).Msg("postgres exited")
		close(pm.exited)
	})
	if err != nil {
		return nil, fmt.Errorf("starting postgres: %w", err)
	}
	pm.process = cmd.Process
	return pm, nil
}

// StartTied starts cmd, whose SysProcAttr.Pdeathsig is to reach it should
// this process die, from a goroutine locked to its OS thread: the signal
// fires when the thread that forked the child exits, not the process, so
// that thread must live exactly as long as the child. Once the child has
// started, the goroutine runs untilExit, which reads what the child
// writes, if anything, and waits for it (cmd.Wait); the thread ends with
// it.
func StartTied(cmd *exec.Cmd, untilExit func()) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		untilExit()
	}()
	return <-started
}

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func (pm *postmaster) pid() int { return pm.process.Pid }

func (pm *postmaster) hasExited() bool {
	select {
	case <-pm.exited:
		return true
	default:
		return false
	}
}

// stop asks for a fast shutdown, escalating to an immediate shutdown and
// finally SIGKILL of the whole process group. It is safe to call more than
// once.
func (pm *postmaster) stop() error { return pm.stopWith(syscall.SIGINT) }

// stopWith stops postgres from the shutdown first asks for: SIGINT (fast),
// or SIGQUIT (immediate: no checkpoint, as after a crash).
func (pm *postmaster) stopWith(first syscall.Signal) error {
	steps := []struct {
		sig     syscall.Signal
		timeout time.Duration
	}{
		{syscall.SIGINT, stopTimeout},
		{syscall.SIGQUIT, quitTimeout},
	}
	if first == syscall.SIGQUIT {
		steps = steps[1:]
	}
	for i, step := range steps {
		if pm.hasExited() {
			return nil
		}
		if i > 0 {
			pm.log.Warn().Int("pid", pm.pid()).Stringer("signal", step.sig).Msg("postgres is slow to stop; escalating")
		}
		if err := pm.process.Signal(step.sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("signalling postgres (pid %d): %w", pm.pid(), err)
		}
		select {
		case <-pm.exited:
			return nil
		case <-time.After(step.timeout):
		}
	}
	// Backends are in the postmaster's process group (Setpgid).
	_ = syscall.Kill(-pm.pid(), syscall.SIGKILL)
	select {
	case <-pm.exited:
		return fmt.Errorf("postgres (pid %d) ignored SIGINT and SIGQUIT and was killed", pm.pid())
	case <-time.After(quitTimeout):
		return fmt.Errorf("postgres (pid %d) does not exit even after SIGKILL", pm.pid())
	}
}
