package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/pgcluster"
)

// database is a PostgreSQL primary, with or without a synchronous streaming
// standby, in two slots of one directory. agq's URL names both; after a fail-over the
// lost primary's slot is rebuilt as a standby of the new primary, so the
// same URL serves every round.
type database struct {
	dir      string
	settings map[string]string
	log      zerolog.Logger
	// url is agq's database URL: both slots (a slot's socket directory
	// stays when it is rebuilt); the one that takes writes wins.
	url string

	mu      sync.Mutex
	slots   [2]*pgcluster.Cluster
	primary int // index of the primary's slot
}

// startDatabase starts the primary and, if standby, its standby.
func startDatabase(ctx context.Context, dir string, settings map[string]string, standby bool, log zerolog.Logger) (*database, error) {
	d := &database{dir: dir, settings: settings, log: log}
	p, err := d.open(0, nil)
	if err != nil {
		return nil, err
	}
	d.slots[0] = p
	if err := p.Start(ctx); err != nil {
		return d, err
	}
	conn, err := pgx.Connect(ctx, p.ConnString("postgres"))
	if err != nil {
		return d, err
	}
	_, err = conn.Exec(ctx, `CREATE DATABASE agq`)
	conn.Close(ctx)
	if err != nil {
		return d, err
	}
	if !standby {
		d.url = p.ConnString("agq")
		return d, nil
	}
	if err := d.newStandby(ctx, 1); err != nil {
		return d, err
	}
	d.url = fmt.Sprintf("host=%s,%s port=5432,5432 user=agq dbname=agq sslmode=disable target_session_attrs=read-write",
		d.slots[0].SocketDir(), d.slots[1].SocketDir())
	return d, nil
}

func (d *database) slotDir(i int) string { return filepath.Join(d.dir, fmt.Sprintf("pg%d", i)) }

func (d *database) open(i int, primary *pgcluster.Cluster) (*pgcluster.Cluster, error) {
	dir := d.slotDir(i)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	return pgcluster.Open(pgcluster.Config{DataDir: dir, Settings: d.settings, Logger: d.log, StandbyOf: primary})
}

// newStandby makes slot i a fresh standby of the primary and has the
// primary wait for it at each commit.
func (d *database) newStandby(ctx context.Context, i int) error {
	p := d.slots[d.primary]
	s, err := d.open(i, p)
	if err != nil {
		return err
	}
	d.slots[i] = s
	if err := s.Start(ctx); err != nil {
		return err
	}
	return p.RequireSynchronousStandby(ctx)
}

// primaryURL reaches the primary alone, for the final accounting.
func (d *database) primaryURL() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.slots[d.primary].ConnString("agq")
}

// restart stops the primary (fast: SIGINT; immediate: SIGQUIT, as after a
// crash) and starts it again.
func (d *database) restart(ctx context.Context, immediate bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.slots[d.primary]
	stop := p.Stop
	if immediate {
		stop = p.Crash
	}
	if err := stop(); err != nil {
		return err
	}
	return p.Start(ctx)
}

// failover kills the primary with SIGKILL and promotes the standby.
func (d *database) failover(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.primary
	if d.slots[1-old] == nil {
		return errors.New("no standby to fail over to")
	}
	if err := d.slots[old].Kill(); err != nil {
		return err
	}
	if err := d.slots[1-old].Promote(ctx); err != nil {
		return err
	}
	d.primary = 1 - old
	return nil
}

// rebuildStandby makes the slot lost in a fail-over a new standby of the
// primary.
func (d *database) rebuildStandby(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	lost := 1 - d.primary
	d.slots[lost].Close()
	if err := os.RemoveAll(d.slotDir(lost)); err != nil {
		return err
	}
	return d.newStandby(ctx, lost)
}

func (d *database) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.slots {
		if s != nil {
			s.Close()
		}
	}
}
