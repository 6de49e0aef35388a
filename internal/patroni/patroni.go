// Package patroni runs PostgreSQL the way many operators do: a primary and
// a synchronous standby managed by Patroni, which keeps its leader lock in
// etcd, switches over on request and fails over when the primary dies.
// The chaos run puts agq on it to show what agq does when the manager, not
// agq's tests, moves the primary. It needs the patroni, patronictl and etcd
// binaries (.ci/install-deps installs Debian's) and PostgreSQL's server
// binaries. Linux only.
package patroni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/internal/pgcluster"
)

// The faults a Cluster injects (see Fault).
const (
	// Switchover is patronictl switchover to the synchronous standby.
	Switchover = "switchover"
	// PrimaryKill is SIGKILL of the primary's postmaster: Patroni promotes
	// the synchronous standby instead of restarting it.
	PrimaryKill = "primary-kill"
)

// Faults lists the faults a Cluster injects.
var Faults = []string{Switchover, PrimaryKill}

const (
	scope = "agq"
	// superuser is the role agq connects as; a deployment would give agq a
	// role of its own.
	superuser = "agq"
	// startLimit bounds the bootstrap and every wait for a healthy cluster.
	startLimit = 2 * time.Minute
	stopGrace  = 20 * time.Second
)

// Config configures a Cluster.
type Config struct {
	// Dir holds etcd's data, each member's data, configuration and log.
	// It must exist; when we are root it must be searchable by the user
	// postgres, and a short path (sockets live in it).
	Dir string
	// Members is the number of PostgreSQL servers, at least 2 (default 2).
	Members int
	// Parameters are PostgreSQL settings, on every member.
	Parameters map[string]string
}

// Cluster is an etcd server and Patroni members, each running PostgreSQL.
type Cluster struct {
	dir     string
	cred    *syscall.Credential
	etcd    *child
	members []*member
}

type member struct {
	name    string
	config  string // its Patroni configuration file
	dataDir string
	pgPort  int
	apiPort int
	patroni *child
}

