package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/auth"
)

// TestPythonWorkerLosesNoStepWhenAgqIsKilled kills agq with SIGKILL while
// eight threads of a Python Worker wait in the last step of their jobs,
// then lets those steps end while agq is down: each handler returns at
// once, so the step's held completion rides in the pipeline of the job's
// final report, into the outage. Once agq is back, every job ends
// completed on its first attempt, every step completed with its output,
// and no step ran twice.
func TestPythonWorkerLosesNoStepWhenAgqIsKilled(t *testing.T) {
	t.Parallel()
	srv := &agqRun{bin: agqBinary(t), addr: agqtest.StableAddr(t), databaseURL: agqtest.NewDatabase(t),
		adminKey: auth.GenerateKey(), dir: t.TempDir()}
	srv.start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.addr, Password: srv.adminKey, MaxRetries: -1})
	defer admin.Close()
	key, err := admin.Do(ctx, "KEY.CREATE", "worker", "py-kill-1").Text()
	if err != nil {
		t.Fatal(err)
	}
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const n, threads = 40, 8
	docs := make([]string, n)
	payload, _ := json.Marshal(map[string]string{"hold_while": hold})
	for i := range docs {
		docs[i] = `{"queue":"py-kill","type":"last-step-waits","max_attempts":3,"payload":` + string(payload) + `}`
	}
	ids, err := admin.Do(ctx, "JOB.SUBMIT", "["+strings.Join(docs, ",")+"]").StringSlice()
	if err != nil || len(ids) != n {
		t.Fatalf("submitted %d jobs: %v", len(ids), err)
	}

	pkg := pythonPackage(t)
	cmd := exec.Command(python, filepath.Join(pkg, "tests", "workers.py"), "last-step-waits", "py-kill-1", key, "py-kill")
	cmd.Env = append(cleanEnv(), "PYTHONPATH="+pkg, "PYTHONDONTWRITEBYTECODE=1", "AGQ_ADDR="+srv.addr,
		fmt.Sprintf("WORKER_CONCURRENCY=%d", threads))
	worker := startProcess(t, "workers.py", cmd)
	agqtest.Eventually(t, 60*time.Second, func() error {
		if k := worker.logCount("step three began for"); k < threads {
			return fmt.Errorf("%d handlers wait in step three", k)
		}
		return nil
	})

	srv.kill(t)
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	// Longer than redis-py's own retries: the Worker meets the outage.
	time.Sleep(2 * time.Second)
	srv.start(t)

	for _, id := range ids {
		j := waitJob(t, admin, id, 60*time.Second)
		if j.Status != "completed" || j.Attempt != 1 {
			t.Errorf("job %s: %s on attempt %d", id, j.Status, j.Attempt)
		}
		raw, err := admin.Do(ctx, "JOB.STEPS", id).Text()
		if err != nil {
			t.Fatal(err)
		}
		var steps []struct {
			StepID   string          `json:"step_id"`
			Status   string          `json:"status"`
			Attempts int             `json:"attempts"`
			Output   json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal([]byte(raw), &steps); err != nil || len(steps) != 3 {
			t.Fatalf("JOB.STEPS %s: %v: %s", id, err, raw)
		}
		for _, s := range steps {
			want, _ := json.Marshal(s.StepID + " of " + id)
			if s.Status != "completed" || s.Attempts != 1 || string(s.Output) != string(want) {
				t.Errorf("job %s, step %s: %s after %d attempts with %s, want completed once with %s",
					id, s.StepID, s.Status, s.Attempts, s.Output, want)
			}
			if k := worker.logCount("step " + s.StepID + " ran for " + id); k != 1 {
				t.Errorf("job %s, step %s ran %d times", id, s.StepID, k)
			}
		}
	}
	if worker.logCount("failed") == 0 {
		t.Error("the Worker's log shows no call that met the outage")
	}
	worker.signal(t, syscall.SIGTERM)
	if code := worker.waitExit(t, 30*time.Second); code != 0 {
		t.Errorf("the Worker exited %d after SIGTERM", code)
	}
}

// agqRun is the agq binary run as a process, killed with SIGKILL and
// started again on the same address and database.
type agqRun struct {
	bin, addr, databaseURL, adminKey, dir string
	p                                     *process
}

// start runs agq and waits until it answers PING.
func (a *agqRun) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(a.bin, "--listen", a.addr, "--http-listen", "off", "--database-url", a.databaseURL,
		"--data-dir", a.dir, "--admin-key", a.adminKey, "--log-level", "warn")
	cmd.Env = cleanEnv()
	a.p = startProcess(t, "agq", cmd)
	c := redis.NewClient(&redis.Options{Addr: a.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	agqtest.Eventually(t, 30*time.Second, func() error { return c.Ping(context.Background()).Err() })
}

// kill ends agq with SIGKILL: no shutdown code runs.
func (a *agqRun) kill(t *testing.T) {
	t.Helper()
	a.p.signal(t, syscall.SIGKILL)
	a.p.waitExit(t, 10*time.Second)
}
