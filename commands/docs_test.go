package commands_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// The examples of docs/protocol are run here with the real redis-cli. The
// format is described at the top of docs/protocol/README.md; in short:
//
//	```console
//	$ redis-cli -p 6380 PING
//	PONG
//	```
//
// Every page gets a fresh node; its blocks run in order, like a reader's
// terminal session, with REDISCLI_AUTH holding the admin key.

const docsDir = "../docs/protocol"

// docStep is one "$ command" line of a console block and the output the
// page shows for it.
type docStep struct {
	file    string
	line    int
	command string
	want    []string
}

func (s docStep) String() string { return fmt.Sprintf("%s:%d: $ %s", s.file, s.line, s.command) }

// parseDocSteps returns the steps of every console block of a page, in order.
func parseDocSteps(name string, text string) ([]docStep, error) {
	var (
		steps    []docStep
		inBlock  bool
		hasSteps bool // the current block has a command already
		cont     bool // the previous command line ended in a backslash
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock:
			inBlock, hasSteps = trimmed == "```console", false
			continue
		case trimmed == "```":
			if cont {
				return nil, fmt.Errorf("%s:%d: the block ends inside a continued command", name, n)
			}
			inBlock = false
			continue
		case cont:
			s := &steps[len(steps)-1]
			s.command, cont = joinContinued(s.command, line)
		case strings.HasPrefix(line, "$ "):
			s := docStep{file: name, line: n}
			s.command, cont = joinContinued("", line[2:])
			steps, hasSteps = append(steps, s), true
		case !hasSteps:
			return nil, fmt.Errorf("%s:%d: output before any $ command", name, n)
		default:
			s := &steps[len(steps)-1]
			s.want = append(s.want, line)
		}
	}
	if inBlock {
		return nil, fmt.Errorf("%s: unterminated console block", name)
	}
	return steps, sc.Err()
}

// joinContinued appends line to command and reports whether the line ends
// in a backslash, continuing the command on the next line.
func joinContinued(command, line string) (string, bool) {
	if rest, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), "\\"); ok {
		return command + rest, true
	}
	return command + line, false
}

// shellWords splits a command line as a POSIX shell would, for the subset
// the docs may use: words, '…' and "…" quoting, backslash escapes, and
// $NAME or ${NAME} expansion from vars. Anything the shell would treat
// specially (pipes, redirections, globs, command substitution…) is
// refused, so that every example can be pasted into a terminal as it is.
func shellWords(line string, vars map[string]string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		inW   bool
	)
	expand := func(i int) (int, error) { // line[i] == '$'
		j := i + 1
		braced := j < len(line) && line[j] == '{'
		if braced {
			j++
		}
		k := j
		for k < len(line) && (line[k] == '_' || line[k] >= 'A' && line[k] <= 'Z' || line[k] >= 'a' && line[k] <= 'z' || k > j && line[k] >= '0' && line[k] <= '9') {
			k++
		}
		if k == j {
			return 0, fmt.Errorf("unsupported $ at column %d", i+1)
		}
		name := line[j:k]
		if braced {
			if k >= len(line) || line[k] != '}' {
				return 0, fmt.Errorf("unterminated ${ at column %d", i+1)
			}
			k++
		}
		v, ok := vars[name]
		if !ok {
			return 0, fmt.Errorf("variable %s is not set", name)
		}
		cur.WriteString(v)
		return k, nil
	}
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if inW {
				words = append(words, cur.String())
				cur.Reset()
				inW = false
			}
			i++
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("unterminated single quote")
			}
			cur.WriteString(line[i+1 : i+1+end])
			inW = true
			i += end + 2
		case c == '"':
			inW = true
			i++
			for {
				if i >= len(line) {
					return nil, errors.New("unterminated double quote")
				}
				switch d := line[i]; {
				case d == '"':
					i++
				case d == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0:
					cur.WriteByte(line[i+1])
					i += 2
					continue
				case d == '$':
					next, err := expand(i)
					if err != nil {
						return nil, err
					}
					i = next
					continue
				case d == '`':
					return nil, errors.New("command substitution is not supported")
				default:
					cur.WriteByte(d)
					i++
					continue
				}
				break
			}
		case c == '\\':
			if i+1 >= len(line) {
				return nil, errors.New("trailing backslash")
			}
			cur.WriteByte(line[i+1])
			inW = true
			i += 2
		case c == '$':
			next, err := expand(i)
			if err != nil {
				return nil, err
			}
			inW = true
			i = next
		case strings.IndexByte("|&;<>()`*?[{}", c) >= 0 || !inW && (c == '#' || c == '~'):
			return nil, fmt.Errorf("%q is special to the shell: quote it (column %d)", c, i+1)
		default:
			cur.WriteByte(c)
			inW = true
			i++
		}
	}
	if inW {
		words = append(words, cur.String())
	}
	return words, nil
}

