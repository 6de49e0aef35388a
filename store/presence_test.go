package store_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// WorkersMarkGone, case by case: which rows of worker_connections make a
// worker lost, on which nodes. Times are seconds before now; the rule is
// gone for 10 s, nodes up when seen within 5 s, a start-up grace of 10 s.
func TestWorkersMarkGone(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	nodes := map[string][2]int{ // started, seen
		"up":       {3600, 0},
		"up-2":     {3600, 0},
		"starting": {15, 0},
		"died":     {3600, 30},
		"lagging":  {3600, 2},
	}
	for id, at := range nodes {
		exec(t, b, `INSERT INTO agq_nodes (node_id, started_at, seen_at)
			VALUES ($1, now() - make_interval(secs => $2), now() - make_interval(secs => $3))`, id, at[0], at[1])
	}
	const connected = -1
	type row struct {
		node string
		gone int // seconds ago, or connected
	}
	for _, tc := range []struct {
		worker string
		rows   []row
		lost   bool
	}{
		{"gone-long-enough", []row{{"up", 11}}, true},
		{"gone-from-two-nodes", []row{{"up", 30}, {"up-2", 11}}, true},
		{"connected-elsewhere", []row{{"up", 11}, {"up-2", connected}}, false},
		{"gone-not-long-enough", []row{{"up", 5}}, false},
		{"gone-on-one-not-long-enough-on-another", []row{{"up", 30}, {"up-2", 5}}, false},
		// Lost in its node's start-up grace: that row counts for nothing.
		{"gone-while-its-node-started", []row{{"starting", 11}}, false},
		{"gone-while-its-node-started-and-from-another", []row{{"starting", 11}, {"up", 11}}, true},
		// A node that died tells nothing, either way.
		{"gone-on-a-node-that-died", []row{{"died", 40}}, false},
		{"connected-on-a-node-that-died", []row{{"died", connected}, {"up", 11}}, true},
		// Not seen since the deadline: a reconnection may be unwritten.
		{"gone-on-a-node-not-seen-since", []row{{"lagging", 11}}, false},
	} {
		b.register(t, tc.worker, "t")
		b.submit(t, trJob(tc.worker, 3, trBackoff))
		b.claim(t, tc.worker, tc.worker)
		for _, r := range tc.rows {
			var gone any
			if r.gone != connected {
				gone = r.gone
			}
			exec(t, b, `INSERT INTO worker_connections (principal, node_id, gone_at)
				VALUES ($1, $2, now() - make_interval(secs => $3::int))`, tc.worker, r.node, gone)
		}
	}
	// Rows of a principal with no live worker are forgotten.
	exec(t, b, `INSERT INTO worker_connections VALUES ('nobody', 'up', now() - interval '11 seconds')`)

	params := store.GoneParams{After: 10 * time.Second, Grace: 10 * time.Second, NodeSilence: 5 * time.Second, Limit: 100}
	dead, err := b.st.WorkersMarkGone(b.ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dead)
	want := []string{"connected-on-a-node-that-died", "gone-from-two-nodes", "gone-long-enough", "gone-while-its-node-started-and-from-another"}
	if !slices.Equal(dead, want) {
		t.Fatalf("lost %v, want %v", dead, want)
	}
	for _, id := range want {
		j := b.get(t, id)
		// Given back as after missed heartbeats, the attempt counted.
		if j.Status == records.StatusRunning || j.WorkerID != nil || !strings.Contains(string(j.Errors), "worker "+id+" was lost while holding the job") {
			t.Errorf("job of lost worker %s: %s, worker %v, errors %s", id, j.Status, j.WorkerID, j.Errors)
		}
		if n := count(t, b, `SELECT count(*) FROM worker_connections WHERE principal = $1`, id); n != 0 {
			t.Errorf("lost worker %s keeps %d rows", id, n)
		}
	}
	if j := b.get(t, "connected-elsewhere"); j.Status != records.StatusRunning {
		t.Errorf("the job of a connected worker is %s", j.Status)
	}
	if n := count(t, b, `SELECT count(*) FROM worker_connections WHERE principal = 'nobody'`); n != 0 {
		t.Errorf("the rows of a principal with no live worker stay: %d", n)
	}
	again, err := b.st.WorkersMarkGone(b.ctx, params)
	if err != nil || len(again) != 0 {
		t.Fatalf("a second sweep: %v, %v", again, err)
	}
}

// A node writes its changes with its seen time, and forgets its rows when
// it leaves; one silent too long is forgotten by the leader.
func TestNodeSeenLeaveAndForget(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	fresh, err := b.st.NodeSeen(b.ctx, "n1", []store.PresenceChange{{Principal: "w1"}, {Principal: "w2", Gone: true, Ago: 3 * time.Second}})
	if err != nil || !fresh {
		t.Fatalf("first write: fresh %v, %v", fresh, err)
	}
	if fresh, err := b.st.NodeSeen(b.ctx, "n1", nil); err != nil || fresh {
		t.Fatalf("second write: fresh %v, %v", fresh, err)
	}
	if n := count(t, b, `SELECT count(*) FROM worker_connections WHERE principal = 'w1' AND node_id = 'n1' AND gone_at IS NULL`); n != 1 {
		t.Errorf("w1's connection not written as held: %d", n)
	}
	if n := count(t, b, `SELECT count(*) FROM worker_connections WHERE principal = 'w2'
		AND gone_at BETWEEN now() - interval '4 seconds' AND now() - interval '2 seconds'`); n != 1 {
		t.Errorf("w2's connection not written as gone 3 s ago: %d", n)
	}
	if _, err := b.st.NodeSeen(b.ctx, "n2", []store.PresenceChange{{Principal: "w1"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.st.NodeLeave(b.ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, b, `SELECT count(*) FROM agq_nodes WHERE node_id = 'n1'`) + count(t, b, `SELECT count(*) FROM worker_connections WHERE node_id = 'n1'`); n != 0 {
		t.Errorf("n1 left %d rows", n)
	}
	exec(t, b, `UPDATE agq_nodes SET seen_at = now() - interval '1 hour' WHERE node_id = 'n2'`)
	if n, err := b.st.NodesForget(b.ctx, 10*time.Minute); err != nil || n != 1 {
		t.Fatalf("forgot %d nodes, %v", n, err)
	}
	if n := count(t, b, `SELECT count(*) FROM worker_connections`); n != 0 {
		t.Errorf("the forgotten node's rows stay: %d", n)
	}
	if fresh, err := b.st.NodeSeen(b.ctx, "n2", nil); err != nil || !fresh {
		t.Fatalf("a forgotten node seen again: fresh %v, %v", fresh, err)
	}
}

func exec(t *testing.T, b *trBundle, sql string, args ...any) {
	t.Helper()
	if _, err := b.st.Pool.Exec(b.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, b *trBundle, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.st.Pool.QueryRow(b.ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", sql, err))
	}
	return n
}
