// Package config assembles agq's settings from defaults, an optional TOML
// file, AGQ_* environment variables and command-line flags, in rising order
// of precedence.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/rs/zerolog"
)

// Config is everything agq is told at start.
type Config struct {
	Listen            string
	HTTPListen        string
	DatabaseURL       string
	DataDir           string
	ConfigFile        string
	AdminKey          string
	HeartbeatInterval time.Duration
	WorkerGoneAfter   time.Duration // a worker with no connection left is lost after it; negative: never
	JobTimeout        time.Duration
	AckTimeout        time.Duration
	MaxPayload        int64
	MaxInputBuffer    int64
	MaxAttempts       int
	MaxClients        int
	MaxSnoozes        int
	MaxUnauth         int
	MaxUnauthPerAddr  int
	AuthTimeout       time.Duration
	RetainCompleted   time.Duration
	RetainFailed      time.Duration
	LogLevel          string
	LogFormat         string
	// DirectDatabaseURL reaches PostgreSQL itself for what needs a session
	// of its own (LISTEN, the leader's lock, migrations) when DatabaseURL
	// goes through a pooler; "" means DatabaseURL.
	DirectDatabaseURL string

	// TLSListen is the RESP-over-TLS address ("" for none). With TLSCertFile
	// and TLSKeyFile the HTTP side port is served over TLS too; with
	// TLSCACertFile clients present certificates as TLSAuthClients says
	// (yes, optional or no).
	TLSListen      string
	TLSCertFile    string
	TLSKeyFile     string
	TLSCACertFile  string
	TLSAuthClients string

	// UI turns the dashboard on the HTTP side port on or off; UIPrefix is
	// the path it is served under ("/" or "/agq/" behind a reverse proxy).
	UI       bool
	UIPrefix string

	// Keys from the TOML file's [admins], [workers], [producers] and
	// [viewers] tables: principal name to key or "sha256:<hex digest>".
	Admins    map[string]string
	Workers   map[string]string
	Producers map[string]string
	Viewers   map[string]string
}

// setting describes one configuration value: its flag name (the env name is
// AGQ_ plus the flag in upper snake case, the TOML key the flag in snake case).
type setting struct {
	flag  string
	def   string
	usage string
	set   func(c *Config, v string) error
}

