package commands_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/agq/agq/internal/agqtest"
)

// cliResult is what one redis-cli run printed.
type cliResult struct {
	stdout, stderr string
	err            error
}

// runCLI runs the real redis-cli against a with args, the extra environment
// variables env and stdin, and returns stdout and stderr separately.
func runCLI(t *testing.T, a *agqtest.Agq, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := a.RedisCLICommand(ctx, t, args...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return cliResult{stdout: strings.TrimRight(stdout.String(), "\n"), stderr: stderr.String(), err: err}
}

func TestRedisCLI(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	key := a.AdminKey
	auth := []string{"REDISCLI_AUTH=" + key}

	t.Run("PasswordFlagAuthenticates", func(t *testing.T) {
		t.Parallel()
		r := runCLI(t, a, nil, "", "-a", key, "PING")
		if r.err != nil || r.stdout != "PONG" {
			t.Fatalf("redis-cli -a KEY PING = %q (stderr %q), %v", r.stdout, r.stderr, r.err)
		}
	})
	t.Run("UserAndPassFlagsAuthenticate", func(t *testing.T) {
		t.Parallel()
		r := runCLI(t, a, nil, "", "--no-auth-warning", "--user", "admin", "--pass", key, "PING")
		if r.err != nil || r.stdout != "PONG" || r.stderr != "" {
			t.Fatalf("redis-cli --user admin --pass KEY PING = %q (stderr %q), %v", r.stdout, r.stderr, r.err)
		}
	})
	t.Run("RESP3ModeWorks", func(t *testing.T) {
		t.Parallel()
		// -3 makes redis-cli send HELLO 3 first and give up if it fails.
		r := runCLI(t, a, nil, "", "--no-auth-warning", "-3", "-a", key, "PING")
		if r.err != nil || r.stdout != "PONG" || r.stderr != "" {
			t.Fatalf("redis-cli -3 -a KEY PING = %q (stderr %q), %v", r.stdout, r.stderr, r.err)
		}
	})
	t.Run("RESP3HelloPrintsTheServerMap", func(t *testing.T) {
		t.Parallel()
		// --no-raw prints the map as a terminal shows it; redis-cli asserts
		// that map keys are strings, so a bad reply would crash it here.
		r := runCLI(t, a, nil, "", "--no-auth-warning", "--no-raw", "-3", "-a", key, "HELLO", "3")
		if r.err != nil {
			t.Fatalf("redis-cli -3 HELLO 3: %v (stdout %q, stderr %q)", r.err, r.stdout, r.stderr)
		}
		lines := strings.Split(r.stdout, "\n")
		want := []string{
			`1# "server" => "agq"`,
			`2# "version" => "`,
			`3# "proto" => (integer) 3`,
			`4# "id" => (integer) `,
			`5# "mode" => "standalone"`,
			`6# "role" => "master"`,
			`7# "modules" => (empty array)`,
		}
		if len(lines) != len(want) {
			t.Fatalf("HELLO 3 printed %d lines, want %d:\n%s", len(lines), len(want), r.stdout)
		}
		for i, w := range want {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("line %d = %q, want it to start with %q", i+1, lines[i], w)
			}
		}
	})
	t.Run("RawOutputServesShellScripts", func(t *testing.T) {
		t.Parallel()
		// A script mints a producer key with one redis-cli and uses it with
		// the next: --raw output must be the bare key, nothing around it.
		host, port := hostPort(t, a.Addr)
		script := `set -e
cli() { redis-cli -h "$HOST" -p "$PORT" --raw "$@"; }
key=$(cli KEY.CREATE producer script-user)
test ${#key} -eq 64
REDISCLI_AUTH="$key" cli --user script-user ECHO "hello world"
id=$(REDISCLI_AUTH="$key" cli CLIENT ID)
test "$id" -gt 0
echo "id ok"
`
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
		cmd.Env = append(a.RedisCLICommand(ctx, t).Env, "REDISCLI_AUTH="+key, "HOST="+host, "PORT="+port)
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "hello world\nid ok\n" {
			t.Fatalf("script: %v, output:\n%s", err, out)
		}
	})
	t.Run("InfoServerShowsTheServerSection", func(t *testing.T) {
		t.Parallel()
		r := runCLI(t, a, auth, "", "INFO", "server")
		if r.err != nil || !strings.HasPrefix(r.stdout, "# Server\r\n") || !strings.Contains(r.stdout, "\r\nagq_version:") {
			t.Fatalf("INFO server = %q, %v", r.stdout, r.err)
		}
	})
	t.Run("ClientNameStaysOnTheConnection", func(t *testing.T) {
		t.Parallel()
		// Commands read from stdin share one connection.
		r := runCLI(t, a, auth, "CLIENT SETNAME reporter-1\nCLIENT GETNAME\n")
		if r.err != nil || r.stdout != "OK\nreporter-1" {
			t.Fatalf("SETNAME then GETNAME = %q (stderr %q), %v", r.stdout, r.stderr, r.err)
		}
	})
	t.Run("CommandsBeforeAuthAnswerNoauth", func(t *testing.T) {
		t.Parallel()
		r := runCLI(t, a, nil, "", "INFO")
		if !strings.Contains(r.stdout+r.stderr, "NOAUTH Authentication required.") {
			t.Fatalf("INFO without a key = %q (stderr %q), %v", r.stdout, r.stderr, r.err)
		}
	})
	t.Run("WrongKeySaysWrongpass", func(t *testing.T) {
		t.Parallel()
		r := runCLI(t, a, []string{"REDISCLI_AUTH=" + strings.Repeat("0", 64)}, "", "PING")
		if !strings.Contains(r.stderr, "AUTH failed: WRONGPASS invalid username-password pair or user is disabled.") {
			t.Fatalf("PING with a wrong key = %q (stderr %q), %v", r.stdout, r.stderr, r.err)
		}
	})
}

