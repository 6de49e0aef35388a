// Package pgcluster runs agq's private PostgreSQL server: it finds the
// server binaries, creates a cluster in agq's data dir on first use, starts
// postgres listening on a unix socket only, starts it again should it die
// behind agq's back, and stops it. When agq runs as root, postgres runs as
// the system user postgres. Linux only.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

const logFileName = "postgres.log"

var (
	errClosed  = errors.New("pgcluster: cluster is closed")
	errStopped = errors.New("pgcluster: cluster was stopped")
)

// managedSettings would move the socket away from ConnString or open a TCP
// port, so Config.Settings may not override them.
var managedSettings = []string{"listen_addresses", "port", "unix_socket_directories"}

// Config configures a Cluster.
type Config struct {
	// DataDir is agq's data directory; it is created if missing. The
	// cluster lives in DataDir/pg, its socket in DataDir/run, and postgres's
	// output goes to DataDir/postgres.log. Required.
	DataDir string
	// BinDir, if set, is the directory holding initdb and postgres, and
	// replaces discovery (see FindBinaries).
	BinDir string
	// Settings are passed to postgres as -c key=value; tests use them to
	// turn off fsync, for example. They override the default
	// max_connections=200 but may not set listen_addresses, port or
	// unix_socket_directories.
	Settings map[string]string
	// Logger receives progress messages and warnings. The zero value
	// discards them.
	Logger zerolog.Logger
	// StandbyOf, if set, makes a new cluster a streaming standby of that
	// running cluster (a copy taken with pg_basebackup) instead of running
	// initdb; see standby.go.
	StandbyOf *Cluster
}

// Cluster is a PostgreSQL cluster owned by one agq process. Its methods are
// safe for concurrent use.
type Cluster struct {
	dataDir  string
	binDir   string
	settings map[string]string
	log      zerolog.Logger
	runAs    *runAs
	primary  *Cluster // the cluster a new one copies, or nil
	layout
	lock *dirLock
	// watch starts postgres again should it exit behind agq's back; a
	// Stop stops it first.
	watch *watch

	// mu guards the fields below. Stop holds it while postgres shuts down,
	// so that concurrent Stops return only once it is down.
	mu          sync.Mutex
	pm          *postmaster
	cancelStart context.CancelFunc // set while Start runs
	closed      bool
	stops       int // Stops so far: a restart after a crash gives way to one
}

// Open validates cfg, finds the PostgreSQL binaries, creates the data dir
// and locks it for this process, and decides where the cluster and its
// socket live. It starts no process. A data dir locked by another agq
// gives an error wrapping ErrDataDirInUse.
func Open(cfg Config) (*Cluster, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("pgcluster: Config.DataDir is required")
	}
	for _, key := range managedSettings {
		if _, ok := cfg.Settings[key]; ok {
			return nil, fmt.Errorf("pgcluster: Config.Settings may not set %s, which pgcluster manages", key)
		}
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("resolving data dir: %w", err)
	}
	binDir, err := FindBinaries(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	runAs, err := lookupRunAs()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, dataDirMode(runAs)); err != nil {
		return nil, fmt.Errorf("creating data dir: %w", err)
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, err
	}
	l, err := chooseLayout(dataDir, runAs)
	if err != nil {
		lock.release()
		return nil, err
	}
	if l.relocated {
		cfg.Logger.Warn().Str("data_dir", dataDir).Str("no_access", l.blockedAt).
			Str("cluster_dir", l.clusterDir).Str("socket_dir", l.socketDir).
			Msg("user postgres cannot reach the data dir; keeping the PostgreSQL cluster elsewhere")
	}
	c := &Cluster{
		dataDir:  dataDir,
		binDir:   binDir,
		settings: maps.Clone(cfg.Settings),
		log:      cfg.Logger,
		runAs:    runAs,
		primary:  cfg.StandbyOf,
		layout:   l,
		lock:     lock,
	}
	c.watch = &watch{c: c}
	return c, nil
}

// dataDirMode lets the postgres user pass through a data dir that agq
// creates as root (it cannot list it); otherwise the cluster would always
// have to be relocated.
func dataDirMode(r *runAs) os.FileMode {
	if r != nil {
		return 0o711
	}
	return 0o700
}

// Start creates the cluster if needed, shuts down any postgres an earlier
// agq left running on it, starts postgres and waits until it accepts
// connections. Without a deadline on ctx it waits at most 60 seconds. Start
// may be called again after Stop.
func (c *Cluster) Start(ctx context.Context) error {
	if err := c.start(ctx, -1); err != nil {
		return err
	}
	// The watch outlives ctx, which bounds the start only.
	return c.watch.Start(context.WithoutCancel(ctx))
}