var settings = []setting{
	{"listen", "127.0.0.1:6380", "RESP address (off: only the TLS listener)", func(c *Config, v string) error { c.Listen = v; return nil }},
	{"http-listen", "127.0.0.1:6381", "health and metrics address (off disables)", func(c *Config, v string) error { c.HTTPListen = v; return nil }},
	{"database-url", "", "external PostgreSQL URL (unset: managed local cluster in the data dir)", func(c *Config, v string) error { c.DatabaseURL = v; return nil }},
	{"direct-database-url", "", "PostgreSQL itself, for LISTEN, the leader's lock and migrations when database-url goes through PgBouncer (unset: database-url)", func(c *Config, v string) error { c.DirectDatabaseURL = v; return nil }},
	{"data-dir", "./agq-data", "managed cluster and generated admin key", func(c *Config, v string) error { c.DataDir = v; return nil }},
	{"admin-key", "", "an admin key (or sha256:<hex digest>)", func(c *Config, v string) error { c.AdminKey = v; return nil }},
	// Workers are told the interval in whole seconds (heartbeat_interval=N).
	{"heartbeat-interval", "30s", "heartbeat interval told to workers, whole seconds; dead after 3 missed", setter(time.ParseDuration,
		func(d time.Duration) bool { return d >= time.Second && d%time.Second == 0 }, "a duration of whole seconds, at least 1s, such as 30s",
		func(c *Config) *time.Duration { return &c.HeartbeatInterval })},
	{"worker-gone-after", "10s", "a worker none of whose connections is left is lost after this unless it comes back (off: heartbeats alone)", func(c *Config, v string) error {
		if strings.EqualFold(v, "off") {
			c.WorkerGoneAfter = -1
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("must be a positive duration such as 10s, or off")
		}
		c.WorkerGoneAfter = d
		return nil
	}},
	{"job-timeout", "1h", "default job timeout", durationSetter(func(c *Config) *time.Duration { return &c.JobTimeout })},
	{"ack-timeout", "30s", "unacknowledged-delivery timeout", durationSetter(func(c *Config) *time.Duration { return &c.AckTimeout })},
	{"max-payload", "2097152", "maximum bytes per job", bytesSetter(func(c *Config) *int64 { return &c.MaxPayload })},
	{"max-input-buffer", "268435456", "bytes all clients' unfinished commands may hold together", bytesSetter(func(c *Config) *int64 { return &c.MaxInputBuffer })},
	{"max-attempts", "3", "default attempts per job", intSetter(func(c *Config) *int { return &c.MaxAttempts })},
	{"max-snoozes", "100", "how often a job may be snoozed by its holder; the next snooze fails it", intSetter(func(c *Config) *int { return &c.MaxSnoozes })},
	{"max-clients", "10000", "maximum client connections", intSetter(func(c *Config) *int { return &c.MaxClients })},
	{"auth-timeout", "10s", "a connection that has not authenticated this long after connecting is closed", durationSetter(func(c *Config) *time.Duration { return &c.AuthTimeout })},
	{"max-unauthenticated", "0", "most connections not yet authenticated; past it a newcomer closes the oldest (0: half of max-clients)", countSetter(func(c *Config) *int { return &c.MaxUnauth })},
	{"max-unauthenticated-per-address", "1024", "most connections not yet authenticated from one source address; past it a newcomer closes that address's oldest", intSetter(func(c *Config) *int { return &c.MaxUnauthPerAddr })},
	{"retain-completed", "168h", "completed jobs are deleted after this", durationSetter(func(c *Config) *time.Duration { return &c.RetainCompleted })},
	{"retain-failed", "720h", "failed and cancelled jobs are deleted after this", durationSetter(func(c *Config) *time.Duration { return &c.RetainFailed })},
	{"ui", "on", "the dashboard on the HTTP side port: on or off", func(c *Config, v string) error {
		switch strings.ToLower(v) {
		case "on", "true", "1":
			c.UI = true
		case "off", "false", "0":
			c.UI = false
		default:
			return fmt.Errorf("must be on or off")
		}
		return nil
	}},
	{"ui-prefix", "/", "path prefix of the dashboard, for a reverse proxy (e.g. /agq/)", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, "?#%\\ ") || strings.Contains(v, "//") {
			return fmt.Errorf("must be a path such as / or /agq/")
		}
		if !strings.HasSuffix(v, "/") {
			v += "/"
		}
		c.UIPrefix = v
		return nil
	}},
	{"tls-listen", "", "RESP over TLS address, e.g. 127.0.0.1:6390 (needs tls-cert-file and tls-key-file)", func(c *Config, v string) error { c.TLSListen = v; return nil }},
	{"tls-cert-file", "", "server certificate (PEM); also puts the HTTP side port on TLS; reread on SIGHUP", func(c *Config, v string) error { c.TLSCertFile = v; return nil }},
	{"tls-key-file", "", "private key of tls-cert-file (PEM)", func(c *Config, v string) error { c.TLSKeyFile = v; return nil }},
	{"tls-ca-cert-file", "", "CA certificates (PEM) that client certificates must be signed by", func(c *Config, v string) error { c.TLSCACertFile = v; return nil }},
	{"tls-auth-clients", "yes", "with tls-ca-cert-file: yes (a client certificate is required), optional or no", func(c *Config, v string) error {
		switch v {
		case "yes", "optional", "no":
			c.TLSAuthClients = v
			return nil
		}
		return fmt.Errorf("must be yes, optional or no")
	}},
	{"log-level", "info", "debug, info, warn or error", func(c *Config, v string) error {
		// Checked here, with the same parser cmd/agq uses, so that a typo
		// is reported with where it came from.
		if _, err := zerolog.ParseLevel(strings.ToLower(v)); err != nil || v == "" {
			return fmt.Errorf("must be trace, debug, info, warn or error")
		}
		c.LogLevel = v
		return nil
	}},
	{"log-format", "", "json or console (default: console on a terminal, else json)", func(c *Config, v string) error {
		if v != "" && v != "json" && v != "console" {
			return fmt.Errorf("must be json or console")
		}
		c.LogFormat = v
		return nil
	}},
}

// setter reads a flag's value into field with parse; a value parse cannot
// read, or valid refuses, is refused as not what must says.
func setter[T any](parse func(string) (T, error), valid func(T) bool, must string, field func(*Config) *T) func(*Config, string) error {
	return func(c *Config, v string) error {
		x, err := parse(v)
		if err != nil || !valid(x) {
			return fmt.Errorf("must be %s", must)
		}
		*field(c) = x
		return nil
	}
}

func positive[T int | int64 | time.Duration](x T) bool { return x > 0 }

func durationSetter(field func(*Config) *time.Duration) func(*Config, string) error {
	return setter(time.ParseDuration, positive, "a positive duration such as 30s", field)
}

func intSetter(field func(*Config) *int) func(*Config, string) error {
	return setter(strconv.Atoi, positive, "a positive integer", field)
}

// countSetter is intSetter that also takes 0, for "the default".
func countSetter(field func(*Config) *int) func(*Config, string) error {
	return setter(strconv.Atoi, func(n int) bool { return n >= 0 }, "a non-negative integer", field)
}

func bytesSetter(field func(*Config) *int64) func(*Config, string) error {
	parse := func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) }
	return setter(parse, positive, "a positive number of bytes", field)
}

