package config_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/config"
)

// The TOML key tables are checked end to end against a real node.
func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }

// env is a fake environment.
type env map[string]string

func (e env) get(name string) string { return e[name] }

func writeTOML(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agq.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func load(t *testing.T, args []string, e env) config.Config {
	t.Helper()
	c, err := config.Load(args, e.get, io.Discard)
	if err != nil {
		t.Fatalf("Load(%q, %v): %v", args, e, err)
	}
	return c
}

func TestDefaultsAreTheBriefs(t *testing.T) {
	t.Parallel()
	c := load(t, nil, env{})
	got := []any{c.Listen, c.HTTPListen, c.DatabaseURL, c.DataDir, c.AdminKey, c.HeartbeatInterval, c.JobTimeout, c.AckTimeout, c.MaxPayload, c.MaxAttempts, c.LogLevel}
	want := []any{"127.0.0.1:6380", "127.0.0.1:6381", "", "./agq-data", "", 30 * time.Second, time.Hour, 30 * time.Second, int64(2 << 20), 3, "info"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("default #%d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestFlagsBeatEnvBeatFileBeatDefaults(t *testing.T) {
	t.Parallel()
	file := writeTOML(t, `
listen = "127.0.0.1:7001"
heartbeat_interval = "11s"
max_attempts = 7
`)
	fileEnv := env{"AGQ_CONFIG": file}
	allEnv := env{"AGQ_CONFIG": file, "AGQ_LISTEN": "127.0.0.1:7002", "AGQ_HEARTBEAT_INTERVAL": "12s", "AGQ_MAX_ATTEMPTS": "8"}
	flags := []string{"--listen", "127.0.0.1:7003", "--heartbeat-interval=13s", "--max-attempts", "9"}

	tests := []struct {
		name      string
		args      []string
		env       env
		listen    string
		heartbeat time.Duration
		attempts  int
	}{
		{"DefaultsWhenNothingIsSet", nil, env{}, "127.0.0.1:6380", 30 * time.Second, 3},
		{"FileBeatsDefaults", nil, fileEnv, "127.0.0.1:7001", 11 * time.Second, 7},
		{"EnvBeatsFile", nil, allEnv, "127.0.0.1:7002", 12 * time.Second, 8},
		{"FlagsBeatEnv", flags, allEnv, "127.0.0.1:7003", 13 * time.Second, 9},
		{"FlagsBeatFile", flags, fileEnv, "127.0.0.1:7003", 13 * time.Second, 9},
		{"EnvBeatsDefaults", nil, env{"AGQ_LISTEN": "127.0.0.1:7002", "AGQ_HEARTBEAT_INTERVAL": "12s", "AGQ_MAX_ATTEMPTS": "8"}, "127.0.0.1:7002", 12 * time.Second, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := load(t, tc.args, tc.env)
			if c.Listen != tc.listen || c.HeartbeatInterval != tc.heartbeat || c.MaxAttempts != tc.attempts {
				t.Fatalf("listen %q heartbeat %v attempts %d; want %q %v %d",
					c.Listen, c.HeartbeatInterval, c.MaxAttempts, tc.listen, tc.heartbeat, tc.attempts)
			}
		})
	}
	t.Run("ConfigFlagBeatsAGQ_CONFIG", func(t *testing.T) {
		other := writeTOML(t, `listen = "127.0.0.1:7004"`)
		c := load(t, []string{"--config", other}, fileEnv)
		if c.Listen != "127.0.0.1:7004" || c.ConfigFile != other {
			t.Fatalf("listen %q from %q", c.Listen, c.ConfigFile)
		}
	})
	t.Run("FileIntegersAndStringsBothWork", func(t *testing.T) {
		c := load(t, []string{"--config", writeTOML(t, "max_payload = 1024\nmax_attempts = \"4\"")}, env{})
		if c.MaxPayload != 1024 || c.MaxAttempts != 4 {
			t.Fatalf("max payload %d, attempts %d", c.MaxPayload, c.MaxAttempts)
		}
	})
}

func TestHTTPListenOffDisablesTheSidePort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  env
	}{
		{"FromEnv", nil, env{"AGQ_HTTP_LISTEN": "off"}},
		{"FromFlag", []string{"--http-listen=off"}, env{}},
		{"FromFile", nil, env{"AGQ_CONFIG": writeTOML(t, `http_listen = "off"`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := load(t, tc.args, tc.env); c.HTTPListen != "" {
				t.Fatalf("HTTPListen = %q, want disabled", c.HTTPListen)
			}
		})
	}
}

func TestBadSettingsAreErrorsNamingThem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  env
		file string
		want []string // every one must appear in the error
	}{
		{name: "UnknownFileKey", file: "heartbeat = \"5s\"\n", want: []string{`"heartbeat"`, "unknown setting"}},
		{name: "FlagNameWithDashesInTheFile", file: "job-timeout = \"5s\"\n", want: []string{`"job-timeout"`}},
		{name: "BadDurationInEnv", env: env{"AGQ_JOB_TIMEOUT": "soon"}, want: []string{"job-timeout", "AGQ_JOB_TIMEOUT", "duration"}},
		{name: "NegativeDurationFlag", args: []string{"--ack-timeout=-1s"}, want: []string{"ack-timeout", "--ack-timeout"}},
		{name: "DurationWithoutUnitInFile", file: "heartbeat_interval = 30\n", want: []string{"heartbeat-interval", "config file"}},
		{name: "BadIntegerInEnv", env: env{"AGQ_MAX_PAYLOAD": "2MiB"}, want: []string{"max-payload", "AGQ_MAX_PAYLOAD"}},
		{name: "ZeroAttempts", args: []string{"--max-attempts", "0"}, want: []string{"max-attempts"}},
		{name: "BoolInFile", file: "listen = true\n", want: []string{"listen"}},
		{name: "BadLogLevel", file: "log_level = \"loud\"\n", want: []string{"log-level", "config file"}},
		{name: "BadLogFormat", env: env{"AGQ_LOG_FORMAT": "xml"}, want: []string{"log-format", "AGQ_LOG_FORMAT"}},
		{name: "KeyTableOfNumbers", file: "[workers]\nw1 = 5\n", want: []string{"[workers]", `"w1"`}},
		{name: "KeyTableNotATable", file: "admins = \"k\"\n", want: []string{"[admins]"}},
		{name: "NotTOML", file: "listen = \n", want: []string{"agq.toml"}},
		{name: "UnknownFlag", args: []string{"--colour"}, want: []string{"colour"}},
		{name: "StrayArgument", args: []string{"serve"}, want: []string{`"serve"`}},
		{name: "DirectURLWithoutDatabaseURL", env: env{"AGQ_DIRECT_DATABASE_URL": "host=/run/pg"}, want: []string{"direct-database-url", "database-url"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.env
			if e == nil {
				e = env{}
			}
			if tc.file != "" {
				e["AGQ_CONFIG"] = writeTOML(t, tc.file)
			}
			_, err := config.Load(tc.args, e.get, io.Discard)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		_, err := config.Load([]string{"--config", "/nonexistent/agq.toml"}, env{}.get, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/agq.toml") {
			t.Fatalf("error %v does not name the file", err)
		}
	})
}