// docSession is a reader's terminal: shell variables, the exported ones,
// and the node the examples talk to.
type docSession struct {
	a        *agqtest.Agq
	vars     map[string]string
	exported map[string]bool
}

var (
	assignRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	captureRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)="?\$\((.*)\)"?$`)
)

// run runs one step and returns the lines it printed.
func (d *docSession) run(t *testing.T, command string) ([]string, error) {
	t.Helper()
	if m := captureRE.FindStringSubmatch(command); m != nil {
		// NAME=$(redis-cli …): stdout goes into the variable, stderr to the
		// terminal.
		words, err := shellWords(m[2], d.vars)
		if err != nil {
			return nil, err
		}
		stdout, stderr, err := d.redisCLI(t, nil, nil, words, false)
		if err != nil {
			return nil, err
		}
		d.vars[m[1]] = strings.TrimRight(stdout, "\n")
		return outputLines(stderr), nil
	}
	words, err := shellWords(command, d.vars)
	if err != nil {
		return nil, err
	}
	// NAME=value prefixes and env -u NAME apply to this command only.
	set := map[string]string{}
	var unset []string
	for len(words) > 0 && assignRE.MatchString(words[0]) {
		name, value, _ := strings.Cut(words[0], "=")
		set[name] = value
		words = words[1:]
	}
	if len(words) > 0 && words[0] == "env" {
		words = words[1:]
		for len(words) >= 2 && words[0] == "-u" {
			unset = append(unset, words[1])
			words = words[2:]
		}
	}
	if len(words) == 0 {
		return nil, errors.New("no command")
	}
	output, _, err := d.redisCLI(t, set, unset, words, true)
	if err != nil {
		return nil, err
	}
	return outputLines(output), nil
}

// redisCLI runs words, which must be a redis-cli command line naming the
// documented port, against the test node. On a terminal, stdout and stderr
// are one stream, returned as stdout in the order written, and replies are
// formatted for people; otherwise they are apart and replies are raw.
func (d *docSession) redisCLI(t *testing.T, set map[string]string, unset []string, words []string, terminal bool) (stdout, stderr string, err error) {
	t.Helper()
	if len(words) == 0 || words[0] != "redis-cli" {
		return "", "", fmt.Errorf("only redis-cli commands can be run, not %q", words)
	}
	args := words[1:]
	port := -1
	for i, w := range args {
		if w == "-h" || w == "-u" {
			return "", "", errors.New("examples talk to the default host; do not give -h or -u")
		}
		if w == "-p" && i+1 < len(args) && args[i+1] == "6380" {
			port = i + 1
		}
	}
	if port < 0 {
		return "", "", errors.New("examples must name agq's port: redis-cli -p 6380 …")
	}
	args = append([]string(nil), args...)
	_, args[port] = hostPort(t, d.a.Addr)
	if terminal {
		// Print replies as a terminal shows them, although stdout is a
		// pipe here; an example's own --raw comes later and wins.
		args = append([]string{"--no-raw"}, args...)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := d.a.RedisCLICommand(ctx, t, args...)
	for name, v := range d.vars {
		if d.exported[name] {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	for name, v := range set {
		cmd.Env = append(cmd.Env, name+"="+v)
	}
	for _, name := range unset {
		kept := cmd.Env[:0]
		for _, kv := range cmd.Env {
			if !strings.HasPrefix(kv, name+"=") {
				kept = append(kept, kv)
			}
		}
		cmd.Env = kept
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if terminal {
		cmd.Stderr = &out // one pipe: the order of the lines is kept
	}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || ctx.Err() != nil {
			return "", "", fmt.Errorf("running redis-cli: %w", err)
		}
	}
	return out.String(), errOut.String(), nil
}

// outputLines splits output into lines without line ends, trailing blanks
// or trailing empty lines.
func outputLines(s string) []string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		lines = append(lines, strings.TrimRight(l, " \t\r"))
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in %s: %v", docsDir, err)
	}
	return pages
}

// newDocSession starts a node as a reader's first start would: no admin
// key configured, so agq generates one in its data dir, and the reader
// exports it as REDISCLI_AUTH.
func newDocSession(t *testing.T) *docSession {
	t.Helper()
	a := agqtest.Start(t, func(c *config.Config) { c.AdminKey = "" })
	raw, err := os.ReadFile(filepath.Join(a.Config.DataDir, "admin.key"))
	if err != nil {
		t.Fatalf("the generated admin key: %v", err)
	}
	return &docSession{
		a:        a,
		vars:     map[string]string{"REDISCLI_AUTH": strings.TrimSpace(string(raw))},
		exported: map[string]bool{"REDISCLI_AUTH": true},
	}
}

func TestDocExamples(t *testing.T) {
	t.Parallel()
	for _, page := range docPages(t) {
		t.Run(filepath.Base(page), func(t *testing.T) {
			t.Parallel()
			text, err := os.ReadFile(page)
			if err != nil {
				t.Fatal(err)
			}
			steps, err := parseDocSteps(filepath.Base(page), string(text))
			if err != nil {
				t.Fatal(err)
			}
			if len(steps) == 0 {
				t.Fatalf("%s has no console examples", page)
			}
			d := newDocSession(t)
			for _, s := range steps {
				got, err := d.run(t, s.command)
				if err != nil {
					t.Errorf("%s\n\t%v", s, err)
					continue
				}
				if !agqtest.LinesMatch(s.want, got) {
					t.Errorf("%s\n--- the page shows:\n%s\n--- redis-cli printed:\n%s",
						s, strings.Join(s.want, "\n"), strings.Join(got, "\n"))
				}
			}
		})
	}
}

// TestDocCheckerCatchesWrongExamples makes sure TestDocExamples can fail.
func TestDocCheckerCatchesWrongExamples(t *testing.T) {
	t.Parallel()
	page := "intro text\n\n```console\n$ redis-cli -p 6380 ECHO \"two words\"\n\"two words\"\n" +
		"$ redis-cli -p 6380 PING\nPING\n$ KEY=$(redis-cli -p 6380 KEY.CREATE producer docs-p)\n" +
		"$ REDISCLI_AUTH=$KEY redis-cli -p 6380 --user docs-p CLIENT ID\n(integer) <id>\n" +
		"$ env -u REDISCLI_AUTH redis-cli -p 6380 \\\n    TIME\n(error) NOAUTH Authentication required.\n```\n"
	steps, err := parseDocSteps("test.md", page)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 5 || steps[4].command != "env -u REDISCLI_AUTH redis-cli -p 6380     TIME" || steps[4].line != 11 {
		t.Fatalf("parsed %+v", steps)
	}
	d := newDocSession(t)
	for i, wantOK := range []bool{true, false, true, true, true} {
		got, err := d.run(t, steps[i].command)
		if err != nil {
			t.Fatalf("%s: %v", steps[i], err)
		}
		if ok := agqtest.LinesMatch(steps[i].want, got); ok != wantOK {
			t.Errorf("%s: matched %v, want %v; printed %q", steps[i], ok, wantOK, got)
		}
	}

	t.Run("MatchingRules", func(t *testing.T) {
		tests := []struct {
			want, got []string
			ok        bool
		}{
			{[]string{"a", "b"}, []string{"a", "b"}, true},
			{[]string{"a", "b"}, []string{"a"}, false},
			{[]string{"a"}, []string{"a", "b"}, false},
			{[]string{"1) \"<timestamp>\""}, []string{`1) "2026-01-01T00:00:00Z"`}, true},
			{[]string{"1) \"<timestamp>\""}, []string{`1) ""`}, false},
			{[]string{"id=<id> name=x"}, []string{"id=7 name=y"}, false},
			{[]string{"# Server", "...", "tcp_port:<port>", "..."}, []string{"# Server", "a:1", "b:2", "tcp_port:6380", "c:3"}, true},
			{[]string{"# Server", "..."}, []string{"# Clients"}, false},
			{[]string{"..."}, nil, true},
			{[]string{"a.b"}, []string{"axb"}, false},
		}
		for _, tc := range tests {
			if got := agqtest.LinesMatch(tc.want, tc.got); got != tc.ok {
				t.Errorf("agqtest.LinesMatch(%q, %q) = %v", tc.want, tc.got, got)
			}
		}
	})
	t.Run("ShellRules", func(t *testing.T) {
		vars := map[string]string{"K": "k 1"}
		tests := []struct {
			line string
			want []string
			err  bool
		}{
			{`redis-cli -p 6380 ECHO 'a  b' "c $K" \$K ${K}x`, []string{"redis-cli", "-p", "6380", "ECHO", "a  b", "c k 1", "$K", "k 1x"}, false},
			{`redis-cli -p 6380 KEYS worker:*`, nil, true},
			{`redis-cli -p 6380 PING | cat`, nil, true},
			{`redis-cli -p 6380 ECHO "$NOPE"`, nil, true},
			{`redis-cli -p 6380 ECHO 'open`, nil, true},
			{`redis-cli -p 6380 ECHO '{"a":[1]}'`, []string{"redis-cli", "-p", "6380", "ECHO", `{"a":[1]}`}, false},
		}
		for _, tc := range tests {
			got, err := shellWords(tc.line, vars)
			if (err != nil) != tc.err || (!tc.err && strings.Join(got, "|") != strings.Join(tc.want, "|")) {
				t.Errorf("shellWords(%q) = %q, %v", tc.line, got, err)
			}
		}
	})
}