// EnvName is the environment variable of a flag: http-listen → AGQ_HTTP_LISTEN.
func EnvName(flagName string) string {
	return "AGQ_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ErrHelp is returned when --help was asked for; usage has been printed.
var ErrHelp = flag.ErrHelp

// Load builds the configuration from args (without the program name), the
// environment (getenv) and the TOML file named by --config or AGQ_CONFIG.
func Load(args []string, getenv func(string) string, usageOut io.Writer) (Config, error) {
	fs := flag.NewFlagSet("agq", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	values := make(map[string]*string, len(settings))
	for _, s := range settings {
		values[s.flag] = fs.String(s.flag, s.def, fmt.Sprintf("%s (env %s)", s.usage, EnvName(s.flag)))
	}
	configFile := fs.String("config", "", "TOML configuration file (env AGQ_CONFIG)")
	fs.Usage = func() {
		fmt.Fprintf(usageOut, "Usage: agq [flags]        run the server\n       agq migrate [flags] apply database migrations and exit\n\n")
		fmt.Fprintf(usageOut, "Precedence: flags, then AGQ_* environment variables, then the TOML file, then defaults.\n")
		fmt.Fprintf(usageOut, "The TOML file takes the flag names in snake case (heartbeat_interval = \"30s\") and\n")
		fmt.Fprintf(usageOut, "key tables [admins], [workers], [producers], [viewers]: \"name\" = \"<key or sha256:<hex>>\".\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })

	var c Config
	c.ConfigFile = *configFile
	if !explicit["config"] {
		c.ConfigFile = getenv("AGQ_CONFIG")
	}
	var file fileConfig
	if c.ConfigFile != "" {
		var err error
		if file, err = readFile(c.ConfigFile); err != nil {
			return Config{}, err
		}
	}
	for _, s := range settings {
		v, origin := s.def, "default"
		if fv, ok := file.values[strings.ReplaceAll(s.flag, "-", "_")]; ok {
			v, origin = fv, "config file"
		}
		if ev := getenv(EnvName(s.flag)); ev != "" {
			v, origin = ev, EnvName(s.flag)
		}
		if explicit[s.flag] {
			v, origin = *values[s.flag], "--"+s.flag
		}
		if err := s.set(&c, v); err != nil {
			return Config{}, fmt.Errorf("%s (from %s): %w", s.flag, origin, err)
		}
	}
	if c.HTTPListen == "off" {
		c.HTTPListen = ""
	}
	if c.Listen == "off" {
		c.Listen = ""
	}
	if err := c.checkTLS(); err != nil {
		return Config{}, err
	}
	if c.DirectDatabaseURL != "" && c.DatabaseURL == "" {
		return Config{}, errors.New("direct-database-url needs database-url: the managed PostgreSQL is reached directly")
	}
	c.Admins, c.Workers, c.Producers, c.Viewers = file.admins, file.workers, file.producers, file.viewers
	return c, nil
}

type fileConfig struct {
	values                              map[string]string
	admins, workers, producers, viewers map[string]string
}

func readFile(path string) (fileConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fileConfig{}, fmt.Errorf("reading config file: %w", err)
	}
	var doc map[string]any
	if err := toml.Unmarshal(raw, &doc); err != nil {
		return fileConfig{}, fmt.Errorf("config file %s: %w", path, err)
	}
	known := map[string]bool{}
	for _, s := range settings {
		known[strings.ReplaceAll(s.flag, "-", "_")] = true
	}
	fc := fileConfig{values: map[string]string{}}
	for k, v := range doc {
		switch k {
		case "admins", "workers", "producers", "viewers":
			table, err := keyTable(k, v)
			if err != nil {
				return fileConfig{}, fmt.Errorf("config file %s: %w", path, err)
			}
			switch k {
			case "admins":
				fc.admins = table
			case "workers":
				fc.workers = table
			case "viewers":
				fc.viewers = table
			default:
				fc.producers = table
			}
		default:
			if !known[k] {
				return fileConfig{}, fmt.Errorf("config file %s: unknown setting %q", path, k)
			}
			switch x := v.(type) {
			case string:
				fc.values[k] = x
			case int64:
				fc.values[k] = strconv.FormatInt(x, 10)
			default:
				return fileConfig{}, fmt.Errorf("config file %s: %s must be a string or an integer", path, k)
			}
		}
	}
	return fc, nil
}

func keyTable(name string, v any) (map[string]string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("[%s] must be a table of \"name\" = \"key\"", name)
	}
	out := make(map[string]string, len(m))
	for principal, key := range m {
		s, ok := key.(string)
		if !ok || s == "" {
			return nil, fmt.Errorf("[%s] %q: the key must be a non-empty string", name, principal)
		}
		out[principal] = s
	}
	return out, nil
}

// IsHelp reports whether err means --help was asked for.
func IsHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }

// checkTLS reports TLS settings that cannot work together.
func (c *Config) checkTLS() error {
	switch {
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return errors.New("tls-cert-file and tls-key-file go together")
	case c.TLSListen != "" && c.TLSCertFile == "":
		return errors.New("tls-listen needs tls-cert-file and tls-key-file")
	case c.TLSCACertFile != "" && c.TLSCertFile == "":
		return errors.New("tls-ca-cert-file needs tls-cert-file and tls-key-file")
	case c.Listen == "" && c.TLSListen == "":
		return errors.New("listen is off and tls-listen is unset: no RESP listener")
	}
	return nil
}
