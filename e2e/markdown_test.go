package e2e

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The pages under docs/ follow the format of docs/protocol/README.md
// ("Examples are tested"): a console block holds "$ command" lines, each
// followed by what it prints; in printed lines, <name> stands for any
// non-empty text and a line "..." for any number of lines. Programs meant
// to be copied are fenced blocks with a title: ```go title="worker.go"```.

// consoleStep is one "$ command" of a console block and what the page
// shows it printing.
type consoleStep struct {
	line    int
	command string
	want    []string
}

// readPage reads a page of docs/.
func readPage(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// consoleSteps returns the steps of every console block of a page.
func consoleSteps(t *testing.T, page string) []consoleStep {
	t.Helper()
	var steps []consoleStep
	inBlock, cont := false, false
	sc := bufio.NewScanner(strings.NewReader(page))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock:
			inBlock = trimmed == "```console"
		case trimmed == "```":
			inBlock = false
		case cont:
			rest, more := strings.CutSuffix(strings.TrimRight(line, " \t"), "\\")
			steps[len(steps)-1].command += rest
			cont = more
		case strings.HasPrefix(line, "$ "):
			rest, more := strings.CutSuffix(strings.TrimRight(line[2:], " \t"), "\\")
			steps = append(steps, consoleStep{line: n, command: rest})
			cont = more
		case len(steps) == 0:
			t.Fatalf("line %d: output before any $ command", n)
		default:
			s := &steps[len(steps)-1]
			s.want = append(s.want, line)
		}
	}
	if inBlock {
		t.Fatal("unterminated console block")
	}
	return steps
}

// fencedBlock returns the body of the block whose opening fence is
// exactly opening, which must occur once.
func fencedBlock(t *testing.T, page, opening string) string {
	t.Helper()
	parts := strings.Split(page, "\n"+opening+"\n")
	if len(parts) != 2 {
		t.Fatalf("%d blocks open with %s, want 1", len(parts)-1, opening)
	}
	body, _, ok := strings.Cut(parts[1], "\n```\n")
	if !ok {
		t.Fatalf("the block %s is not closed", opening)
	}
	return body + "\n"
}

// outputLines splits what a command printed into lines without line ends,
// trailing blanks or trailing empty lines.
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

func (s consoleStep) String() string { return fmt.Sprintf("line %d: $ %s", s.line, s.command) }
