package chaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agq/agq/internal/pgcluster"
)

// process is a child process that can be killed, stopped and started again
// with the same command line.
type process struct {
	name string
	args []string // args[0] is the binary
	log  string   // stdout and stderr, appended across runs
	// lines, if set, receives each line of stdout instead of the log.
	lines func(string)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	logFile, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	closeTee := func() error { return nil }
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "AGQ_") })
	cmd.Stderr = logFile
	// Nothing outlives a run that was killed (pgcluster.StartTied).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out io.Reader
	if p.lines != nil {
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		// The lines go to the log too, where a failed run is read.
		tee, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		out = io.TeeReader(pipe, tee)
		closeTee = tee.Close
	} else {
		cmd.Stdout = logFile
	}
	exited := make(chan struct{})
	err = pgcluster.StartTied(cmd, func() {
		if out != nil {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				p.lines(sc.Text())
			}
			closeTee()
		}
		_ = cmd.Wait()
		close(exited)
	})
	if err != nil {
		closeTee()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd, p.exited = cmd, exited
	return nil
}

// signal sends sig to the running process, if any.
func (p *process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill ends the process with SIGKILL and waits for it.
func (p *process) kill() { p.stop(0) }

// stop ends the process with SIGTERM, then SIGKILL after grace (at once
// for none), and waits for it. A stopped process ends too.
func (p *process) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	if grace > 0 {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return
		case <-time.After(grace):
		}
	}
	_ = cmd.Process.Kill()
	<-exited
}

func logPath(dir, name string) string { return filepath.Join(dir, name+".log") }