// start starts postgres, without the watch; with stops ≥ 0, only while no
// Stop came since the count of stops was that.
func (c *Cluster) start(ctx context.Context, stops int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := c.beginStart(cancel, stops); err != nil {
		return err
	}
	defer c.endStart()

	if err := c.prepare(ctx); err != nil {
		return err
	}
	began := time.Now()
	pm, logOffset, err := c.launch(ctx)
	if err != nil {
		return err
	}
	if err := c.waitReady(ctx, pm); err != nil {
		stopErr := c.stop(syscall.SIGINT, false) // not a Stop: a restart may try again
		return errors.Join(fmt.Errorf("%w; last lines of %s:\n%s",
			err, c.logPath(), logTail(c.logPath(), logOffset)), stopErr)
	}
	c.log.Info().Int("pid", pm.pid()).Str("socket_dir", c.socketDir).
		Dur("took", time.Since(began)).Msg("postgres is ready")
	return nil
}

func (c *Cluster) beginStart(cancel context.CancelFunc, stops int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	if stops >= 0 && c.stops != stops {
		return errStopped
	}
	if c.pm != nil && c.pm.hasExited() {
		c.pm = nil // it crashed or was killed behind our back
	}
	if c.pm != nil || c.cancelStart != nil {
		return errors.New("pgcluster: already started")
	}
	c.cancelStart = cancel
	return nil
}

func (c *Cluster) endStart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelStart = nil
}

// prepare gets the directories, the cluster and a stale postmaster out of
// the way before the start.
func (c *Cluster) prepare(ctx context.Context) error {
	if c.relocated {
		if err := os.MkdirAll(relocatedRoot, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", relocatedRoot, err)
		}
		blocked, err := firstUnsearchable(relocatedRoot, c.runAs)
		if err != nil {
			return err
		}
		if blocked != "" {
			return fmt.Errorf("user %s cannot reach the data dir nor %s (no search permission on %s)",
				c.runAs.name, relocatedRoot, blocked)
		}
	}
	if err := ensurePrivateDir(c.socketDir, c.runAs); err != nil {
		return err
	}
	if err := c.initCluster(ctx); err != nil {
		return err
	}
	return c.clearStalePostmaster()
}

// launch starts postgres unless Stop or Close came first, and returns the
// log offset where its output begins.
func (c *Cluster) launch(ctx context.Context) (*postmaster, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, 0, errClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("starting postgres: %w", err)
	}
	logFile, err := os.OpenFile(c.logPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("opening postgres log: %w", err)
	}
	// postgres gets its own descriptor; ours is not needed after the start.
	defer logFile.Close()
	info, err := logFile.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("opening postgres log: %w", err)
	}
	pm, err := startPostmaster(c.postgresCommand(logFile), c.log)
	if err != nil {
		return nil, 0, err
	}
	c.pm = pm
	return pm, info.Size(), nil
}

// Stop shuts postgres down: a fast shutdown (SIGINT), then after 30 seconds
// an immediate one (SIGQUIT). It also aborts a Start in progress. Stop is
// idempotent and may be called from a signal handler's goroutine.
func (c *Cluster) Stop() error { return c.stop(syscall.SIGINT, true) }

// Crash stops postgres with an immediate shutdown: no checkpoint, and
// whatever was not flushed to the WAL is lost, as in a crash; the next
// Start recovers from the WAL. Tests use it.
func (c *Cluster) Crash() error { return c.stop(syscall.SIGQUIT, true) }

// stop shuts postgres down; counted, it is a Stop, which ends the restarts
// of a postgres that crashed (see watch). Only a counted stop may be called
// from outside the watch, which it waits for.
func (c *Cluster) stop(first syscall.Signal, counted bool) error {
	if counted {
		// Before the lock, which the watch takes.
		c.watch.Stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if counted {
		c.stops++
	}
	if c.cancelStart != nil {
		c.cancelStart()
	}
	if c.pm == nil {
		return nil
	}
	if !c.pm.hasExited() {
		c.log.Info().Int("pid", c.pm.pid()).Msg("stopping postgres")
	}
	if err := c.pm.stopWith(first); err != nil {
		return err // keep pm so that another Stop can try again
	}
	c.pm = nil
	return nil
}

// Close stops postgres and releases the data dir for other agq processes.
// The Cluster cannot be started again. Close is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	wasClosed := c.closed
	c.closed = true
	c.mu.Unlock()
	if wasClosed {
		return nil
	}
	err := c.Stop()
	if c.tmpSocketDir {
		os.Remove(c.socketDir) // fails harmlessly if postgres left files behind
	}
	return errors.Join(err, c.lock.release())
}

// ConnString returns a keyword/value connection string for dbname over the
// cluster's unix socket, as the superuser agq.
func (c *Cluster) ConnString(dbname string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable",
		quoteConnValue(c.socketDir), port, superuser, quoteConnValue(dbname))
}

// quoteConnValue quotes values that would otherwise split the string.
func quoteConnValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " '\\\t\n") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// SocketDir returns the directory holding postgres's unix socket.
func (c *Cluster) SocketDir() string { return c.socketDir }

// ClusterDir returns the PostgreSQL data directory (PGDATA).
func (c *Cluster) ClusterDir() string { return c.clusterDir }

func (c *Cluster) logPath() string { return filepath.Join(c.dataDir, logFileName) }
