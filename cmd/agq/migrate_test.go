package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/migrations"
	"github.com/agq/agq/store"
)

func TestMigrateAppliesTheSchemaAndExits(t *testing.T) {
	bin := buildAgq(t)
	url := agqtest.NewEmptyDatabase(t)
	for run := 1; run <= 2; run++ { // the second run finds nothing to do
		cmd := exec.Command(bin, "migrate", "--database-url", url, "--data-dir", t.TempDir(), "--log-format", "json")
		cmd.Env = withoutAgqEnv(os.Environ())
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "migrations applied") {
			t.Fatalf("agq migrate (run %d): %v\n%s", run, err, out)
		}
	}
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if v, err := migrations.Current(ctx, st.Pool); err != nil || v != migrations.Latest() {
		t.Fatalf("schema version %d (%v), want %d", v, err, migrations.Latest())
	}
}