func TestKeyTablesParse(t *testing.T) {
	t.Parallel()
	file := writeTOML(t, `
admin_key = "from-the-file"

[admins]
"ops@example.com" = "k-admin"

[workers]
"worker-001" = "k-worker"
"worker-002" = "sha256:`+strings.Repeat("ab", 32)+`"

[producers]
"billing" = "k-producer"
`)
	c := load(t, []string{"--config", file}, env{})
	if c.AdminKey != "from-the-file" {
		t.Errorf("AdminKey = %q", c.AdminKey)
	}
	if c.Admins["ops@example.com"] != "k-admin" || len(c.Admins) != 1 {
		t.Errorf("Admins = %v", c.Admins)
	}
	if c.Workers["worker-001"] != "k-worker" || c.Workers["worker-002"] != "sha256:"+strings.Repeat("ab", 32) || len(c.Workers) != 2 {
		t.Errorf("Workers = %v", c.Workers)
	}
	if c.Producers["billing"] != "k-producer" || len(c.Producers) != 1 {
		t.Errorf("Producers = %v", c.Producers)
	}
}

func TestHelpNamesEveryVariable(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := config.Load([]string{"--help"}, env{}.get, &out)
	if !config.IsHelp(err) {
		t.Fatalf("--help: %v", err)
	}
	for _, name := range []string{
		"AGQ_LISTEN", "AGQ_HTTP_LISTEN", "AGQ_DATABASE_URL", "AGQ_DIRECT_DATABASE_URL", "AGQ_DATA_DIR", "AGQ_CONFIG", "AGQ_ADMIN_KEY",
		"AGQ_HEARTBEAT_INTERVAL", "AGQ_JOB_TIMEOUT", "AGQ_ACK_TIMEOUT", "AGQ_MAX_PAYLOAD", "AGQ_LOG_LEVEL", "AGQ_LOG_FORMAT",
	} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("--help does not mention %s", name)
		}
	}
	for _, flag := range []string{"-listen", "-http-listen", "-database-url", "-direct-database-url", "-data-dir", "-config", "-admin-key", "-heartbeat-interval", "-job-timeout", "-ack-timeout", "-max-payload", "-log-level", "-log-format"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("--help does not mention %s", flag)
		}
	}
}

