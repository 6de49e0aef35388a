package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgbouncerPath is where Debian's package (installed by .ci/install-deps)
// puts PgBouncer; PATH is tried as well.
const pgbouncerPath = "/usr/sbin/pgbouncer"

// PgBouncer is a PgBouncer process in transaction pooling mode in front of
// a cluster, for the tests and the benchmark that run agq behind one.
type PgBouncer struct {
	// Addr is the loopback address it listens on.
	Addr   string
	dir    string
	exited chan struct{}
	proc   *os.Process
}

// StartPgBouncer starts PgBouncer in transaction mode on addr (a loopback
// host:port) in front of every database of c, and waits until it answers.
// It runs as the cluster's user, which alone can reach the cluster's socket
// (and PgBouncer refuses to run as root).
func (c *Cluster) StartPgBouncer(ctx context.Context, addr string) (_ *PgBouncer, err error) {
	bin, err := findPgBouncer()
	if err != nil {
		return nil, err
	}
	host, listenPort, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "agqpgb")
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{Addr: addr, dir: dir, exited: make(chan struct{})}
	// Close stops the process, if it started, and removes dir.
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if err := c.writePgBouncerConfig(dir, host, listenPort); err != nil {
		return nil, err
	}
	if err := b.start(bin, c.runAs.credential()); err != nil {
		return nil, err
	}
	if err := b.waitReady(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// findPgBouncer is the path of the pgbouncer binary.
func findPgBouncer() (string, error) {
	bin := pgbouncerPath
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("pgbouncer"); err != nil {
			return "", fmt.Errorf("PgBouncer not found (Debian/Ubuntu: apt-get install -y pgbouncer): %w", err)
		}
	}
	return bin, nil
}

// writePgBouncerConfig writes pgbouncer.ini and its user list to dir: every
// database of c, reached over its socket, offered on host:listenPort.
func (c *Cluster) writePgBouncerConfig(dir, host, listenPort string) error {
	if err := os.Chmod(dir, 0o755); err != nil { // readable by the cluster's user
		return err
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d user=%s

[pgbouncer]
listen_addr = %s
listen_port = %s
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = %s
admin_users = %s
max_client_conn = 2000
default_pool_size = 20
stats_period = 1
`, c.socketDir, port, superuser, host, listenPort, filepath.Join(dir, "userlist.txt"), superuser)
	files := map[string]string{"pgbouncer.ini": ini, "userlist.txt": fmt.Sprintf("%q \"\"\n", superuser)}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// start runs bin as cred with its output in the log file; b.exited closes
// when the process ends (or never started).
func (b *PgBouncer) start(bin string, cred *syscall.Credential) error {
	logFile, err := os.Create(b.logPath())
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// It goes with us, however we end.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
	err = StartTied(cmd, func() {
		_ = cmd.Wait()
		close(b.exited)
	})
	if err != nil {
		close(b.exited)
		return fmt.Errorf("starting PgBouncer: %w", err)
	}
	b.proc = cmd.Process
	return nil
}

// waitReady polls PgBouncer's admin console until it answers, it exits or
// ctx ends.
func (b *PgBouncer) waitReady(ctx context.Context) error {
	for {
		_, err := b.Show(ctx, "VERSION")
		if err == nil {
			return nil
		}
		select {
		case <-b.exited:
			return fmt.Errorf("PgBouncer exited: %s", b.Log())
		case <-ctx.Done():
			return fmt.Errorf("PgBouncer did not answer: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// URL is the connection string of dbname through PgBouncer.
func (b *PgBouncer) URL(dbname string) string {
	host, port, _ := net.SplitHostPort(b.Addr)
	return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable", host, port, superuser, quoteConnValue(dbname))
}

// Show runs SHOW what on PgBouncer's admin console and returns its rows,
// each a map from column to value.
func (b *PgBouncer) Show(ctx context.Context, what string) ([]map[string]string, error) {
	conn, err := pgconn.Connect(ctx, b.URL("pgbouncer"))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	results, err := conn.Exec(ctx, "SHOW "+what).ReadAll()
	if err != nil {
		return nil, err
	}
	var rows []map[string]string
	for _, r := range results {
		for _, values := range r.Rows {
			row := map[string]string{}
			for i, f := range r.FieldDescriptions {
				row[strings.ToLower(f.Name)] = string(values[i])
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// Log is what PgBouncer has logged so far.
func (b *PgBouncer) Log() string {
	out, _ := os.ReadFile(b.logPath())
	return string(out)
}

func (b *PgBouncer) logPath() string { return filepath.Join(b.dir, "pgbouncer.log") }

// Close stops PgBouncer at once (its clients are cut off) and removes its
// files.
func (b *PgBouncer) Close() error {
	var err error
	if b.proc != nil {
		b.proc.Signal(syscall.SIGTERM) // immediate shutdown
		select {
		case <-b.exited:
		case <-time.After(10 * time.Second):
			b.proc.Kill()
			<-b.exited
			err = errors.New("PgBouncer did not stop on SIGTERM: killed")
		}
	}
	return errors.Join(err, os.RemoveAll(b.dir))
}
