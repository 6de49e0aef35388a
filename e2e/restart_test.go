package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
)

// TestAgwSurvivesARestartOfAgq stops agq under a running agw and starts it
// again on the same port and database: agw reconnects, registers again and
// carries on, and every job — finished before, running across the restart,
// submitted as soon as agq is back, submitted once agw is back — completes.
func TestAgwSurvivesARestartOfAgq(t *testing.T) {
	t.Parallel()
	cfg := agqtest.DefaultConfig(t)
	cfg.Listen = agqtest.StableAddr(t)
	cfg.HeartbeatInterval = 2 * time.Second
	a := agqtest.StartConfig(t, cfg)
	admin := a.Admin(t)
	agw := startAgw(t, a.Addr, "agw-steady", a.CreateKey(t, "worker", "agw-steady"), "AGW_CONCURRENCY=2")

	submit(t, admin, `{"job_id":"before","plan":{"tasks":[{"tool":"echo","args":["before"]}]}}`)
	if j := waitJob(t, admin, "before", 20*time.Second); j.Status != "completed" {
		t.Fatalf("before: %+v", j)
	}
	registered := getWorker(t, admin, "agw-steady").RegisteredAt
	secs := uniqueSleep(2)
	submit(t, admin, `{"job_id":"across","plan":{"tasks":[{"tool":"sleep","args":["`+secs+`"]}]}}`)
	waitProcesses(t, 10*time.Second, 1, "sleep", secs)

	if err := a.Node.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	a = agqtest.StartConfig(t, cfg)
	admin = a.Admin(t)
	for _, id := range []string{"during-1", "during-2"} {
		submit(t, admin, `{"job_id":"`+id+`","plan":{"tasks":[{"tool":"echo","args":["`+id+`"]}]}}`)
	}
	agqtest.Eventually(t, 20*time.Second, func() error {
		if w := getWorker(t, admin, "agw-steady"); w.State != "ACTIVE" || !w.RegisteredAt.After(registered) {
			return fmt.Errorf("agw has not registered again: %+v", w)
		}
		return nil
	})
	submit(t, admin, `{"job_id":"after","plan":{"tasks":[{"tool":"echo","args":["after"]}]}}`)

	for _, id := range []string{"across", "during-1", "during-2", "after"} {
		j := waitJob(t, admin, id, 30*time.Second)
		if j.Status != "completed" || j.worker() != "agw-steady" {
			t.Errorf("%s: %+v", id, j)
		}
		t.Logf("%s: completed at attempt %d, errors %+v", id, j.Attempt, j.Errors)
	}
	if !agw.running() {
		t.Fatal("agw exited")
	}
	if n := agw.logCount(msg("registered")); n < 2 {
		t.Errorf("agw registered %d times", n)
	}
	agw.signal(t, syscall.SIGTERM)
	if code := agw.waitExit(t, 15*time.Second); code != 0 {
		t.Fatalf("agw exited %d", code)
	}
}
