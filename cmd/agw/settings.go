package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agq/agq/cmd/agw/internal/pipeline"
)

// settings is everything agw is told at start.
type settings struct {
	Addr            string
	WorkerID        string
	Key             string
	Queues          []string
	Concurrency     int
	Tools           []string // nil: the default safe set found on PATH
	ShutdownTimeout time.Duration
	MaxOutput       int
	KillGrace       time.Duration
	LogLevel        string
	LogFormat       string

	// TLS is on when asked for or when any TLS file is given.
	TLS                     bool
	TLSCACertFile           string
	TLSCertFile, TLSKeyFile string
}

// setting is one value: a flag, the environment variable it overrides,
// its default and how to apply it. Flags beat the environment, which beats
// the defaults.
type setting struct {
	flag, env, def, usage string
	set                   func(s *settings, v string) error
}

var settingTable = []setting{
	{"addr", "AGQ_ADDR", "127.0.0.1:6380", "agq server address (host:port)",
		func(s *settings, v string) error { s.Addr = v; return nonEmpty(v) }},
	{"worker-id", "AGQ_WORKER_ID", "", "worker id, 1 to 64 of A-Z a-z 0-9 _ - (default worker-<hostname>-<pid>)",
		func(s *settings, v string) error { s.WorkerID = v; return nil }},
	{"key", "AGQ_KEY", "", "the worker's session key, required; prefer the environment variable, since\n" +
		"a command line is visible to every user of the machine",
		func(s *settings, v string) error { s.Key = v; return nil }},
	{"queues", "AGW_QUEUES", "ready", "queues to take jobs from, comma-separated, highest priority first",
		func(s *settings, v string) (err error) { s.Queues, err = parseQueues(v); return err }},
	{"concurrency", "AGW_CONCURRENCY", "1", "jobs run at the same time (1 to 1024)",
		func(s *settings, v string) (err error) { s.Concurrency, err = parseInt(v, 1, 1024); return err }},
	{"tools", "AGW_TOOLS", "", "tools to offer, comma-separated, each looked up on PATH once at start; naming\n" +
		"a shell or an interpreter here hands job submitters a shell (default: those of\n" +
		wrap(strings.Join(pipeline.DefaultTools, " ")+" found on PATH)", 80),
		func(s *settings, v string) (err error) { s.Tools, err = parseTools(v); return err }},
	{"shutdown-timeout", "AGW_SHUTDOWN_TIMEOUT", "5m", "on SIGTERM or SIGINT, how long running jobs may take to finish before they\n" +
		"are cancelled and reported failed (retryable); a second signal cancels them at once",
		func(s *settings, v string) (err error) { s.ShutdownTimeout, err = parseDuration(v); return err }},
	{"max-output", "AGW_MAX_OUTPUT", strconv.Itoa(pipeline.DefaultMaxOutput), "bytes of a job's output kept; the rest is dropped and output_truncated\n" +
		"reported (keep it under agq's AGQ_MAX_PAYLOAD)",
		func(s *settings, v string) (err error) { s.MaxOutput, err = parseInt(v, 1, 64<<20); return err }},
	{"kill-grace", "AGW_KILL_GRACE", pipeline.DefaultKillGrace.String(), "when a job is stopped (timeout, cancellation, shutdown), the time from\n" +
		"SIGTERM to SIGKILL for its processes",
		func(s *settings, v string) (err error) { s.KillGrace, err = parseDuration(v); return err }},
	{"tls", "AGQ_TLS", "no", "yes: connect to agq's TLS port (on by itself when a tls-* file is given)",
		func(s *settings, v string) error {
			switch v {
			case "yes", "no":
				s.TLS = s.TLS || v == "yes"
				return nil
			}
			return fmt.Errorf("must be yes or no")
		}},
	{"tls-ca-cert-file", "AGQ_TLS_CA_CERT_FILE", "", "CA certificates (PEM) that agq's certificate is checked against\n" +
		"(default: the system's)",
		func(s *settings, v string) error { s.TLSCACertFile = v; s.TLS = s.TLS || v != ""; return nil }},
	{"tls-cert-file", "AGQ_TLS_CERT_FILE", "", "client certificate (PEM), for agq's AGQ_TLS_AUTH_CLIENTS",
		func(s *settings, v string) error { s.TLSCertFile = v; s.TLS = s.TLS || v != ""; return nil }},
	{"tls-key-file", "AGQ_TLS_KEY_FILE", "", "private key of tls-cert-file (PEM)",
		func(s *settings, v string) error { s.TLSKeyFile = v; s.TLS = s.TLS || v != ""; return nil }},
	{"log-level", "AGW_LOG_LEVEL", "info", "debug, info, warn or error",
		func(s *settings, v string) error { s.LogLevel = v; return nil }},
	{"log-format", "AGW_LOG_FORMAT", "", "json or console (default: console on a terminal, else json)",
		func(s *settings, v string) error {
			if v != "" && v != "json" && v != "console" {
				return fmt.Errorf("must be json or console")
			}
			s.LogFormat = v
			return nil
		}},
}

