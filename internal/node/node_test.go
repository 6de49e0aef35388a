package node_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
	"github.com/agq/agq/internal/node"
	"github.com/agq/agq/migrations"
	"github.com/agq/agq/store"
)

// The harness's cluster serves the external-database tests; the managed
// ones start PostgreSQL of their own, as agq does for users.
func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// shortDataDir is a data dir whose socket path fits the unix limit (test
// temp dirs are too deep). As root postgres runs as its own user, which must
// be able to pass through it.
func shortDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agqn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// baseConfig is the default configuration with loopback listeners on free
// ports and neither a database URL nor an admin key.
func baseConfig(t *testing.T, dataDir string) config.Config {
	t.Helper()
	cfg, err := config.Load(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = dataDir
	return cfg
}

func client(t *testing.T, addr string, o redis.Options) *redis.Client {
	t.Helper()
	o.Addr = addr
	if o.MaxRetries == 0 {
		o.MaxRetries = -1
	}
	c := redis.NewClient(&o)
	t.Cleanup(func() { c.Close() })
	return c
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func readAdminKey(t *testing.T, dataDir string) string {
	t.Helper()
	path := filepath.Join(dataDir, "admin.key")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("admin key file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %v, want 0600", path, st.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(raw))
	if b, err := hex.DecodeString(key); err != nil || len(b) != 32 {
		t.Fatalf("%s holds %q, want 64 hex characters", path, raw)
	}
	return key
}

func TestManagedNode(t *testing.T) {
	t.Parallel()
	dir := shortDataDir(t)
	cfg := baseConfig(t, dir)
	a := startNode(t, t, cfg)
	if a.Cluster() == nil {
		t.Fatal("no managed cluster although no database URL was given")
	}
	ctx := ctxT(t, 3*time.Minute)
	adminKey := readAdminKey(t, dir)
	keyFile, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	admin := client(t, a.RESPAddr(), redis.Options{Password: adminKey})
	var producerKey string
	// Nodes started in subtests belong to the whole test, which stops them.
	whole := t

	t.Run("TheGeneratedAdminKeyWorks", func(t *testing.T) {
		if got, err := admin.Ping(ctx).Result(); err != nil || got != "PONG" {
			t.Fatalf("PING with the generated key = %q, %v", got, err)
		}
	})
	t.Run("AdminMintsAProducerKey", func(t *testing.T) {
		producerKey, err = admin.Do(ctx, "KEY.CREATE", "producer", "p1").Text()
		if err != nil || len(producerKey) != 64 {
			t.Fatalf("KEY.CREATE producer p1 = %q, %v", producerKey, err)
		}
		p := client(t, a.RESPAddr(), redis.Options{Username: "p1", Password: producerKey})
		if got, err := p.Echo(ctx, "hi").Result(); err != nil || got != "hi" {
			t.Fatalf("ECHO as p1 = %q, %v", got, err)
		}
	})
	t.Run("HealthAndReadinessAnswer200", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body := httpGet(t, "http://"+a.HTTPAddr()+path); code != http.StatusOK {
				t.Errorf("GET %s = %d %q", path, code, body)
			}
		}
	})
	t.Run("MetricsParseAndCountAuthFailures", func(t *testing.T) {
		before := scrape(t, a.HTTPAddr())
		for _, name := range []string{"agq_commands_total", "agq_connections", "agq_auth_failures_total", "agq_command_duration_seconds"} {
			if before[name] == nil {
				t.Errorf("/metrics has no %s", name)
			}
		}
		wrong := client(t, a.RESPAddr(), redis.Options{Password: strings.Repeat("0", 64)})
		if err := wrong.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
			t.Fatalf("PING with a wrong key: %v", err)
		}
		after := scrape(t, a.HTTPAddr())
		b, f := sum(before["agq_auth_failures_total"]), sum(after["agq_auth_failures_total"])
		if f < b+1 {
			t.Fatalf("agq_auth_failures_total went from %v to %v after a failed AUTH", b, f)
		}
		if sum(after["agq_commands_total"]) <= sum(before["agq_commands_total"]) {
			t.Fatalf("agq_commands_total did not grow")
		}
	})
	t.Run("ReadinessFollowsPostgres", func(t *testing.T) {
		if err := a.Cluster().Stop(); err != nil {
			t.Fatalf("stopping postgres: %v", err)
		}
		agqtest.Eventually(t, 20*time.Second, func() error {
			if code, body := httpGet(t, "http://"+a.HTTPAddr()+"/readyz"); code != http.StatusServiceUnavailable {
				return fmt.Errorf("/readyz = %d %q with postgres down", code, body)
			}
			return nil
		})
		if code, _ := httpGet(t, "http://"+a.HTTPAddr()+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz = %d with postgres down; the process is up", code)
		}

		// A command that needs the database answers an error, and soon.
		start := time.Now()
		err := admin.Do(ctx, "KEY.LIST").Err()
		var rerr redis.Error
		if !errors.As(err, &rerr) || !strings.HasPrefix(err.Error(), "TRYAGAIN ") {
			t.Errorf("KEY.LIST with postgres down: %v; want a TRYAGAIN error reply", err)
		}
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("KEY.LIST with postgres down took %v", took)
		}
		// A key that must be looked up cannot be checked: that is not a wrong key.
		fresh := client(t, a.RESPAddr(), redis.Options{Username: "p1", Password: producerKey})
		if err := fresh.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN ") {
			t.Errorf("AUTH with postgres down: %v; want a TRYAGAIN error reply", err)
		}
		// What needs no database goes on.
		if got, err := admin.Ping(ctx).Result(); err != nil || got != "PONG" {
			t.Errorf("PING with postgres down = %q, %v", got, err)
		}
		if got, err := admin.Echo(ctx, "still here").Result(); err != nil || got != "still here" {
			t.Errorf("ECHO with postgres down = %q, %v", got, err)
		}

		if err := a.Cluster().Start(ctx); err != nil {
			t.Fatalf("starting postgres again: %v", err)
		}
		agqtest.Eventually(t, 30*time.Second, func() error {
			if code, body := httpGet(t, "http://"+a.HTTPAddr()+"/readyz"); code != http.StatusOK {
				return fmt.Errorf("/readyz = %d %q with postgres back", code, body)
			}
			return nil
		})
		agqtest.Eventually(t, 30*time.Second, func() error {
			return admin.Do(ctx, "KEY.LIST").Err()
		})
		if got, err := fresh.Echo(ctx, "back").Result(); err != nil || got != "back" {
			t.Fatalf("ECHO as p1 with postgres back = %q, %v", got, err)
		}
	})
	t.Run("RestartKeepsEveryKey", func(t *testing.T) {
		if err := a.Close(); err != nil {
			t.Fatalf("closing the node: %v", err)
		}
		b := startNode(t, whole, cfg)
		again, err := os.ReadFile(filepath.Join(dir, "admin.key"))
		if err != nil || string(again) != string(keyFile) {
			t.Fatalf("admin.key changed across a restart: %q → %q (%v)", keyFile, again, err)
		}
		readAdminKey(t, dir) // mode and shape still right
		for _, c := range []*redis.Client{
			client(t, b.RESPAddr(), redis.Options{Password: adminKey}),
			client(t, b.RESPAddr(), redis.Options{Username: "p1", Password: producerKey}),
		} {
			if got, err := c.Echo(ctx, "x").Result(); err != nil || got != "x" {
				t.Errorf("ECHO after restart = %q, %v", got, err)
			}
		}
		a = b
	})
	t.Run("ARevokedGeneratedKeyStaysRevokedAcrossARestart", func(t *testing.T) {
		admin := client(t, a.RESPAddr(), redis.Options{Password: adminKey})
		// The only admin cannot be revoked: nobody could mint keys after.
		if err := admin.Do(ctx, "KEY.REVOKE", "admin").Err(); err == nil || err.Error() != "ERR cannot revoke the last admin key" {
			t.Fatalf("KEY.REVOKE of the last admin: %v", err)
		}
		opsKey, err := admin.Do(ctx, "KEY.CREATE", "admin", "ops").Text()
		if err != nil {
			t.Fatalf("KEY.CREATE admin ops: %v", err)
		}
		if err := admin.Do(ctx, "KEY.REVOKE", "admin").Err(); err != nil {
			t.Fatalf("KEY.REVOKE admin: %v", err)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("closing the node: %v", err)
		}
		b := startNode(t, whole, cfg)
		if again, err := os.ReadFile(filepath.Join(dir, "admin.key")); err != nil || string(again) != string(keyFile) {
			t.Fatalf("admin.key was rewritten: %q → %q (%v)", keyFile, again, err)
		}
		old := client(t, b.RESPAddr(), redis.Options{Password: adminKey})
		if err := old.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
			t.Fatalf("PING with the revoked generated key after a restart: %v", err)
		}
		ops := client(t, b.RESPAddr(), redis.Options{Username: "ops", Password: opsKey})
		if err := ops.Do(ctx, "KEY.LIST").Err(); err != nil {
			t.Fatalf("KEY.LIST as ops after the restart: %v", err)
		}
	})
}

