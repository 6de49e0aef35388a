package store_test

import (
	"context"
	"testing"
	"time"
)

// A heartbeat never waits for a job row another transaction holds: the
// sweeps lock jobs before their workers' rows, so a heartbeat waiting
// there while holding its worker's row would deadlock with them until
// PostgreSQL's deadlock_timeout broke it. The held job keeps its lease
// until the next heartbeat, which extends it. A job only key-share locked
// (as inserting its logs, steps or signals does) is extended at once.
func TestAHeartbeatSkipsAJobAnotherTransactionHolds(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	fromRunning.build(t, b, "held")
	fromRunning.build(t, b, "free")
	leaseOf := func(id string) time.Time {
		t.Helper()
		var at time.Time
		if err := b.st.Pool.QueryRow(b.ctx, `SELECT lease_expires_at FROM jobs WHERE id = $1`, id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	heldLease, freeLease := leaseOf("held"), leaseOf("free")

	tx, err := b.st.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx)
	if _, err := tx.Exec(b.ctx, `SELECT 1 FROM jobs WHERE id = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, `SELECT 1 FROM jobs WHERE id = 'free' FOR KEY SHARE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if _, err := b.st.WorkerHeartbeat(ctx, holder, nil, time.Hour); err != nil {
		t.Fatalf("the heartbeat beside a held job: %v", err)
	}
	if got := leaseOf("free"); !got.After(freeLease) {
		t.Fatalf("the free job's lease: %v, was %v: not extended", got, freeLease)
	}
	if got := leaseOf("held"); !got.Equal(heldLease) {
		t.Fatalf("the held job's lease moved from %v to %v", heldLease, got)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.WorkerHeartbeat(b.ctx, holder, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := leaseOf("held"); !got.After(heldLease) {
		t.Fatalf("the held job's lease after the next heartbeat: %v, was %v", got, heldLease)
	}
}
