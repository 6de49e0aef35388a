package agqtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agq/agq/internal/pgcluster"
)

// pgbouncerPath is where Debian's package (installed by .ci/install-deps)
// puts PgBouncer; PATH is tried as well.
const pgbouncerPath = "/usr/sbin/pgbouncer"

// PgBouncer is a PgBouncer process in transaction pooling mode in front of
// a managed cluster, on a loopback port.
type PgBouncer struct {
	Addr string
	user string
}

// StartPgBouncer starts PgBouncer in transaction mode in front of cl, for
// every database of it; it is stopped when the test ends. As root it runs
// as the postgres user, which it must be to reach the cluster's socket
// (and PgBouncer refuses to run as root anyway).
func StartPgBouncer(t testing.TB, cl *pgcluster.Cluster) *PgBouncer {
	t.Helper()
	bin := pgbouncerPath
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("pgbouncer"); err != nil {
			t.Fatalf("agqtest: PgBouncer is needed (.ci/install-deps installs it): %v", err)
		}
	}
	server, err := pgconn.ParseConfig(cl.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "agqb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // readable by the postgres user
		t.Fatal(err)
	}
	b := &PgBouncer{Addr: StableAddr(t), user: server.User}
	host, port, _ := net.SplitHostPort(b.Addr)
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
max_client_conn = 500
default_pool_size = 20
stats_period = 1
`, server.Host, server.Port, server.User, host, port, filepath.Join(dir, "userlist.txt"), server.User)
	files := map[string]string{"pgbouncer.ini": ini, "userlist.txt": fmt.Sprintf("%q \"\"\n", server.User)}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logPath := filepath.Join(dir, "pgbouncer.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// It goes with the test binary, however that ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: postgresUser(t)}
	started, exited := make(chan error, 1), make(chan struct{})
	go func() {
		// Pdeathsig fires when the thread that started the child exits:
		// this one lives until the child is reaped.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		t.Fatalf("agqtest: starting PgBouncer: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) // immediate shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			if log, err := os.ReadFile(logPath); err == nil {
				t.Logf("pgbouncer.log:\n%s", log)
			}
		}
	})
	Eventually(t, 20*time.Second, func() error {
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("agqtest: PgBouncer exited: %s", log)
		default:
		}
		_, err := b.Show(t, "VERSION")
		return err
	})
	return b
}

// postgresUser is the credential of the postgres user as root, nil
// otherwise.
func postgresUser(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("agqtest: PgBouncer refuses to run as root and there is no postgres user: %v", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// URL is the connection string of dbname through PgBouncer.
func (b *PgBouncer) URL(dbname string) string {
	host, port, _ := net.SplitHostPort(b.Addr)
	return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable", host, port, b.user, dbname)
}

// Show runs SHOW what on PgBouncer's admin console and returns its rows,
// each a map from column to value.
func (b *PgBouncer) Show(t testing.TB, what string) ([]map[string]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
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
