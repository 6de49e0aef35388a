package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/auth"
)

// agq runs its collector at defaultGCPercent unless GOGC says otherwise,
// as its metrics show (go_gc_gogc_percent).
func TestTheCollectorTargetIsAgqsUnlessGOGCIsSet(t *testing.T) {
	t.Parallel()
	bin, db := buildAgq(t), agqtest.NewDatabase(t)
	for _, tc := range []struct {
		gogc string // "" leaves GOGC unset
		want string
	}{
		{"", "300"},
		{"150", "150"},
	} {
		httpAddr := agqtest.StableAddr(t)
		cmd := exec.Command(bin, "--listen", agqtest.StableAddr(t), "--http-listen", httpAddr, "--database-url", db,
			"--data-dir", t.TempDir(), "--admin-key", auth.GenerateKey(), "--log-level", "warn")
		env := slices.DeleteFunc(withoutAgqEnv(os.Environ()), func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") })
		if tc.gogc != "" {
			env = append(env, "GOGC="+tc.gogc)
		}
		cmd.Env = env
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		got := gogcMetric(t, "http://"+httpAddr+"/metrics")
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if got != tc.want {
			t.Errorf("GOGC %q: go_gc_gogc_percent %s, want %s", tc.gogc, got, tc.want)
		}
	}
}

// gogcMetric reads go_gc_gogc_percent once agq serves its metrics.
func gogcMetric(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_gc_gogc_percent "); ok {
				res.Body.Close()
				return v
			}
		}
		res.Body.Close()
		t.Fatal("the metrics have no go_gc_gogc_percent")
	}
	t.Fatal("agq did not serve its metrics")
	return ""
}
