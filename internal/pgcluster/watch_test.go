package pgcluster

import (
	"syscall"
	"testing"
	"time"
)

// A postgres killed behind agq's back (kill -9 of the postmaster) is started
// again, its data kept; a Stop is never undone.
func TestPostgresKilledBehindOurBackIsStartedAgain(t *testing.T) {
	t.Parallel()
	c := openCluster(t, newDataDir(t))
	startCluster(t, c)
	// Flushed: the test cluster commits without waiting for the WAL.
	execSQL(t, c, "SET synchronous_commit = on; CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")

	c.mu.Lock()
	first := c.pm.pid()
	c.mu.Unlock()
	requireNoError(t, syscall.Kill(first, syscall.SIGKILL))
	waitFor(t, testTimeout, func() bool {
		conn, err := connect(c)
		if err != nil {
			return false
		}
		conn.Close(t.Context())
		return true
	}, "postgres was not started again after it was killed")
	requireEqual(t, queryInt(t, c, "SELECT v FROM kept"), 42)
	c.mu.Lock()
	second := c.pm.pid()
	c.mu.Unlock()
	if second == first {
		t.Fatalf("postgres still runs as pid %d", first)
	}
	if err := syscall.Kill(-first, 0); err == nil {
		t.Fatal("processes of the killed postmaster's group are left")
	}

	requireNoError(t, c.Stop())
	time.Sleep(2 * time.Second) // past the first restart's pause
	if _, err := connect(c); err == nil {
		t.Fatal("postgres runs again after a Stop")
	}
}
