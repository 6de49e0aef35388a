// Package agqtest is the test harness: one managed PostgreSQL per test
// binary, a template database with every migration applied, a fresh
// database per test cloned from it, and in-process agq nodes on
// 127.0.0.1:0 driven through real clients.
package agqtest

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/pgcluster"
	"github.com/agq/agq/migrations"
	"github.com/agq/agq/store"
)

const templateDB = "agq_template"

var (
	cluster   *pgcluster.Cluster
	clusterMu sync.Mutex // serialises CREATE DATABASE … TEMPLATE
	dbCounter atomic.Int64
)

// Main runs a package's tests around a managed PostgreSQL cluster. Use it
// from TestMain: func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }.
func Main(m *testing.M) int {
	dir, err := os.MkdirTemp("", "agqt")
	if err != nil {
		fmt.Fprintln(os.Stderr, "agqtest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// As root, postgres runs as its own user and must be able to enter it.
	if err := os.Chmod(dir, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, "agqtest:", err)
		return 1
	}
	cl, err := pgcluster.Open(pgcluster.Config{
		DataDir: dir,
		Logger:  zerolog.New(io.Discard),
		Settings: map[string]string{
			// Durability is not under test here; speed is welcome.
			"fsync":              "off",
			"synchronous_commit": "off",
			"full_page_writes":   "off",
			"max_connections":    "600",
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agqtest: opening cluster:", err)
		return 1
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "agqtest: starting cluster:", err)
		return 1
	}
	if err := buildTemplate(ctx, cl); err != nil {
		fmt.Fprintln(os.Stderr, "agqtest: template database:", err)
		return 1
	}
	cluster = cl
	return m.Run()
}

func buildTemplate(ctx context.Context, cl *pgcluster.Cluster) error {
	admin, err := store.Open(ctx, store.Config{URL: cl.ConnString("postgres"), MaxConns: 1})
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.Pool.Exec(ctx, "CREATE DATABASE "+templateDB); err != nil {
		return err
	}
	tmpl, err := store.Open(ctx, store.Config{URL: cl.ConnString(templateDB), MaxConns: 2})
	if err != nil {
		return err
	}
	defer tmpl.Close()
	_, err = migrations.Apply(ctx, tmpl.Pool)
	return err
}

// Cluster returns the test binary's PostgreSQL; Main must be running.
func Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	if cluster == nil {
		t.Fatal("agqtest: no cluster; call agqtest.Main from TestMain")
	}
	return cluster
}

// NewDatabase creates a database cloned from the migrated template and
// returns its connection string; it is dropped when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, templateDB)
}

// NewEmptyDatabase creates a database without any migration applied, for
// tests of what a first start does; it is dropped when the test ends.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "template0")
}

func newDatabase(t testing.TB, template string) string {
	t.Helper()
	cl := Cluster(t)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbCounter.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := store.Open(ctx, store.Config{URL: cl.ConnString("postgres"), MaxConns: 1})
	if err != nil {
		t.Fatalf("agqtest: %v", err)
	}
	defer admin.Close()
	clusterMu.Lock()
	_, err = admin.Pool.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template))
	clusterMu.Unlock()
	if err != nil {
		t.Fatalf("agqtest: creating database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, err := store.Open(ctx, store.Config{URL: cl.ConnString("postgres"), MaxConns: 1})
		if err != nil {
			return // the cluster was stopped by the test; Main removes it all
		}
		defer admin.Close()
		_, _ = admin.Pool.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
	})
	return cl.ConnString(name)
}

// OwnCluster starts a PostgreSQL cluster of the test's own, for tests that
// stop or restart it, with settings added to the test defaults; it is
// closed when the test ends.
func OwnCluster(t testing.TB, settings map[string]string) *pgcluster.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "agqo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	all := map[string]string{"fsync": "off", "full_page_writes": "off"}
	maps.Copy(all, settings)
	cl, err := pgcluster.Open(pgcluster.Config{DataDir: dir, Logger: zerolog.New(io.Discard), Settings: all})
	if err != nil {
		t.Fatalf("agqtest: opening a cluster: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.Start(ctx); err != nil {
		t.Fatalf("agqtest: starting a cluster: %v", err)
	}
	return cl
}
