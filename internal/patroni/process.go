package patroni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agq/agq/internal/pgcluster"
)

// child is etcd or a Patroni member, run as the user PostgreSQL runs as.
type child struct {
	name string
	args []string
	dir  string
	log  string
	cred *syscall.Credential
	// deathSignal reaches the child if this process dies without closing
	// the cluster, so that nothing outlives a crashed test.
	deathSignal syscall.Signal

	cmd    *exec.Cmd
	exited chan struct{}
}

// start runs the child, tied to this process (pgcluster.StartTied): its
// death signal reaches it should the test die without closing the cluster.
func (p *child) start() error {
	logFile, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	path, err := exec.LookPath(p.args[0])
	if err != nil {
		return fmt.Errorf("%s is needed (.ci/install-deps installs it): %w", p.args[0], err)
	}
	cmd := exec.Command(path, p.args[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = p.dir, logFile, logFile
	cmd.Env = append(os.Environ(), "HOME="+p.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: p.deathSignal, Credential: p.cred}
	exited := make(chan struct{})
	p.exited = exited
	err = pgcluster.StartTied(cmd, func() {
		_ = cmd.Wait()
		close(exited)
	})
	if err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd = cmd
	return nil
}

func (p *child) terminate() {
	if p.cmd != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
}

// wait waits up to grace for the child to exit, then kills its group.
func (p *child) wait(grace time.Duration) error {
	if p.cmd == nil {
		return nil
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
		p.kill()
		return fmt.Errorf("%s did not stop within %s and was killed (log %s)", p.name, grace, p.log)
	}
}

func (p *child) kill() {
	if p.cmd == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// postmasterPID reads the pid of the postgres running on dataDir, checked
// against /proc so that a stale file never names another process.
func postmasterPID(dataDir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), dataDir) {
		return 0, false
	}
	return pid, true
}

// stablePorts returns n distinct free loopback ports from below the
// ephemeral range, where no outgoing connection takes one while its server
// restarts.
func stablePorts(n int) ([]int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	if low <= 11000 {
		return nil, fmt.Errorf("the ephemeral port range starts at %d: no room below it", low)
	}
	var ports []int
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for try := 0; len(ports) < n && try < 1000; try++ {
		port := 10000 + rand.IntN(low-10000)
		ln, err := net.Listen("tcp", addr(port))
		if err != nil {
			continue
		}
		held, ports = append(held, ln), append(ports, port)
	}
	if len(ports) < n {
		return nil, errors.New("no free ports")
	}
	return ports, nil
}

func waitFor(ctx context.Context, limit time.Duration, cond func() error) error {
	err := errors.New("not tried")
	for start := time.Now(); time.Since(start) < limit; {
		if err = cond(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return err
}

// httpGet reads url's JSON answer into v (nil: any 200 will do).
func httpGet(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, res.Status)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(res.Body).Decode(v)
}