// docHeadingRE finds command headings: "## NAME …" or "### NAME …".
var docHeadingRE = regexp.MustCompile("(?m)^#{2,3} `?([A-Z][A-Z0-9_.]*)(?:[ `]|$)")

// notDocumentedYet are commands whose family page is still to be written.
// Remove a family from here when its page arrives; a new command must come
// with its documentation.
var notDocumentedYet = []string{}

// readOnlyKeys is the answer of the Redis write commands agq refuses; they
// are documented together, by that answer, rather than one by one.
const readOnlyKeys = "ERR agq keys are read-only; use JOB.* commands"

func TestEveryCommandIsDocumented(t *testing.T) {
	t.Parallel()
	documented := map[string]bool{}
	refusalDocumented := false
	for _, page := range docPages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docHeadingRE.FindAllStringSubmatch(string(text), -1) {
			documented[strings.ToLower(m[1])] = true
		}
		refusalDocumented = refusalDocumented || strings.Contains(string(text), readOnlyKeys)
	}
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	names, err := admin.Do(ctx, "COMMAND", "LIST").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		pending := false
		for _, p := range notDocumentedYet {
			pending = pending || name == p || strings.HasSuffix(p, ".") && strings.HasPrefix(name, p)
		}
		if documented[name] || pending {
			continue
		}
		// A refused write is covered by the page that documents the refusal.
		if err := admin.Do(ctx, name, "docs-probe").Err(); err != nil && err.Error() == readOnlyKeys {
			if !refusalDocumented {
				t.Errorf("%s answers %q, which no page of %s documents", name, readOnlyKeys, docsDir)
			}
			continue
		}
		t.Errorf("%s has no section in %s (a \"## %s …\" heading)", name, docsDir, strings.ToUpper(name))
	}
}
