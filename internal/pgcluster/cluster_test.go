package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
)

// testSettings trade durability for speed and keep each server small, as
// the agq test suite does.
var testSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
	"max_connections":    "20",
	"shared_buffers":     "16MB",
}

const testTimeout = 60 * time.Second

func TestCluster(t *testing.T) {
	t.Parallel()

	t.Run("StartsAndAcceptsConnections", func(t *testing.T) {
		t.Parallel()
		dataDir := newDataDir(t)
		c := openCluster(t, dataDir)
		startCluster(t, c)

		requireEqual(t, queryInt(t, c, "SELECT 1"), 1)
		requireEqual(t, c.ClusterDir(), filepath.Join(dataDir, "pg"))
		requireEqual(t, c.SocketDir(), filepath.Join(dataDir, "run"))
		info, err := os.Stat(c.SocketDir())
		requireNoError(t, err)
		requireEqual(t, info.Mode().Perm(), os.FileMode(0o700))
		if c.runAs != nil {
			requireEqual(t, info.Sys().(*syscall.Stat_t).Uid, c.runAs.uid)
		}
	})

	t.Run("RestartKeepsData", func(t *testing.T) {
		t.Parallel()
		c := openCluster(t, newDataDir(t))
		startCluster(t, c)
		execSQL(t, c, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")

		requireNoError(t, c.Stop())
		requireNoError(t, c.Stop()) // idempotent
		if _, err := connect(c); err == nil {
			t.Fatal("connected to a stopped cluster")
		}
		startCluster(t, c)
		requireEqual(t, queryInt(t, c, "SELECT v FROM kept"), 42)
	})

	t.Run("SecondOpenOnSameDataDirFails", func(t *testing.T) {
		t.Parallel()
		dataDir := newDataDir(t)
		first := openCluster(t, dataDir)

		_, err := Open(Config{DataDir: dataDir})
		if !errors.Is(err, ErrDataDirInUse) {
			t.Fatalf("got %v, want ErrDataDirInUse", err)
		}
		want := fmt.Sprintf("data dir %s is in use by another agq process (pid %d)", dataDir, os.Getpid())
		requireEqual(t, err.Error(), want)

		requireNoError(t, first.Close())
		// A process the parallel subtests fork holds a copy of the lock
		// file's descriptor until it runs its program: the lock is free
		// once that moment passed.
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := Open(Config{DataDir: dataDir, Settings: testSettings, Logger: testLogger(t)})
			if err == nil {
				requireNoError(t, c.Close())
				break
			}
			if !errors.Is(err, ErrDataDirInUse) || time.Now().After(deadline) {
				t.Fatalf("opening the data dir after its cluster closed: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("RecoversFromStalePostmasterPid", func(t *testing.T) {
		t.Parallel()
		c := openCluster(t, newDataDir(t))
		startCluster(t, c)
		requireNoError(t, c.Stop())

		exited := exec.Command("true")
		requireNoError(t, exited.Run())
		writePidFiles(t, c, exited.Process.Pid)

		startCluster(t, c)
		requireEqual(t, queryInt(t, c, "SELECT 1"), 1)
	})

	t.Run("IgnoresPostmasterPidReusedByAnotherProcess", func(t *testing.T) {
		t.Parallel()
		c := openCluster(t, newDataDir(t))
		startCluster(t, c)
		requireNoError(t, c.Stop())

		// postgres itself refuses to start over a lock file naming a live
		// process; this one must be neither signalled nor obeyed.
		bystander := exec.Command("sleep", "300")
		requireNoError(t, bystander.Start())
		t.Cleanup(func() {
			bystander.Process.Kill()
			bystander.Wait()
		})
		writePidFiles(t, c, bystander.Process.Pid)

		startCluster(t, c)
		requireEqual(t, queryInt(t, c, "SELECT 1"), 1)
		if !processAlive(bystander.Process.Pid) {
			t.Fatal("the unrelated process was killed")
		}
	})

	t.Run("AdoptsOrphanedPostmaster", func(t *testing.T) {
		t.Parallel()
		dataDir := newDataDir(t)
		gone := openCluster(t, dataDir)
		startCluster(t, gone)
		execSQL(t, gone, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")
		// The old agq vanishes as far as the data dir is concerned: its
		// flock is gone, its postgres still runs.
		orphan := gone.pm
		requireNoError(t, gone.lock.release())

		c := openCluster(t, dataDir)
		startCluster(t, c)

		select {
		case <-orphan.exited:
		default:
			t.Fatal("the orphaned postgres is still running")
		}
		if c.pm.pid() == orphan.pid() {
			t.Fatal("the new cluster reports the orphan's pid")
		}
		requireEqual(t, queryInt(t, c, "SELECT v FROM kept"), 7)
	})

	t.Run("LongDataDirUsesShortSocketDir", func(t *testing.T) {
		t.Parallel()
		dataDir := filepath.Join(newDataDir(t), strings.Repeat("d", 100))
		c := openCluster(t, dataDir)
		t.Cleanup(func() { os.RemoveAll(c.SocketDir()) })

		requireEqual(t, c.SocketDir(), "/tmp/agq-"+dataDirID(dataDir))
		startCluster(t, c)
		requireEqual(t, queryInt(t, c, "SELECT 1"), 1)

		requireNoError(t, c.Close())
		if _, err := os.Stat(c.SocketDir()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("short socket dir left behind: %v", err)
		}
	})

	t.Run("RelocatesClusterTheUserPostgresCannotReach", func(t *testing.T) {
		t.Parallel()
		parent := newDataDir(t)
		requireNoError(t, os.Chmod(parent, 0o700)) // like /root
		dataDir := filepath.Join(parent, "data")
		c := openCluster(t, dataDir)
		t.Cleanup(func() { os.RemoveAll(c.ClusterDir()) })
		t.Cleanup(func() { os.RemoveAll(c.SocketDir()) })

		if os.Geteuid() == 0 {
			requireEqual(t, c.ClusterDir(), "/var/lib/agq/pg-"+dataDirID(dataDir))
		} else {
			// Without root postgres runs as us and reaches the dir itself.
			requireEqual(t, c.ClusterDir(), filepath.Join(dataDir, "pg"))
		}
		startCluster(t, c)
		requireEqual(t, queryInt(t, c, "SELECT 1"), 1)
		info, err := os.Stat(parent)
		requireNoError(t, err)
		requireEqual(t, info.Mode().Perm(), os.FileMode(0o700))
	})

	t.Run("ReportsPostgresLogWhenStartFails", func(t *testing.T) {
		t.Parallel()
		c, err := Open(Config{
			DataDir:  newDataDir(t),
			Settings: map[string]string{"fsync": "off", "no_such_setting": "1"},
			Logger:   testLogger(t),
		})
		requireNoError(t, err)
		t.Cleanup(func() { c.Close() })

		err = c.Start(context.Background())
		if err == nil || !strings.Contains(err.Error(), `unrecognized configuration parameter "no_such_setting"`) {
			t.Fatalf("got %v, want the log line naming the bad setting", err)
		}
	})

	t.Run("ReplacesHalfInitialisedCluster", func(t *testing.T) {
		t.Parallel()
		dataDir := newDataDir(t)
		for _, dir := range []string{"pg", "pg.initdb"} {
			requireNoError(t, os.MkdirAll(filepath.Join(dataDir, dir, "base"), 0o700))
		}
		c := openCluster(t, dataDir)
		startCluster(t, c)
		requireEqual(t, queryInt(t, c, "SELECT 1"), 1)
		if _, err := os.Stat(filepath.Join(dataDir, "pg.initdb")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("scratch dir left behind: %v", err)
		}
	})

	t.Run("RejectsSettingsItManages", func(t *testing.T) {
		t.Parallel()
		_, err := Open(Config{DataDir: newDataDir(t), Settings: map[string]string{"listen_addresses": "*"}})
		if err == nil || !strings.Contains(err.Error(), "listen_addresses") {
			t.Fatalf("got %v, want an error naming listen_addresses", err)
		}
	})

	t.Run("MissingBinariesGivesClearError", func(t *testing.T) {
		t.Parallel()
		_, err := Open(Config{DataDir: newDataDir(t), BinDir: t.TempDir()})
		if !errors.Is(err, ErrNoBinaries) {
			t.Fatalf("got %v, want ErrNoBinaries", err)
		}
		if !strings.Contains(err.Error(), "apt-get install -y postgresql") {
			t.Fatalf("error does not say what to install: %v", err)
		}
	})
}

// newDataDir returns a short, fresh directory. MkdirTemp makes it 0700,
// which the user postgres cannot enter when the tests run as root, so it is
// opened up to 0711 like a data dir agq creates itself.
func newDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgc")
	requireNoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	requireNoError(t, os.Chmod(dir, 0o711))
	return dir
}

func openCluster(t *testing.T, dataDir string) *Cluster {
	t.Helper()
	c, err := Open(Config{DataDir: dataDir, Settings: testSettings, Logger: testLogger(t)})
	requireNoError(t, err)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing cluster: %v", err)
		}
	})
	return c
}

func startCluster(t *testing.T, c *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	requireNoError(t, c.Start(ctx))
}

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t))
}

func connect(c *Cluster) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return pgx.Connect(ctx, c.ConnString("postgres"))
}

func execSQL(t *testing.T, c *Cluster, sql string) {
	t.Helper()
	conn, err := connect(c)
	requireNoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), sql)
	requireNoError(t, err)
}

func queryInt(t *testing.T, c *Cluster, sql string) int {
	t.Helper()
	conn, err := connect(c)
	requireNoError(t, err)
	defer conn.Close(context.Background())
	var n int
	requireNoError(t, conn.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

// writePidFiles fakes the lock files a postmaster with pid leaves behind.
func writePidFiles(t *testing.T, c *Cluster, pid int) {
	t.Helper()
	content := []byte(strconv.Itoa(pid) + "\n" + c.ClusterDir() + "\n")
	requireNoError(t, os.WriteFile(filepath.Join(c.ClusterDir(), "postmaster.pid"), content, 0o600))
	requireNoError(t, os.WriteFile(filepath.Join(c.SocketDir(), socketName+".lock"), content, 0o600))
}

func requireNoError(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func requireEqual[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
}
