package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestSettingsDefaults(t *testing.T) {
	t.Parallel()
	s, err := parseSettings(nil, env("AGQ_KEY", "k"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr != "127.0.0.1:6380" || !slices.Equal(s.Queues, []string{"ready"}) || s.Concurrency != 1 ||
		s.Tools != nil || s.ShutdownTimeout != 5*time.Minute || s.KillGrace != 5*time.Second ||
		s.MaxOutput != 1<<20 || s.LogLevel != "info" || s.LogFormat != "" || s.Key != "k" {
		t.Fatalf("%+v", s)
	}
	if want := fmt.Sprintf("-%d", os.Getpid()); !strings.HasPrefix(s.WorkerID, "worker-") || !strings.HasSuffix(s.WorkerID, want) {
		t.Fatalf("worker id %q", s.WorkerID)
	}
}

func TestSettingsFromEnvironment(t *testing.T) {
	t.Parallel()
	s, err := parseSettings(nil, env(
		"AGQ_ADDR", "agq.internal:7000",
		"AGQ_WORKER_ID", "worker-001",
		"AGQ_KEY", "k",
		"AGW_QUEUES", " urgent, ready ,urgent,,batch",
		"AGW_CONCURRENCY", "8",
		"AGW_TOOLS", "sort,uniq, jq",
		"AGW_SHUTDOWN_TIMEOUT", "90s",
		"AGW_MAX_OUTPUT", "4096",
		"AGW_KILL_GRACE", "2s",
		"AGW_LOG_LEVEL", "debug",
		"AGW_LOG_FORMAT", "console",
	), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr != "agq.internal:7000" || s.WorkerID != "worker-001" || s.Concurrency != 8 ||
		!slices.Equal(s.Queues, []string{"urgent", "ready", "batch"}) ||
		!slices.Equal(s.Tools, []string{"sort", "uniq", "jq"}) ||
		s.ShutdownTimeout != 90*time.Second || s.MaxOutput != 4096 || s.KillGrace != 2*time.Second ||
		s.LogLevel != "debug" || s.LogFormat != "console" {
		t.Fatalf("%+v", s)
	}
}

func TestSettingsFlagsBeatEnvironment(t *testing.T) {
	t.Parallel()
	s, err := parseSettings(
		[]string{"--addr", "flag:1", "-worker-id=from-flag", "--concurrency", "3", "--queues=a,b", "--key", "flagkey", "--shutdown-timeout", "1s"},
		env("AGQ_ADDR", "env:1", "AGQ_WORKER_ID", "from-env", "AGW_CONCURRENCY", "9", "AGW_QUEUES", "c", "AGQ_KEY", "envkey"),
		&bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr != "flag:1" || s.WorkerID != "from-flag" || s.Concurrency != 3 || !slices.Equal(s.Queues, []string{"a", "b"}) ||
		s.Key != "flagkey" || s.ShutdownTimeout != time.Second {
		t.Fatalf("%+v", s)
	}
}

func TestSettingsErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"NoKey", nil, nil, "no key"},
		{"ZeroConcurrency", nil, []string{"AGW_CONCURRENCY", "0"}, "concurrency (from AGW_CONCURRENCY)"},
		{"WordConcurrency", []string{"--concurrency", "many"}, nil, "concurrency (from --concurrency)"},
		{"WorkerIDWithDot", nil, []string{"AGQ_WORKER_ID", "worker.local"}, "worker-id"},
		{"WorkerIDTooLong", nil, []string{"AGQ_WORKER_ID", strings.Repeat("w", 65)}, "worker-id"},
		{"NoQueues", nil, []string{"AGW_QUEUES", " , "}, "queues"},
		{"QueuePrefix", nil, []string{"AGW_QUEUES", "queue:ready"}, "without the queue: prefix"},
		{"QueueBlank", []string{"--queues", "a b"}, nil, "blank"},
		{"ToolPath", nil, []string{"AGW_TOOLS", "sort,/bin/sh"}, "is a path"},
		{"BadTimeout", nil, []string{"AGW_SHUTDOWN_TIMEOUT", "soon"}, "shutdown-timeout"},
		{"NegativeGrace", nil, []string{"AGW_KILL_GRACE", "-1s"}, "kill-grace"},
		{"BadLogFormat", nil, []string{"AGW_LOG_FORMAT", "xml"}, "log-format"},
		{"EmptyAddr", []string{"--addr", " "}, nil, "addr"},
		{"StrayArgument", []string{"run"}, nil, "unexpected argument"},
		{"UnknownFlag", []string{"--verbose"}, nil, "not defined"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			envv := tt.env
			if tt.name != "NoKey" {
				envv = append(envv, "AGQ_KEY", "sekrit")
			}
			_, err := parseSettings(tt.args, env(envv...), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "sekrit") {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
}

func TestHelpDocumentsEverySetting(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := parseSettings([]string{"--help"}, env(), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v", err)
	}
	for _, st := range settingTable {
		if !strings.Contains(out.String(), "-"+st.flag) || !strings.Contains(out.String(), st.env) {
			t.Errorf("--help does not document %s / %s", st.flag, st.env)
		}
	}
	for _, name := range []string{"AGQ_ADDR", "AGQ_WORKER_ID", "AGQ_KEY", "AGW_QUEUES", "AGW_CONCURRENCY", "AGW_TOOLS", "AGW_SHUTDOWN_TIMEOUT"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("--help does not mention %s", name)
		}
	}
	if code := run([]string{"--help"}, env(), &bytes.Buffer{}); code != 0 {
		t.Fatalf("agw --help exits %d", code)
	}
	if code := run(nil, env(), &bytes.Buffer{}); code != 2 {
		t.Fatalf("agw without a key exits %d", code)
	}
}

func TestDefaultWorkerID(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	for _, tt := range []struct {
		host string
		want string
	}{
		{"build-07", "worker-build-07-42"},
		{"macbook-pro.local", "worker-macbook-pro-local-42"},
		{"", "worker-host-42"},
		{"hôte", "worker-h-te-42"},
	} {
		if got := defaultWorkerID(tt.host, 42); got != tt.want {
			t.Errorf("%q: %q, want %q", tt.host, got, tt.want)
		}
	}
	long := defaultWorkerID(strings.Repeat("h", 100)+".example.com", 4194304)
	if len(long) != 64 || !valid.MatchString(long) || !strings.HasSuffix(long, "-4194304") {
		t.Fatalf("%q (%d)", long, len(long))
	}
}

func TestSettingsTLS(t *testing.T) {
	t.Parallel()
	s, err := parseSettings(nil, env("AGQ_KEY", "k"), &bytes.Buffer{})
	if err != nil || s.TLS {
		t.Fatalf("default: TLS %v, %v", s.TLS, err)
	}
	if conf, err := s.tlsConfig(); conf != nil || err != nil {
		t.Fatalf("plaintext tlsConfig = %v, %v", conf, err)
	}
	s, err = parseSettings([]string{"--tls", "yes"}, env("AGQ_KEY", "k"), &bytes.Buffer{})
	if err != nil || !s.TLS {
		t.Fatalf("--tls yes: TLS %v, %v", s.TLS, err)
	}
	if conf, err := s.tlsConfig(); conf == nil || err != nil || conf.MinVersion != tls.VersionTLS12 {
		t.Fatalf("tlsConfig = %v, %v", conf, err)
	}
	s, err = parseSettings(nil, env("AGQ_KEY", "k", "AGQ_TLS_CA_CERT_FILE", "/nonexistent/ca.pem"), &bytes.Buffer{})
	if err != nil || !s.TLS {
		t.Fatalf("a CA file turns TLS on: TLS %v, %v", s.TLS, err)
	}
	if _, err := s.tlsConfig(); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
	if _, err := parseSettings(nil, env("AGQ_KEY", "k", "AGQ_TLS_CERT_FILE", "c.pem"), &bytes.Buffer{}); err == nil {
		t.Fatal("a client certificate without its key was accepted")
	}
}
