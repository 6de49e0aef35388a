package registry_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/clock"
	"github.com/agq/agq/registry"
	"github.com/agq/agq/store"
)

func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }

type presenceBundle struct {
	ctx   context.Context
	st    *store.Store
	clock *clock.Fake
	p     *registry.Presence
}

func newPresence(t *testing.T) *presenceBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := store.Open(ctx, store.Config{URL: agqtest.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	fake := clock.NewFake(time.Now())
	p := registry.NewPresence(registry.PresenceConfig{Store: st, NodeID: "node-1", Logger: zerolog.Nop(), Clock: fake})
	return &presenceBundle{ctx: ctx, st: st, clock: fake, p: p}
}

func (b *presenceBundle) write(t *testing.T) {
	t.Helper()
	if err := b.p.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
}

// gone answers the principal's row on node-1: whether there is one, and
// how long ago its last connection closed (-1 while one is held).
func (b *presenceBundle) gone(t *testing.T, principal string) (bool, time.Duration) {
	t.Helper()
	var ago *float64
	err := b.st.Pool.QueryRow(b.ctx, `SELECT extract(epoch FROM now() - gone_at)::float8 FROM worker_connections
		WHERE principal = $1 AND node_id = 'node-1'`, principal).Scan(&ago)
	if err != nil {
		return false, 0
	}
	if ago == nil {
		return true, -1
	}
	return true, time.Duration(*ago * float64(time.Second))
}

func (b *presenceBundle) rows(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPresenceWritesWhenAPrincipalsLastConnectionCloses(t *testing.T) {
	t.Parallel()
	b := newPresence(t)
	b.p.Connected("w1")
	b.p.Connected("w1")
	b.write(t)
	if ok, ago := b.gone(t, "w1"); !ok || ago != -1 {
		t.Fatalf("two connections held: row %v, gone %v ago", ok, ago)
	}
	b.p.Disconnected("w1")
	b.write(t)
	if _, ago := b.gone(t, "w1"); ago != -1 {
		t.Fatalf("one connection left: gone %v ago", ago)
	}
	b.p.Disconnected("w1")
	// Written late, the time is when it closed.
	b.clock.Advance(5 * time.Second)
	b.write(t)
	if _, ago := b.gone(t, "w1"); ago < 4*time.Second || ago > 7*time.Second {
		t.Fatalf("the last connection closed 5 s ago: gone %v ago", ago)
	}
	b.p.Connected("w1")
	b.write(t)
	if _, ago := b.gone(t, "w1"); ago != -1 {
		t.Fatalf("back: gone %v ago", ago)
	}
}

// A leaving node forgets its rows first, and the connections it closes on
// its way out are never written.
func TestPresenceLeavingWritesNoDeparture(t *testing.T) {
	t.Parallel()
	b := newPresence(t)
	b.p.Connected("w1")
	b.write(t)
	if err := b.p.Leave(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.p.Disconnected("w1")
	b.write(t)
	if n := b.rows(t, "agq_nodes") + b.rows(t, "worker_connections"); n != 0 {
		t.Fatalf("a node that left keeps %d rows", n)
	}
}

// A node the leader forgot (silent too long) writes all it holds again.
func TestPresenceForgottenWritesAllAgain(t *testing.T) {
	t.Parallel()
	b := newPresence(t)
	b.p.Connected("w1")
	b.write(t)
	if _, err := b.st.Pool.Exec(b.ctx, `UPDATE agq_nodes SET seen_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if n, err := b.st.NodesForget(b.ctx, 10*time.Minute); err != nil || n != 1 {
		t.Fatalf("forgot %d, %v", n, err)
	}
	b.write(t) // finds its row gone
	b.write(t)
	if ok, ago := b.gone(t, "w1"); !ok || ago != -1 {
		t.Fatalf("after being forgotten: row %v, gone %v ago", ok, ago)
	}
}
