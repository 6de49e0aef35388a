package agqtest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/config"
	"github.com/agq/agq/internal/node"
)

// Agq is an in-process agq node under test.
type Agq struct {
	Node        *node.Node
	Config      config.Config
	Addr        string
	HTTPAddr    string
	AdminKey    string
	DatabaseURL string
}

// Option adjusts a test node's configuration.
type Option func(*config.Config)

// DefaultConfig is what a test node starts with before options: a fresh
// database, loopback listeners on free ports, and a known admin key.
func DefaultConfig(t testing.TB) config.Config {
	cfg, err := config.Load(nil, func(string) string { return "" }, os.Stderr)
	if err != nil {
		t.Fatalf("agqtest: default config: %v", err)
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTPListen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.DatabaseURL = NewDatabase(t)
	cfg.AdminKey = auth.GenerateKey()
	return cfg
}

// Start starts an in-process node and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Agq {
	t.Helper()
	cfg := DefaultConfig(t)
	for _, o := range opts {
		o(&cfg)
	}
	return StartConfig(t, cfg)
}

// StartConfig starts an in-process node with exactly cfg.
func StartConfig(t testing.TB, cfg config.Config) *Agq {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	if os.Getenv("AGQ_TEST_LOG") != "" {
		log = log.Level(zerolog.DebugLevel)
	}
	n, err := node.Start(ctx, cfg, log)
	if err != nil {
		t.Fatalf("agqtest: starting agq: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return &Agq{Node: n, Config: cfg, Addr: n.RESPAddr(), HTTPAddr: n.HTTPAddr(), AdminKey: cfg.AdminKey, DatabaseURL: cfg.DatabaseURL}
}

// Client returns a go-redis client with the given options completed by the
// node's address; it is closed when the test ends.
func (a *Agq) Client(t testing.TB, o redis.Options) *redis.Client {
	t.Helper()
	o.Addr = a.Addr
	c := redis.NewClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Admin returns a go-redis client authenticated with the admin key.
func (a *Agq) Admin(t testing.TB) *redis.Client {
	t.Helper()
	return a.Client(t, redis.Options{Password: a.AdminKey})
}

// CreateKey mints a key for principal with role through KEY.CREATE.
func (a *Agq) CreateKey(t testing.TB, role, principal string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key, err := a.Admin(t).Do(ctx, "KEY.CREATE", role, principal).Text()
	if err != nil {
		t.Fatalf("agqtest: KEY.CREATE %s %s: %v", role, principal, err)
	}
	return key
}

// RedisCLI runs the real redis-cli against the node with args (connection
// flags are added) and returns its combined output, trimmed.
func (a *Agq) RedisCLI(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := a.RedisCLICommand(ctx, t, args...).CombinedOutput()
	return strings.TrimRight(string(out), "\n"), err
}

// RedisCLICommand prepares the real redis-cli against the node: -h and -p
// come first, then args. Its environment is the test's without REDISCLI_*
// variables, with HOME in a temporary directory so that an interactive
// session's history stays out of the user's home; callers may add to
// cmd.Env, set cmd.Stdin, and so on.
func (a *Agq) RedisCLICommand(ctx context.Context, t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	host, port := splitHostPort(t, a.Addr)
	full := append([]string{"-h", host, "-p", port}, args...)
	cmd := exec.CommandContext(ctx, RedisCLIPath(t), full...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDISCLI_") && !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+t.TempDir())
	return cmd
}

// RedisCLIPath finds the redis-cli binary; its absence fails the test, since
// .ci/run installs it.
func RedisCLIPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("agqtest: redis-cli not found on PATH (apt-get install -y redis-tools): %v", err)
	}
	return p
}

func splitHostPort(t testing.TB, addr string) (string, string) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		t.Fatalf("agqtest: bad address %q", addr)
	}
	return addr[:i], addr[i+1:]
}

// Eventually polls cond until it returns nil or the deadline passes, then
// fails with cond's last error.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
