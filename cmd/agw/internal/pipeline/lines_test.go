package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// A run hands its output's lines over as they come: the last task's stdout
// as task 0, each task's stderr under its number.
func TestRunHandsOverOutputLines(t *testing.T) {
	t.Parallel()
	e := newExecutor(t)
	var mu sync.Mutex
	var got []string
	spec := Spec{
		Tasks: []Task{task("seq", "1", "3"), task("grep", "-v", "--", "nothing"), task("head", "-n", "2", "/nonexistent")},
		OnLine: func(n int, stderr bool, line string) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, fmt.Sprintf("%d %v %s", n, stderr, line))
		},
	}
	e.Run(context.Background(), spec, nil)
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "3 true head: ") }) {
		t.Errorf("no stderr line of task 3 in %q", got)
	}
	spec.Tasks = []Task{task("seq", "1", "3")}
	got = nil
	mu.Unlock()
	e.Run(context.Background(), spec, nil)
	mu.Lock()
	if strings.Join(got, "|") != "0 false 1|0 false 2|0 false 3" {
		t.Errorf("stdout lines %q", got)
	}
}

func TestLineTap(t *testing.T) {
	var got []string
	tap := &lineTap{fn: func(s string) { got = append(got, s) }}
	fmt.Fprint(tap, "a\nb")
	fmt.Fprint(tap, "c\r\n"+strings.Repeat("x", 2000)+"\n\x00\xff\nend")
	tap.flush()
	want := []string{"a", "bc", strings.Repeat("x", maxLine) + "…", "\uFFFD\uFFFD", "end"}
	if !slices.Equal(got, want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
}
