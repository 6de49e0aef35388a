package pgcluster

import (
	"context"
	"maps"
	"testing"
)

// A synchronous standby has every commit the primary acknowledged: after
// the primary is killed with SIGKILL and the standby promoted, the rows are
// there and the new primary takes writes.
func TestStandbyTakesOverFromAKilledPrimary(t *testing.T) {
	t.Parallel()
	settings := maps.Clone(testSettings)
	settings["synchronous_commit"] = "on"
	primary, err := Open(Config{DataDir: newDataDir(t), Settings: settings, Logger: testLogger(t)})
	requireNoError(t, err)
	t.Cleanup(func() { primary.Close() })
	startCluster(t, primary)
	execSQL(t, primary, "CREATE TABLE kept (v int)")

	standby, err := Open(Config{DataDir: newDataDir(t), Settings: settings, Logger: testLogger(t), StandbyOf: primary})
	requireNoError(t, err)
	t.Cleanup(func() { standby.Close() })
	startCluster(t, standby)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	requireNoError(t, primary.RequireSynchronousStandby(ctx))
	execSQL(t, primary, "INSERT INTO kept SELECT generate_series(1, 100)")
	requireEqual(t, queryInt(t, standby, "SELECT pg_is_in_recovery()::int"), 1)

	requireNoError(t, primary.Kill())
	if _, err := connect(primary); err == nil {
		t.Fatal("the killed primary still accepts connections")
	}
	requireNoError(t, standby.Promote(ctx))
	requireEqual(t, queryInt(t, standby, "SELECT count(*) FROM kept"), 100)
	execSQL(t, standby, "INSERT INTO kept VALUES (101)")
	requireEqual(t, queryInt(t, standby, "SELECT count(*) FROM kept"), 101)
}
