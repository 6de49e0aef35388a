package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A standby is PostgreSQL's own streaming replication: a copy of a running
// primary taken with pg_basebackup -R, which then streams the primary's WAL
// and can be promoted when the primary is lost. Tests and the chaos command
// use it to kill a primary and fail over; docs/operations.md shows the same
// steps by hand.

// baseBackup copies the primary into dir and configures it to follow the
// primary (standby.signal and primary_conninfo).
func (c *Cluster) baseBackup(ctx context.Context, dir string) error {
	c.log.Info().Str("cluster_dir", c.clusterDir).Str("primary", c.primary.socketDir).Msg("copying the primary for a standby")
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "pg_basebackup"),
		"-D", dir, "-h", c.primary.socketDir, "-p", strconv.Itoa(port), "-U", superuser,
		"-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.runAs.credential()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_basebackup failed: %w; its output:\n%s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RequireSynchronousStandby makes the primary wait, at every commit, until
// a standby has the commit on disk too, and returns once a standby streams
// synchronously: from then on, a commit the primary acknowledged survives
// the primary's loss.
func (c *Cluster) RequireSynchronousStandby(ctx context.Context) error {
	conn, err := pgconn.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := setSystem(ctx, conn, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
		return err
	}
	for {
		res, err := conn.Exec(ctx, `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'`).ReadAll()
		if err != nil {
			return err
		}
		if len(res) == 1 && len(res[0].Rows) == 1 && string(res[0].Rows[0][0]) != "0" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no synchronous standby: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Promote makes a standby the primary and waits until it accepts writes. A
// promoted standby has no standby of its own, so it stops waiting for one
// (synchronous_standby_names is reset) until RequireSynchronousStandby.
func (c *Cluster) Promote(ctx context.Context) error {
	conn, err := pgconn.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	res, err := conn.Exec(ctx, `SELECT pg_promote(true, 60)`).ReadAll()
	if err != nil {
		return fmt.Errorf("promoting: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != "t" {
		return errors.New("promoting: the standby was not promoted within 60 s")
	}
	return setSystem(ctx, conn, `ALTER SYSTEM RESET synchronous_standby_names`)
}

// setSystem runs an ALTER SYSTEM (which may not share a transaction) and
// reloads the configuration.
func setSystem(ctx context.Context, conn *pgconn.PgConn, alter string) error {
	if err := conn.Exec(ctx, alter).Close(); err != nil {
		return err
	}
	return conn.Exec(ctx, `SELECT pg_reload_conf()`).Close()
}

// Kill kills postgres and every backend with SIGKILL, as when its machine
// dies: nothing is shut down in order, and clients' connections break. The
// next Start recovers from the WAL.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stops++ // as Stop: it stays down
	if c.cancelStart != nil {
		c.cancelStart()
	}
	if c.pm == nil {
		return nil
	}
	// Backends are in the postmaster's process group (Setpgid).
	_ = syscall.Kill(-c.pm.pid(), syscall.SIGKILL)
	select {
	case <-c.pm.exited:
	case <-time.After(quitTimeout):
		return fmt.Errorf("postgres (pid %d) does not exit after SIGKILL", c.pm.pid())
	}
	c.pm = nil
	return nil
}