func TestKeysFromTheFileAuthenticate(t *testing.T) {
	t.Parallel()
	workerKey, producerKey := auth.GenerateKey(), auth.GenerateKey()
	digest := sha256.Sum256([]byte(producerKey))
	adminKey := auth.GenerateKey()
	// Everything the node needs comes from the file.
	file := writeTOML(t, fmt.Sprintf(`
listen = "127.0.0.1:0"
http_listen = "off"
data_dir = %q
database_url = %q
admin_key = %q

[workers]
"worker-001" = %q

[producers]
"p" = "sha256:%s"
`, t.TempDir(), agqtest.NewDatabase(t), adminKey, workerKey, hex.EncodeToString(digest[:])))
	cfg, err := config.Load([]string{"--config", file}, env{}.get, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a := agqtest.StartConfig(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rows, err := a.Admin(t).Do(ctx, "KEY.LIST").Slice()
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{}
	for _, r := range rows {
		row := r.([]any)
		roles[row[0].(string)] = row[1].(string) + "/" + row[2].(string)
	}
	if roles["worker-001"] != "worker/config" || roles["p"] != "producer/config" {
		t.Fatalf("KEY.LIST roles = %v", roles)
	}

	for _, tc := range []struct {
		name, user, key, principal string
	}{
		{"WorkerByName", "worker-001", workerKey, "worker-001"},
		{"WorkerByKeyAlone", "", workerKey, "worker-001"},
		{"ProducerFromDigestByName", "p", producerKey, "p"},
		{"ProducerFromDigestByKeyAlone", "", producerKey, "p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := a.Client(t, redis.Options{Username: tc.user, Password: tc.key, MaxRetries: -1})
			if got, err := c.Echo(ctx, "hi").Result(); err != nil || got != "hi" {
				t.Fatalf("ECHO = %q, %v", got, err)
			}
			// Neither role may manage keys: the refusal names the principal.
			err := c.Do(ctx, "KEY.LIST").Err()
			want := "NOPERM User " + tc.principal + " has no permissions to run the 'key.list' command"
			if err == nil || err.Error() != want {
				t.Fatalf("KEY.LIST = %v, want %q", err, want)
			}
		})
	}
	t.Run("TheDigestItselfIsNotAKey", func(t *testing.T) {
		c := a.Client(t, redis.Options{Password: hex.EncodeToString(digest[:]), MaxRetries: -1})
		if err := c.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
			t.Fatalf("PING with the digest as key: %v", err)
		}
	})
}

func TestTLSSettings(t *testing.T) {
	get := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	c, err := config.Load(nil, get(map[string]string{"AGQ_LISTEN": "off", "AGQ_TLS_LISTEN": "127.0.0.1:6390",
		"AGQ_TLS_CERT_FILE": "s.pem", "AGQ_TLS_KEY_FILE": "k.pem", "AGQ_TLS_AUTH_CLIENTS": "optional"}), io.Discard)
	if err != nil || c.Listen != "" || c.TLSListen != "127.0.0.1:6390" || c.TLSAuthClients != "optional" {
		t.Fatalf("Load = %+v, %v", c, err)
	}
	for name, env := range map[string]map[string]string{
		"NoListener":     {"AGQ_LISTEN": "off"},
		"TLSWithoutCert": {"AGQ_TLS_LISTEN": ":6390"},
		"CertWithoutKey": {"AGQ_TLS_CERT_FILE": "s.pem"},
		"BadAuthClients": {"AGQ_TLS_AUTH_CLIENTS": "maybe"},
	} {
		if _, err := config.Load(nil, get(env), io.Discard); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