func hostPort(t *testing.T, addr string) (string, string) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		t.Fatalf("bad address %q", addr)
	}
	return addr[:i], addr[i+1:]
}

// ptyOutput collects what a program writes to its terminal.
type ptyOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *ptyOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// since returns what was written from offset on.
func (o *ptyOutput) since(offset int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if offset > o.buf.Len() {
		return ""
	}
	return o.buf.String()[offset:]
}

func (o *ptyOutput) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Len()
}

func TestRedisCLIInteractive(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// No key on the command line: the user types AUTH. On a terminal
	// redis-cli starts by asking for COMMAND DOCS, before any AUTH.
	cmd := a.RedisCLICommand(ctx, t)
	cmd.Env = append(cmd.Env, "TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatalf("starting redis-cli on a pseudo-terminal: %v", err)
	}
	defer tty.Close()
	out := &ptyOutput{}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		var chunk [4096]byte
		for {
			n, err := tty.Read(chunk[:])
			out.Write(chunk[:n])
			if err != nil {
				return
			}
		}
	}()

	prompt := a.Addr + "> "
	// expect waits until the output since offset holds want and returns the
	// offset just past it.
	expect := func(offset int, want string) int {
		t.Helper()
		agqtest.Eventually(t, 15*time.Second, func() error {
			if !strings.Contains(out.since(offset), want) {
				return fmt.Errorf("no %q in the terminal output since byte %d:\n%q", want, offset, out.since(offset))
			}
			return nil
		})
		return offset + strings.Index(out.since(offset), want) + len(want)
	}
	// typeLine types line once the prompt is shown (linenoise drops what is
	// typed before it switches the terminal to raw mode) and returns the
	// offset where the answer begins.
	typeLine := func(offset int, line string) int {
		t.Helper()
		expect(offset, prompt)
		end := out.len()
		if _, err := tty.Write([]byte(line + "\r")); err != nil {
			t.Fatalf("typing %q: %v", line, err)
		}
		return end
	}

	at := typeLine(0, "AUTH "+a.AdminKey)
	at = expect(at, "OK")
	at = typeLine(at, "PING")
	at = expect(at, "PONG")
	at = typeLine(at, "ECHO hello")
	at = expect(at, `"hello"`)
	typeLine(at, "quit")

	if err := cmd.Wait(); err != nil {
		t.Fatalf("redis-cli did not exit cleanly: %v; terminal output:\n%q", err, out.since(0))
	}
	<-copied
	// The server was asked COMMAND (DOCS) and its answer did not upset redis-cli.
	if m := metricsText(t, a); !strings.Contains(m, `agq_commands_total{command="command",result="ok"}`) {
		t.Fatalf("no COMMAND in the metrics:\n%s", m)
	}
	if strings.Contains(out.since(0), "Error") || strings.Contains(out.since(0), "Assertion") {
		t.Fatalf("redis-cli complained:\n%q", out.since(0))
	}
}

// metricsText fetches the node's /metrics page.
func metricsText(t *testing.T, a *agqtest.Agq) string {
	t.Helper()
	resp, err := http.Get("http://" + a.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	return string(body)
}