// Start starts etcd and the members, and returns once one member leads
// and another is its synchronous standby, with a database "agq" created.
// On error the Cluster returned, if not nil, must still be closed.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg.Members = max(cfg.Members, 2)
	binDir, err := pgcluster.FindBinaries("")
	if err != nil {
		return nil, err
	}
	cred, err := pgcluster.ServerCredential()
	if err != nil {
		return nil, err
	}
	// Ports a restarted postgres must get back: below the ephemeral range.
	ports, err := stablePorts(2 + 2*cfg.Members)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: cfg.Dir, cred: cred}
	etcdDir := filepath.Join(c.dir, "etcd")
	if err := c.ownedDir(etcdDir); err != nil {
		return nil, err
	}
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	c.etcd = &child{name: "etcd", log: filepath.Join(c.dir, "etcd.log"), cred: cred, deathSignal: syscall.SIGKILL, args: []string{
		"etcd", "--name", "e0", "--data-dir", etcdDir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "e0=" + peer,
	}}
	if err := c.etcd.start(); err != nil {
		return c, err
	}
	for i := range cfg.Members {
		m := &member{name: fmt.Sprintf("pg%d", i), pgPort: ports[2+2*i], apiPort: ports[3+2*i]}
		home := filepath.Join(c.dir, m.name)
		if err := c.ownedDir(home); err != nil {
			return c, err
		}
		m.dataDir, m.config = filepath.Join(home, "data"), filepath.Join(c.dir, m.name+".yml")
		doc, err := json.MarshalIndent(memberConfig(m, home, binDir, ports[0], cfg.Parameters), "", "  ")
		if err != nil {
			return c, err
		}
		// JSON is YAML: Patroni reads it as its configuration file.
		if err := os.WriteFile(m.config, doc, 0o644); err != nil {
			return c, err
		}
		// SIGTERM makes Patroni stop its PostgreSQL before it exits.
		m.patroni = &child{name: m.name, log: filepath.Join(c.dir, m.name+".log"), cred: cred,
			deathSignal: syscall.SIGTERM, dir: home, args: []string{"patroni", m.config}}
		c.members = append(c.members, m)
	}
	if err := waitFor(ctx, 30*time.Second, func() error { return httpGet(ctx, client+"/health", nil) }); err != nil {
		return c, fmt.Errorf("etcd did not answer (log %s): %w", c.etcd.log, err)
	}
	for _, m := range c.members {
		if err := m.patroni.start(); err != nil {
			return c, err
		}
	}
	leader, err := c.WaitHealthy(ctx)
	if err != nil {
		return c, err
	}
	conn, err := pgx.Connect(ctx, c.memberURL(leader, "postgres"))
	if err != nil {
		return c, err
	}
	defer conn.Close(context.Background())
	// Replayed on the standby before agq starts: a client whose first
	// host is the standby would otherwise be told the database does not
	// exist, and pgx tries no other host after that answer.
	if _, err := conn.Exec(ctx, `SET synchronous_commit = remote_apply`); err != nil {
		return c, err
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE agq`); err != nil {
		return c, fmt.Errorf("creating database agq: %w", err)
	}
	return c, nil
}

// memberConfig is m's Patroni configuration. Patroni writes the dcs part to
// etcd at bootstrap, for every member.
func memberConfig(m *member, home, binDir string, etcdPort int, parameters map[string]string) map[string]any {
	params := map[string]any{"max_connections": 300}
	for k, v := range parameters {
		params[k] = v
	}
	trust := []string{
		"local all all trust",
		"host all all 127.0.0.1/32 trust",
		"host replication all 127.0.0.1/32 trust",
	}
	return map[string]any{
		"scope": scope, "name": m.name, "namespace": "/agq/",
		"restapi": map[string]any{"listen": addr(m.apiPort), "connect_address": addr(m.apiPort)},
		"etcd3":   map[string]any{"hosts": addr(etcdPort)},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				// loop_wait is how often each member looks; a dead leader
				// is noticed within it. ttl >= loop_wait + 2 × retry_timeout.
				"ttl": 20, "loop_wait": 1, "retry_timeout": 5,
				// A crashed primary is failed over at once, not restarted.
				"primary_start_timeout": 0,
				// Only a standby that has every acknowledged commit may
				// be promoted.
				"synchronous_mode": true,
				"postgresql":       map[string]any{"use_pg_rewind": true, "parameters": params},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, map[string]string{"locale": "C"}},
		},
		"postgresql": map[string]any{
			"listen": addr(m.pgPort), "connect_address": addr(m.pgPort),
			"data_dir": m.dataDir, "bin_dir": binDir, "pgpass": filepath.Join(home, "pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]string{"username": superuser},
				"replication": map[string]string{"username": "replicator"},
				"rewind":      map[string]string{"username": superuser},
			},
			"pg_hba":     trust,
			"parameters": map[string]any{"unix_socket_directories": home},
			// A member that cannot be rewound is cloned again from the
			// primary rather than left out of the cluster.
			"remove_data_directory_on_rewind_failure": true,
		},
	}
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// URL is agq's database URL: every member, the one taking writes wins.
func (c *Cluster) URL() string {
	hosts := make([]string, len(c.members))
	for i, m := range c.members {
		hosts[i] = addr(m.pgPort)
	}
	return fmt.Sprintf("postgres://%s@%s/agq?sslmode=disable&connect_timeout=5&target_session_attrs=read-write",
		superuser, strings.Join(hosts, ","))
}

func (c *Cluster) memberURL(name, db string) string {
	for _, m := range c.members {
		if m.name == name {
			return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&connect_timeout=5", superuser, addr(m.pgPort), db)
		}
	}
	return ""
}

// ownedDir creates dir for the user PostgreSQL runs as.
func (c *Cluster) ownedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if c.cred != nil {
		return os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid))
	}
	return nil
}

// Close stops the members (Patroni stops its PostgreSQL), then kills
// whatever is left, etcd last.
func (c *Cluster) Close() error {
	var errs []error
	for _, m := range c.members {
		m.patroni.terminate()
	}
	for _, m := range c.members {
		if err := m.patroni.wait(stopGrace); err != nil {
			errs = append(errs, err)
		}
		// A postmaster outlives its Patroni (it runs in a session of its
		// own), so a Patroni that was killed leaves it behind, with its
		// backends in its process group.
		if pid, ok := postmasterPID(m.dataDir); ok {
			if pgid, err := syscall.Getpgid(pid); err == nil && pgid > 1 {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if c.etcd != nil {
		c.etcd.kill()
	}
	return errors.Join(errs...)
}
