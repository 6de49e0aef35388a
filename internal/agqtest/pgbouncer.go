package agqtest

import (
	"context"
	"testing"
	"time"

	"github.com/agq/agq/internal/pgcluster"
)

// StartPgBouncer starts PgBouncer in transaction mode in front of every
// database of cl, on a loopback port; it is stopped when the test ends. A
// missing PgBouncer fails the test: .ci/install-deps installs it.
func StartPgBouncer(t testing.TB, cl *pgcluster.Cluster) *pgcluster.PgBouncer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := cl.StartPgBouncer(ctx, StableAddr(t))
	if err != nil {
		t.Fatalf("agqtest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer.log:\n%s", b.Log())
		}
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}
