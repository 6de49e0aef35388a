package e2e

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
)

// TestCookbookSpawnRunsAsPrinted runs the cookbook's parent that spawns
// and awaits children, as printed — the Go worker built with the client
// package, and the Python one with agq's package — and the page's shell
// lines against each: they print what the page shows. The parent ends
// completed with the children's combined result, in one attempt, having
// spawned each child once.
//
// Not parallel: buildCookbookWorker builds in one directory per process.
func TestCookbookSpawnRunsAsPrinted(t *testing.T) {
	page := readPage(t, "cookbook.md")
	goWorker := buildCookbookWorker(t, fencedBlock(t, page, "```go title=\"spawn-worker.go\""))
	pyWorker := filepath.Join(t.TempDir(), "spawn-worker.py")
	if err := os.WriteFile(pyWorker, []byte(fencedBlock(t, page, "```python title=\"spawn-worker.py\"")), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fencedBlock(t, page, "```sh title=\"spawn.sh\"")
	shown := strings.TrimSpace(fencedBlock(t, page, "```text title=\"spawn output\""))

	for _, c := range []struct {
		name string
		cmd  func(id string) *exec.Cmd
	}{
		{"Go", func(string) *exec.Cmd { return exec.Command(goWorker) }},
		{"Python", func(string) *exec.Cmd { return exec.Command(python, pyWorker) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := agqtest.Start(t, heartbeatEvery(time.Second))
			admin := a.Admin(t)
			id := "splitter-" + strings.ToLower(c.name)
			cmd := c.cmd(id)
			cmd.Env = append(cleanEnv(), "AGQ_ADDR="+a.Addr, "AGQ_WORKER_ID="+id, "AGQ_KEY="+a.CreateKey(t, "worker", id),
				"PYTHONPATH="+pythonPackage(t), "PYTHONDONTWRITEBYTECODE=1")
			p := startProcess(t, id, cmd)
			waitWorker(t, admin, id, "ACTIVE")

			host, port, err := net.SplitHostPort(a.Addr)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "spawn.sh")
			if err := os.WriteFile(path, []byte(strings.ReplaceAll(script, "-p 6380", "-h "+host+" -p "+port)), 0o644); err != nil {
				t.Fatal(err)
			}
			run := exec.Command("sh", "-e", path)
			run.Env = append(cleanEnv(), "REDISCLI_AUTH="+a.AdminKey)
			out, err := run.CombinedOutput()
			if err != nil {
				t.Fatalf("spawn.sh: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); !agqtest.LinesMatch(strings.Split(shown, "\n"), strings.Split(got, "\n")) {
				t.Fatalf("spawn.sh printed:\n%s\nthe page shows:\n%s", got, shown)
			}

			ctx := context.Background()
			parent := getJob(t, admin, "words-1")
			if parent.Status != "completed" || parent.Attempt != 1 {
				t.Fatalf("the parent: %+v", parent)
			}
			for i, word := range []string{"alpha", "beta", "gamma"} {
				child := "words-1-count-" + string(rune('0'+i))
				raw, err := admin.Do(ctx, "JOB.GET", child).Text()
				if err != nil {
					t.Fatalf("JOB.GET %s: %v", child, err)
				}
				var j struct {
					Status  string `json:"status"`
					Attempt int    `json:"attempt"`
					Payload struct {
						Word string `json:"word"`
					} `json:"payload"`
				}
				if err := json.Unmarshal([]byte(raw), &j); err != nil || j.Status != "completed" || j.Attempt != 1 || j.Payload.Word != word {
					t.Errorf("child %s: %s (%v)", child, raw, err)
				}
			}
			if n := p.logCount("words-1 spawns 3 children"); n != 1 {
				t.Errorf("the worker spawned the children %d times, want once", n)
			}
		})
	}
}
