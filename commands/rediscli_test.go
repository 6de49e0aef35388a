package commands_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
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

// terminalSession is redis-cli running interactively on a pseudo-terminal.
type terminalSession struct {
	t      *testing.T
	tty    *os.File
	out    *ptyOutput
	prompt string
	exited chan struct{} // closed once redis-cli has exited and its output is read
	err    error         // its exit status, once exited is closed
}

// startTerminal starts redis-cli with args on a pseudo-terminal, so that it
// runs its interactive prompt as it does for a person.
func startTerminal(t *testing.T, a *agqtest.Agq, args ...string) *terminalSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := a.RedisCLICommand(ctx, t, args...)
	cmd.Env = append(cmd.Env, "TERM=xterm")
	// A window size spares linenoise from asking the terminal for one.
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		cancel()
		t.Fatalf("starting redis-cli on a pseudo-terminal: %v", err)
	}
	s := &terminalSession{t: t, tty: tty, out: &ptyOutput{}, prompt: a.Addr + "> ", exited: make(chan struct{})}
	t.Cleanup(func() {
		cancel() // kills redis-cli if it is still running
		tty.Close()
		<-s.exited
	})
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(s.out, tty) // ends with EIO when redis-cli exits
	}()
	go func() {
		s.err = cmd.Wait()
		<-copied
		close(s.exited)
	}()
	return s
}

// expect waits until the output since offset holds want and returns the
// offset just past it; redis-cli exiting meanwhile fails the test.
func (s *terminalSession) expect(offset int, want string) int {
	s.t.Helper()
	agqtest.Eventually(s.t, 15*time.Second, func() error {
		if i := strings.Index(s.out.since(offset), want); i >= 0 {
			offset += i + len(want)
			return nil
		}
		select {
		case <-s.exited:
			s.t.Fatalf("redis-cli exited (%v) before printing %q; terminal output:\n%q", s.err, want, s.out.since(0))
		default:
		}
		return fmt.Errorf("no %q in the terminal output since byte %d:\n%q", want, offset, s.out.since(offset))
	})
	return offset
}

// typeLine types line once the prompt is shown (linenoise drops what is
// typed before it puts the terminal in raw mode) and returns the offset
// where the answer begins. offset must be past the previous answer: the
// prompt also shows while the previous line is being typed.
func (s *terminalSession) typeLine(offset int, line string) int {
	s.t.Helper()
	s.expect(offset, s.prompt)
	end := s.out.len()
	if _, err := s.tty.Write([]byte(line + "\r")); err != nil {
		s.t.Fatalf("typing %q: %v", line, err)
	}
	return end
}

// write types p as it is, without a return.
func (s *terminalSession) write(p string) {
	s.t.Helper()
	if _, err := s.tty.Write([]byte(p)); err != nil {
		s.t.Fatalf("typing %q: %v", p, err)
	}
}

// quit types quit and checks that redis-cli exits cleanly, without having
// complained about anything on the way.
func (s *terminalSession) quit(offset int) {
	s.t.Helper()
	s.typeLine(offset, "quit")
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		s.t.Fatalf("redis-cli still runs after quit; terminal output:\n%q", s.out.since(0))
	}
	if s.err != nil {
		s.t.Fatalf("redis-cli did not exit cleanly: %v; terminal output:\n%q", s.err, s.out.since(0))
	}
	if out := s.out.since(0); strings.Contains(out, "Error") || strings.Contains(out, "Assertion") {
		s.t.Fatalf("redis-cli complained:\n%q", out)
	}
}

func TestRedisCLIInteractive(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)

	t.Run("TypingAuth", func(t *testing.T) {
		t.Parallel()
		// No key on the command line: the user types AUTH. On a terminal
		// redis-cli starts by asking for COMMAND DOCS, before any AUTH.
		s := startTerminal(t, a)
		at := s.typeLine(0, "PING")
		at = s.expect(at, "PONG")
		at = s.typeLine(at, "ECHO before")
		at = s.expect(at, "NOAUTH Authentication required.")
		at = s.typeLine(at, "AUTH "+a.AdminKey)
		at = s.expect(at, "OK")
		at = s.typeLine(at, "PING")
		at = s.expect(at, "PONG")
		at = s.typeLine(at, "ECHO hello")
		at = s.expect(at, `"hello"`)
		s.quit(at)
	})
	t.Run("WithPasswordFlagAndRESP3", func(t *testing.T) {
		t.Parallel()
		s := startTerminal(t, a, "--no-auth-warning", "-3", "-a", a.AdminKey)
		at := s.typeLine(0, "HELLO 3")
		at = s.expect(at, `1# "server" => "agq"`)
		at = s.expect(at, `7# "modules" => (empty array)`)
		at = s.typeLine(at, "CLIENT SETNAME console")
		at = s.expect(at, "OK")
		at = s.typeLine(at, "CLIENT GETNAME")
		at = s.expect(at, `"console"`)
		s.quit(at)
	})
	t.Run("HelpHintsAndCompletion", func(t *testing.T) {
		t.Parallel()
		s := startTerminal(t, a, "--no-auth-warning", "-a", a.AdminKey)
		// HELP prints the syntax and the summary from COMMAND DOCS.
		at := s.typeLine(0, "HELP JOB.SUBMIT")
		at = s.expect(at, "JOB.SUBMIT\x1b[0m \x1b[90mjson\x1b[0m")
		at = s.expect(at, "summary:\x1b[0m Submits a job (a JSON object) or an atomic batch")
		at = s.expect(at, "group:\x1b[0m jobs")
		// HELP @group lists a group's commands with their arguments.
		at = s.typeLine(at, "HELP @workers")
		at = s.expect(at, "WORKER.HEARTBEAT\x1b[0m \x1b[90mworker_id [stats_json]\x1b[0m")
		at = s.typeLine(at, "HELP BRPOP")
		at = s.expect(at, "BRPOP\x1b[0m \x1b[90mqueue:<name> [queue:<name> ...] timeout\x1b[0m")
		// Typing a command shows what comes next.
		s.expect(at, s.prompt)
		at = s.out.len()
		s.write("SCAN 0 ")
		at = s.expect(at, "[MATCH pattern] [COUNT count] [TYPE type]")
		s.write("\x15") // Ctrl-U: a fresh line
		// Tab completes a command's name.
		at = s.out.len()
		s.write("JOB.SUB\t")
		at = s.expect(at, "JOB.SUBMIT")
		s.write("\x15")
		s.quit(at)
	})
	t.Run("TheServerWasAskedForCommandDocs", func(t *testing.T) {
		t.Parallel()
		b := agqtest.Start(t) // its own node: nobody else's COMMAND counts
		s := startTerminal(t, b)
		s.quit(s.expect(s.typeLine(0, "PING"), "PONG"))
		if m := metricsText(t, b); !strings.Contains(m, `agq_commands_total{command="command",result="ok"}`) {
			t.Fatalf("no COMMAND in the metrics:\n%s", m)
		}
	})
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