// startNode starts a node with cfg, failing t if it cannot; the node is
// closed when owner ends.
func startNode(t, owner *testing.T, cfg config.Config) *node.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, cfg, zerolog.New(zerolog.NewTestWriter(owner)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatalf("starting agq: %v", err)
	}
	owner.Cleanup(func() { n.Close() })
	return n
}

// scrape fetches /metrics and parses it as Prometheus text.
func scrape(t *testing.T, httpAddr string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, "http://"+httpAddr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return families
}

// sum adds a counter or gauge family's samples; 0 for a missing family.
func sum(f *dto.MetricFamily) float64 {
	var total float64
	if f == nil {
		return 0
	}
	for _, m := range f.GetMetric() {
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		}
	}
	return total
}

func TestTwoNodesStartOnOneFreshDatabase(t *testing.T) {
	t.Parallel()
	url := agqtest.NewEmptyDatabase(t)
	ctx := ctxT(t, 2*time.Minute)

	// Neither has an admin key: they race to mint one as well as to migrate.
	dirs := []string{t.TempDir(), t.TempDir()}
	nodes := make([]*node.Node, len(dirs))
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, dir := range dirs {
		cfg := baseConfig(t, dir)
		cfg.DatabaseURL = url
		wg.Add(1)
		go func() {
			defer wg.Done()
			log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
			nodes[i], errs[i] = node.Start(ctx, cfg, log)
		}()
	}
	wg.Wait()
	for i := range nodes {
		if errs[i] != nil {
			t.Errorf("node %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() { nodes[i].Close() })
	}
	if t.Failed() {
		t.FailNow()
	}

	st, err := store.Open(ctx, store.Config{URL: url, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if v, err := migrations.Current(ctx, st.Pool); err != nil || v != migrations.Latest() {
		t.Fatalf("schema version %d (%v), want %d", v, err, migrations.Latest())
	}

	var keys []string
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "admin.key")); err == nil {
			keys = append(keys, readAdminKey(t, dir))
		}
	}
	if len(keys) != 1 {
		t.Fatalf("%d admin keys were written, want exactly 1", len(keys))
	}
	for i, n := range nodes {
		c := client(t, n.RESPAddr(), redis.Options{Password: keys[0]})
		if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
			t.Errorf("node %d: PING with the minted admin key = %q, %v", i, got, err)
		}
	}
}
