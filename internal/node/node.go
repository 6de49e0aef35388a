// Package node wires one agq process together: the database (managed or
// external), migrations, keys, the RESP front door, the HTTP side port and
// the background services. cmd/agq and the test harness both start agq
// through it, so tests exercise exactly what users run.
package node

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/agq/agq/commands"
	"github.com/agq/agq/engine"
	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/auth/keyring"
	"github.com/agq/agq/internal/config"
	"github.com/agq/agq/internal/dashboard"
	"github.com/agq/agq/internal/health"
	"github.com/agq/agq/internal/leader"
	"github.com/agq/agq/internal/pgcluster"
	"github.com/agq/agq/internal/service"
	"github.com/agq/agq/internal/tracing"
	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/internal/wakeup/listen"
	"github.com/agq/agq/migrations"
	"github.com/agq/agq/registry"
	"github.com/agq/agq/resp"
	"github.com/agq/agq/store"
)

// Node is a running agq.
type Node struct {
	ID       string
	cfg      config.Config
	log      zerolog.Logger
	cluster  *pgcluster.Cluster
	store    *store.Store
	engine   *engine.Engine
	server   *commands.Server
	respLn   net.Listener
	tlsLn    net.Listener
	certs    *certificates // nil without a TLS certificate
	httpSrv  *http.Server
	httpLn   net.Listener
	registry *prometheus.Registry
	hub      *wakeup.Hub
	sweeps   *store.Store // the presence's and the leader services' own connection
	presence *registry.Presence
	elector  *leader.Elector
	// directURL reaches PostgreSQL itself, for LISTEN and the leader's
	// lock, when the pool goes through a pooler.
	directURL string
	tracer    *tracing.Tracer // nil: tracing is off
	// services run in the background from Start to Close, started in
	// order and stopped in reverse.
	services []service.Service
	cancel   context.CancelFunc

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// database is where a node's connections go.
type database struct {
	// url is the pool's; direct reaches PostgreSQL itself, for what needs
	// a session of its own: LISTEN, the leader's advisory lock and the
	// migrations' lock.
	url, direct string
	// pooled says url goes through a connection pooler.
	pooled  bool
	cluster *pgcluster.Cluster // the managed one, or nil
}

// openDatabase finds the database to use, starting the managed cluster
// when none is configured.
func openDatabase(ctx context.Context, cfg config.Config, log zerolog.Logger) (database, error) {
	if cfg.DatabaseURL != "" {
		return externalDatabase(ctx, cfg)
	}
	cl, err := pgcluster.Open(pgcluster.Config{DataDir: cfg.DataDir, Logger: log.With().Str("component", "postgres").Logger()})
	if err != nil {
		return database{}, fmt.Errorf("managed postgres: %w", err)
	}
	if err := cl.Start(ctx); err != nil {
		cl.Close()
		return database{}, fmt.Errorf("managed postgres: %w", err)
	}
	if err := ensureDatabase(ctx, cl); err != nil {
		cl.Close()
		return database{}, err
	}
	url := cl.ConnString("agq")
	return database{url: url, direct: url, cluster: cl}, nil
}

// externalDatabase checks that the direct URL reaches PostgreSQL itself, and
// whether the pool's goes through a pooler. Through a pooler in transaction
// mode LISTEN would hear nothing and the leader's lock would stay with a
// server connection the pooler keeps (and lends to other nodes), so agq
// refuses rather than run like that.
func externalDatabase(ctx context.Context, cfg config.Config) (database, error) {
	db := database{url: cfg.DatabaseURL, direct: cmp.Or(cfg.DirectDatabaseURL, cfg.DatabaseURL)}
	pooled, err := store.ThroughPooler(ctx, db.direct)
	if err != nil {
		return database{}, err
	}
	if pooled && cfg.DirectDatabaseURL == "" {
		return database{}, errors.New("the database URL (AGQ_DATABASE_URL) leads to a connection pooler such as PgBouncer: " +
			"set AGQ_DIRECT_DATABASE_URL to PostgreSQL itself, for LISTEN and the leader's advisory lock, which need a session of their own")
	}
	if pooled {
		return database{}, errors.New("the direct database URL (AGQ_DIRECT_DATABASE_URL) leads to a connection pooler such as PgBouncer, " +
			"not to PostgreSQL itself: LISTEN and the leader's advisory lock need a session of their own")
	}
	if db.direct != db.url {
		if db.pooled, err = store.ThroughPooler(ctx, db.url); err != nil {
			return database{}, err
		}
	}
	return db, nil
}

// migrate applies the migrations under their session lock, on a connection
// straight to PostgreSQL.
func migrate(ctx context.Context, db database, pool *store.Store) ([]int, error) {
	if !db.pooled {
		return migrations.Apply(ctx, pool.Pool)
	}
	direct, err := store.Open(ctx, store.Config{URL: db.direct, MaxConns: 1})
	if err != nil {
		return nil, err
	}
	defer direct.Close()
	return migrations.Apply(ctx, direct.Pool)
}

// ensureDatabase creates the agq database in a fresh managed cluster.
func ensureDatabase(ctx context.Context, cl *pgcluster.Cluster) error {
	st, err := store.Open(ctx, store.Config{URL: cl.ConnString("postgres"), MaxConns: 1})
	if err != nil {
		return err
	}
	defer st.Close()
	var exists bool
	if err := st.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'agq')`).Scan(&exists); err != nil {
		return fmt.Errorf("checking for the agq database: %w", err)
	}
	if !exists {
		if _, err := st.Pool.Exec(ctx, `CREATE DATABASE agq`); err != nil {
			return fmt.Errorf("creating the agq database: %w", err)
		}
	}
	return nil
}

// Migrate applies migrations and returns; the managed cluster, if any, is
// started for the purpose and stopped again.
func Migrate(ctx context.Context, cfg config.Config, log zerolog.Logger) error {
	db, err := openDatabase(ctx, cfg, log)
	if err != nil {
		return err
	}
	if db.cluster != nil {
		defer db.cluster.Close()
	}
	st, err := store.Open(ctx, store.Config{URL: db.direct, MaxConns: 2})
	if err != nil {
		return err
	}
	defer st.Close()
	applied, err := migrations.Apply(ctx, st.Pool)
	if err != nil {
		return err
	}
	log.Info().Ints("applied", applied).Int("version", migrations.Latest()).Msg("migrations applied")
	return nil
}

// Start brings a node up: database, migrations, keys, services, listeners.
func Start(ctx context.Context, cfg config.Config, log zerolog.Logger) (_ *Node, err error) {
	host, _ := os.Hostname()
	n := &Node{
		ID:       fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8]),
		cfg:      cfg,
		registry: prometheus.NewRegistry(),
	}
	n.log = log.With().Str("node", n.ID).Logger()
	// Close undoes whichever steps below got done.
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	n.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if err := n.openStore(ctx); err != nil {
		return nil, err
	}
	keys, written, err := n.loadKeys(ctx)
	if err != nil {
		return nil, err
	}
	n.buildEngine(keys)
	if err := n.startServices(); err != nil {
		return nil, err
	}
	if err := n.listenRESP(); err != nil {
		return nil, err
	}
	if err := n.listenHTTP(ctx, keys); err != nil {
		return nil, err
	}
	n.logReady(written)
	return n, nil
}

// openStore opens the database, the tracer and the pool, and brings the
// schema up to date.
func (n *Node) openStore(ctx context.Context) error {
	db, err := openDatabase(ctx, n.cfg, n.log)
	if err != nil {
		return err
	}
	n.cluster, n.directURL = db.cluster, db.direct
	if n.tracer, err = tracing.New(ctx, "agq"); err != nil {
		return err
	}
	if n.tracer != nil {
		n.log.Info().Msg("tracing: exporting spans over OTLP as the OTEL_* variables say")
	}
	n.store, err = store.Open(ctx, store.Config{URL: db.url, Pooled: db.pooled, Rules: engine.Decisions{},
		Recovered: engine.Recoveries(n.tracer, n.registry)})
	if err != nil {
		return err
	}
	// The node's presence and the leader's services write every second on
	// a connection of their own: the client pool can then close all its
	// connections while clients idle.
	if n.sweeps, err = n.store.Background(ctx); err != nil {
		return err
	}
	if db.pooled {
		n.logPooler()
	}
	applied, err := migrate(ctx, db, n.store)
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		n.log.Info().Ints("versions", applied).Msg("migrations applied")
	}
	return nil
}

// logPooler says how statements go through the pooler, warning when that
// needs a PgBouncer recent enough to keep prepared statements.
func (n *Node) logPooler() {
	mode := n.store.Pool.Config().ConnConfig.DefaultQueryExecMode
	ev := n.log.Info()
	if mode == pgx.QueryExecModeCacheStatement {
		ev = n.log.Warn().Str("needs", "PgBouncer 1.21 or newer with max_prepared_statements set")
	}
	ev.Str("exec_mode", mode.String()).Msg("the database URL leads to a connection pooler; LISTEN, the leader's lock and migrations use the direct URL")
}

// loadKeys builds the keyring and makes sure an admin can sign in, minting
// a key when none is configured; written is the file it went to, if any.
func (n *Node) loadKeys(ctx context.Context) (keys *keyring.Keyring, written string, err error) {
	keys, err = keyring.New(n.store, staticKeys(n.cfg), map[string]string{})
	if err != nil {
		return nil, "", err
	}
	written, err = keys.EnsureAdmin(ctx, n.cfg.DataDir)
	if errors.Is(err, auth.ErrNoAdmin) {
		// Workers and producers can still work; say loudly why nobody can administer.
		n.log.Warn().Err(err).Msg("no admin can connect")
	} else if err != nil {
		return nil, "", err
	}
	if written != "" {
		n.log.Warn().Str("path", written).Msg("no admin key was configured: minted one and wrote it to this file (mode 0600)")
	}
	return keys, written, nil
}

// buildEngine builds the wake-up hub, the engine and the RESP command
// server on the open store.
func (n *Node) buildEngine(keys *keyring.Keyring) {
	cfg := n.cfg
	n.hub = wakeup.New(wakeup.Config{
		Dial:   listen.Dialer(n.directURL),
		NodeID: n.ID,
		Send:   listen.Send(n.store),
		Logger: n.log.With().Str("component", "listen").Logger(),
	})
	n.presence = registry.NewPresence(registry.PresenceConfig{
		Store:  n.sweeps,
		NodeID: n.ID,
		Logger: n.log.With().Str("component", "presence").Logger(),
	})
	n.engine = engine.New(engine.Config{
		HeartbeatInterval: cfg.HeartbeatInterval,
		AckTimeout:        cfg.AckTimeout,
		MaxSnoozes:        cfg.MaxSnoozes,
		MaxAttempts:       cfg.MaxAttempts,
		JobTimeout:        cfg.JobTimeout,
		MaxParentResults:  cfg.MaxPayload,
		Logger:            n.log,
		Registerer:        n.registry,
		Tracer:            n.tracer,
		Presence:          n.presence,
	}, n.store, n.hub)
	n.server = commands.New(commands.Options{
		NodeID:                       n.ID,
		MaxPayload:                   cfg.MaxPayload,
		Limits:                       inputLimits(cfg),
		MaxClients:                   cfg.MaxClients,
		MaxUnauthenticated:           cfg.MaxUnauth,
		MaxUnauthenticatedPerAddress: cfg.MaxUnauthPerAddr,
		AuthTimeout:                  cfg.AuthTimeout,
		IsLeader:                     n.IsLeader,
	}, n.engine, keys, n.hub, n.log, n.registry)
}

// startServices starts the background services on a context of their own,
// which Close cancels: the caller's ctx only bounds startup.
func (n *Node) startServices() error {
	bg, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.newElector()
	// The presence starts before the listeners open: the node is known to
	// run as its first clients come.
	n.services = []service.Service{n.hub, n.presence, n.elector}
	return service.StartAll(bg, n.services...)
}

// listenRESP loads the TLS certificates, if any, and serves RESP on the
// plain and TLS listeners that are configured.
func (n *Node) listenRESP() (err error) {
	cfg := n.cfg
	if cfg.TLSCertFile != "" {
		if n.certs, err = newCertificates(cfg); err != nil {
			return err
		}
	}
	if cfg.Listen != "" {
		if n.respLn, err = net.Listen("tcp", cfg.Listen); err != nil {
			return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
		}
		n.serveRESP(n.respLn)
	}
	if cfg.TLSListen != "" {
		raw, err := net.Listen("tcp", cfg.TLSListen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", cfg.TLSListen, err)
		}
		n.tlsLn = tls.NewListener(raw, n.certs.serverConfig())
		n.serveRESP(n.tlsLn)
	}
	return nil
}

// listenHTTP serves the side port, over TLS when there is a certificate.
func (n *Node) listenHTTP(ctx context.Context, keys auth.Keys) (err error) {
	if n.cfg.HTTPListen == "" {
		return nil
	}
	if n.httpLn, err = net.Listen("tcp", n.cfg.HTTPListen); err != nil {
		return fmt.Errorf("listening on %s: %w", n.cfg.HTTPListen, err)
	}
	handler, err := n.httpHandler(ctx, keys)
	if err != nil {
		return err
	}
	n.httpSrv = &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: stdlog.New(debugWriter{n.log.With().Str("component", "http").Logger()}, "", 0)}
	serve := func() error { return n.httpSrv.Serve(n.httpLn) }
	if n.certs != nil {
		n.httpSrv.TLSConfig = n.certs.httpConfig()
		serve = func() error { return n.httpSrv.ServeTLS(n.httpLn, "", "") }
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error().Err(err).Msg("HTTP server stopped")
		}
	}()
	return nil
}

// logReady says where the node listens and where an admin finds a key.
func (n *Node) logReady(written string) {
	ready := n.log.Info().Str("listen", n.RESPAddr()).Str("tls_listen", n.TLSAddr()).Str("http", n.HTTPAddr()).Bool("https", n.certs != nil)
	if url := dashboardURL(n.HTTPAddr(), n.certs != nil, n.cfg); url != "" {
		ready = ready.Str("dashboard", url)
	}
	ready.Str("admin_key", adminKeyWhere(n.cfg, written)).Msg("agq ready")
}

// serveRESP serves ln with the RESP server until Close.
func (n *Node) serveRESP(ln net.Listener) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.server.Serve(ln); err != nil {
			n.log.Error().Err(err).Msg("RESP server stopped")
		}
	}()
}

// Reload reads the TLS certificate, key and CA files again (cmd/agq calls
// it on SIGHUP). New connections get the new certificate; open ones keep
// theirs. On an error the certificates in use stay.
func (n *Node) Reload() error {
	if n.certs == nil {
		return nil
	}
	if err := n.certs.load(); err != nil {
		return err
	}
	n.log.Info().Str("cert", n.cfg.TLSCertFile).Msg("TLS certificates reloaded")
	return nil
}

// httpHandler serves /healthz, /readyz and /metrics, and the dashboard
// under its prefix unless it is turned off.
func (n *Node) httpHandler(ctx context.Context, keys auth.Keys) (http.Handler, error) {
	side := health.Handler(n.ready, n.registry)
	if !n.cfg.UI {
		return side, nil
	}
	dash, err := dashboard.New(ctx, dashboard.Config{
		Prefix:   n.cfg.UIPrefix,
		NodeID:   n.ID,
		IsLeader: n.IsLeader,
		Logger:   n.log.With().Str("component", "dashboard").Logger(),
		Explain:  commands.Explain,
	}, n.engine, keys)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		mux.Handle(path, side)
	}
	mux.Handle(n.cfg.UIPrefix, dash)
	return mux, nil
}

// inputLimits bound one command to what the largest legal command needs —
// an argument of a few jobs' worth, enough for a batch JOB.SUBMIT (16 MiB
// with the default 2 MiB per job), a command twice that — and all
// connections' unfinished commands together to MaxInputBuffer.
func inputLimits(cfg config.Config) resp.Limits {
	bulk := max(16<<20, 8*cfg.MaxPayload)
	return resp.Limits{MaxBulk: bulk, MaxCommand: 2 * bulk, Budget: resp.NewBudget(cfg.MaxInputBuffer)}
}

func staticKeys(cfg config.Config) auth.StaticKeys {
	keys := auth.StaticKeys{
		auth.RoleAdmin:    cfg.Admins,
		auth.RoleWorker:   cfg.Workers,
		auth.RoleProducer: cfg.Producers,
		auth.RoleViewer:   cfg.Viewers,
	}
	if cfg.AdminKey != "" {
		// The environment (or flag) beats the file for the principal admin.
		admins := map[string]string{}
		for k, v := range cfg.Admins {
			admins[k] = v
		}
		admins["admin"] = cfg.AdminKey
		keys[auth.RoleAdmin] = admins
	}
	return keys
}

// ready is /readyz: the database answers and the schema is current.
func (n *Node) ready(ctx context.Context) error {
	if err := n.store.Ping(ctx); err != nil {
		return err
	}
	v, err := migrations.Current(ctx, n.store.Pool)
	if err != nil {
		return err
	}
	if v < migrations.Latest() {
		return fmt.Errorf("schema version %d, want %d", v, migrations.Latest())
	}
	return nil
}

// RESPAddr is the address the RESP listener is bound to.
func (n *Node) RESPAddr() string {
	if n.respLn == nil {
		return ""
	}
	return n.respLn.Addr().String()
}

// TLSAddr is the address the RESP-over-TLS listener is bound to, "" when
// there is none.
func (n *Node) TLSAddr() string {
	if n.tlsLn == nil {
		return ""
	}
	return n.tlsLn.Addr().String()
}

// HTTPAddr is the address of the side port, "" when disabled.
func (n *Node) HTTPAddr() string {
	if n.httpLn == nil {
		return ""
	}
	return n.httpLn.Addr().String()
}

// Cluster is the managed PostgreSQL, nil with an external database.
func (n *Node) Cluster() *pgcluster.Cluster { return n.cluster }

// Store is the node's database handle.
func (n *Node) Store() *store.Store { return n.store }

// Close stops serving, stops the services, closes the database and, when it
// is managed, stops PostgreSQL. It is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		if n.presence != nil && n.server != nil {
			// Before the connections close: their closing is agq's doing.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := n.presence.Leave(ctx); err != nil {
				n.log.Warn().Err(err).Msg("forgetting this node's workers' connections")
			}
			cancel()
		}
		if n.server != nil {
			n.server.Close()
		}
		if n.cancel != nil {
			n.cancel()
		}
		service.StopAll(n.services...)
		if n.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = n.httpSrv.Shutdown(ctx)
			cancel()
		}
		n.wg.Wait()
		if n.sweeps != nil {
			n.sweeps.Close()
		}
		if n.store != nil {
			n.store.Close()
		}
		if n.tracer != nil {
			// The spans still buffered leave before the process does.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := n.tracer.Shutdown(ctx); err != nil {
				n.log.Warn().Err(err).Msg("exporting the last spans")
			}
			cancel()
		}
		if n.cluster != nil {
			n.closeErr = n.cluster.Close()
		}
	})
	return n.closeErr
}

// Tracing reports whether the node records spans (an OTEL_* endpoint was
// set when it started).
func (n *Node) Tracing() bool { return n.tracer != nil }
