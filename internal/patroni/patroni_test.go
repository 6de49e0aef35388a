package patroni

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The cluster comes up with a synchronous standby, Patroni switches over
// on request and fails over when the primary's postmaster is killed, a row
// committed before each survives it, and Close leaves no process behind.
func TestSwitchoverAndFailoverKeepCommits(t *testing.T) {
	dir, err := os.MkdirTemp("", "agqpatroni") // short: sockets live in it
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil { // the postgres user passes through
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Dir: dir, Parameters: map[string]string{"fsync": "off"}})
	closed := false
	defer func() {
		if !closed && c != nil {
			c.Close()
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("logs in %s", dir)
		}
	}()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.URL(), "target_session_attrs=read-write") {
		t.Fatalf("URL %s does not ask for the member taking writes", c.URL())
	}
	write := func(v int) {
		t.Helper()
		err := waitFor(ctx, time.Minute, func() error {
			conn, err := pgx.Connect(ctx, c.URL())
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS marks (v int)`); err != nil {
				return err
			}
			_, err = conn.Exec(ctx, `INSERT INTO marks VALUES ($1)`, v)
			return err
		})
		if err != nil {
			t.Fatalf("writing %d: %v", v, err)
		}
	}
	write(1)
	first, err := c.WaitHealthy(ctx)
	if err != nil {
		t.Fatal(err)
	}

	second, err := c.Switchover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatalf("switchover left %s leading", first)
	}
	write(2)
	if _, err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	killed, err := c.KillPrimary()
	if err != nil {
		t.Fatal(err)
	}
	third, err := c.WaitLeader(ctx, killed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leaders: %s, switched over to %s, failed over to %s", first, second, third)
	write(3)
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM marks`).Scan(&n)
	conn.Close(ctx)
	if err != nil || n != 3 {
		t.Fatalf("after the failover the primary holds %d rows (%v), want 3", n, err)
	}

	closed = true
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	if left := processesUnder(t, dir); len(left) > 0 {
		t.Errorf("processes left after Close: %v", left)
	}
}

// processesUnder lists the processes whose command line names dir.
func processesUnder(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), dir) {
			left = append(left, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return left
}