// errVersion is returned when --version was asked for; the version has
// been printed.
var errVersion = fmt.Errorf("version asked for")

// parseSettings builds the settings from args (without the program name)
// and the environment. --help prints the usage to out and returns
// flag.ErrHelp.
func parseSettings(args []string, getenv func(string) string, out io.Writer) (settings, error) {
	fs := flag.NewFlagSet("agw", flag.ContinueOnError)
	fs.SetOutput(out)
	values := make(map[string]*string, len(settingTable))
	for _, st := range settingTable {
		values[st.flag] = fs.String(st.flag, st.def, fmt.Sprintf("%s\n(env %s)", st.usage, st.env))
	}
	showVersion := fs.Bool("version", false, "print agw's version and exit")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: agw [flags]\n\n")
		fmt.Fprintf(out, "agw is agq's reference worker: it registers with agq, takes jobs from its queues\n")
		fmt.Fprintf(out, "with BRPOP, runs each job's plan as a pipeline of the tools it offers (no shell),\n")
		fmt.Fprintf(out, "and reports the result. SIGTERM or SIGINT drains it: no new jobs, running ones\n")
		fmt.Fprintf(out, "finish (up to --shutdown-timeout), then it unregisters and exits 0.\n\n")
		fmt.Fprintf(out, "Every flag has an environment variable; a flag beats its variable.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return settings{}, err
	}
	if fs.NArg() > 0 {
		return settings{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *showVersion {
		fmt.Fprintln(out, "agw", version)
		return settings{}, errVersion
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })

	var s settings
	for _, st := range settingTable {
		v, origin := st.def, "default"
		if ev := getenv(st.env); ev != "" {
			v, origin = ev, st.env
		}
		if explicit[st.flag] {
			v, origin = *values[st.flag], "--"+st.flag
		}
		if err := st.set(&s, v); err != nil {
			return settings{}, fmt.Errorf("%s (from %s): %w", st.flag, origin, err)
		}
	}
	if s.WorkerID == "" {
		s.WorkerID = defaultWorkerID(hostname(), os.Getpid())
	}
	if !validWorkerID.MatchString(s.WorkerID) {
		return settings{}, fmt.Errorf("worker-id %q: must be 1 to 64 of A-Z a-z 0-9 _ -", s.WorkerID)
	}
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		return settings{}, fmt.Errorf("tls-cert-file and tls-key-file go together")
	}
	if s.Key == "" {
		return settings{}, fmt.Errorf("no key: set AGQ_KEY (or --key) to the worker's session key")
	}
	return s, nil
}

var validWorkerID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// defaultWorkerID is worker-<hostname>-<pid>, with the characters a worker
// id may not hold (the dots of a domain name) turned into dashes and the
// hostname shortened to fit in 64 characters.
func defaultWorkerID(host string, pid int) string {
	clean := strings.Map(func(r rune) rune {
		if r < 128 && validWorkerID.MatchString(string(r)) {
			return r
		}
		return '-'
	}, host)
	suffix := "-" + strconv.Itoa(pid)
	if room := 64 - len("worker-") - len(suffix); len(clean) > room {
		clean = clean[:room]
	}
	if clean == "" {
		clean = "host"
	}
	return "worker-" + clean + suffix
}

// wrap breaks text into lines of at most width bytes at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(text) {
		if i > 0 && line+1+len(word) > width {
			b.WriteByte('\n')
			line = 0
		} else if i > 0 {
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

func nonEmpty(v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("must not be empty")
	}
	return nil
}

func parseInt(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("must be a whole number from %d to %d", lo, hi)
	}
	return n, nil
}

func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("must be a positive duration such as 30s or 5m")
	}
	return d, nil
}

// splitList splits a comma list, trimming blanks and dropping empty items
// and repeats (the first occurrence keeps its place).
func splitList(v string) []string {
	var out []string
	seen := map[string]bool{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item != "" && !seen[item] {
			seen[item] = true
			out = append(out, item)
		}
	}
	return out
}

func parseQueues(v string) ([]string, error) {
	queues := splitList(v)
	if len(queues) == 0 {
		return nil, fmt.Errorf("name at least one queue")
	}
	for _, q := range queues {
		if strings.ContainsFunc(q, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return nil, fmt.Errorf("queue %q has a blank or a control character", q)
		}
		if strings.HasPrefix(q, "queue:") {
			return nil, fmt.Errorf("queue %q: name the queue without the queue: prefix", q)
		}
	}
	return queues, nil
}

func parseTools(v string) ([]string, error) {
	tools := splitList(v)
	for _, t := range tools {
		if err := pipeline.ValidToolName(t); err != nil {
			return nil, err
		}
	}
	return tools, nil
}

// tlsConfig is the client side of agq's TLS port, nil when TLS is off.
func (s settings) tlsConfig() (*tls.Config, error) {
	if !s.TLS {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.TLSCACertFile != "" {
		pem, err := os.ReadFile(s.TLSCACertFile)
		if err != nil {
			return nil, fmt.Errorf("tls-ca-cert-file: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls-ca-cert-file: no PEM certificate in %s", s.TLSCACertFile)
		}
	}
	if s.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls-cert-file: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}
