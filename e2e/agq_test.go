package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// heartbeatEvery is an agqtest option setting the heartbeat interval.
func heartbeatEvery(d time.Duration) agqtest.Option {
	return func(c *config.Config) { c.HeartbeatInterval = d }
}

// cli runs the real redis-cli against a, authenticated with key through
// REDISCLI_AUTH, and returns what it printed, without the last newline.
func cli(t *testing.T, a *agqtest.Agq, key string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := a.RedisCLICommand(ctx, t, args...)
	cmd.Env = append(cmd.Env, "REDISCLI_AUTH="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %q: %v\n%s", args, err, out)
	}
	return strings.TrimSuffix(string(out), "\n")
}

// submit submits a job given as JSON with go-redis and returns its id.
func submit(t *testing.T, c *redis.Client, job string) string {
	t.Helper()
	id, err := c.Do(context.Background(), "JOB.SUBMIT", job).Text()
	if err != nil {
		t.Fatalf("JOB.SUBMIT %s: %v", job, err)
	}
	return id
}

// jobView is the part of a job's JSON (JOB.GET, JOB.WAIT) the tests read.
type jobView struct {
	ID         string          `json:"job_id"`
	Status     string          `json:"status"`
	Attempt    int             `json:"attempt"`
	WorkerID   *string         `json:"worker_id"`
	Result     json.RawMessage `json:"result"`
	StartedAt  *time.Time      `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at"`
	Errors     []struct {
		Attempt  int    `json:"attempt"`
		WorkerID string `json:"worker_id"`
		Error    string `json:"error"`
	} `json:"errors"`
}

func (j jobView) worker() string {
	if j.WorkerID == nil {
		return ""
	}
	return *j.WorkerID
}

// failure is agw's failed report as agq keeps it in the job's result.
type failure struct {
	Status      string           `json:"status"`
	Error       string           `json:"error"`
	Retryable   *bool            `json:"retryable"`
	TaskResults []map[string]any `json:"task_results"`
}

func (j jobView) failure(t *testing.T) failure {
	t.Helper()
	var f failure
	if err := json.Unmarshal(j.Result, &f); err != nil || f.Status != "failed" {
		t.Fatalf("job %s: result %s is not a failure report (%v)", j.ID, j.Result, err)
	}
	return f
}

func decodeJob(t *testing.T, raw string) jobView {
	t.Helper()
	var j jobView
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		t.Fatalf("job %q: %v", raw, err)
	}
	return j
}

func getJob(t *testing.T, c *redis.Client, id string) jobView {
	t.Helper()
	raw, err := c.Do(context.Background(), "JOB.GET", id).Text()
	if err != nil {
		t.Fatalf("JOB.GET %s: %v", id, err)
	}
	return decodeJob(t, raw)
}

// waitJob waits with JOB.WAIT for the job to end.
func waitJob(t *testing.T, c *redis.Client, id string, timeout time.Duration) jobView {
	t.Helper()
	raw, err := c.Do(context.Background(), "JOB.WAIT", id, timeout.Seconds()).Text()
	if errors.Is(err, redis.Nil) {
		t.Fatalf("job %s did not end within %v: %+v", id, timeout, getJob(t, c, id))
	}
	if err != nil {
		t.Fatalf("JOB.WAIT %s: %v", id, err)
	}
	return decodeJob(t, raw)
}

// workerView is the part of WORKER.GET's JSON the tests read.
type workerView struct {
	State        string    `json:"state"`
	RegisteredAt time.Time `json:"registered_at"`
}

func getWorker(t *testing.T, c *redis.Client, id string) workerView {
	t.Helper()
	raw, err := c.Do(context.Background(), "WORKER.GET", id).Text()
	if err != nil {
		t.Fatalf("WORKER.GET %s: %v", id, err)
	}
	var w workerView
	if err := json.Unmarshal([]byte(raw), &w); err != nil {
		t.Fatalf("worker %q: %v", raw, err)
	}
	return w
}

// waitWorker waits for the worker to be in state.
func waitWorker(t *testing.T, c *redis.Client, id, state string) workerView {
	t.Helper()
	var w workerView
	agqtest.Eventually(t, 20*time.Second, func() error {
		raw, err := c.Do(context.Background(), "WORKER.GET", id).Text()
		if err != nil {
			return fmt.Errorf("WORKER.GET %s: %w", id, err)
		}
		if err := json.Unmarshal([]byte(raw), &w); err != nil {
			return err
		}
		if w.State != state {
			return fmt.Errorf("worker %s is %s, want %s", id, w.State, state)
		}
		return nil
	})
	return w
}

var sleepSerial atomic.Int64

// uniqueSleep is an argument for sleep that lasts about secs seconds and
// that no other process on the machine is likely to have, so that the
// tests can find the sleeps their jobs started, and only those, in /proc.
func uniqueSleep(secs int) string {
	return fmt.Sprintf("%d.%04d%04d", secs, os.Getpid()%10000, sleepSerial.Add(1)%10000)
}

// processes returns the pids of the live processes whose argument vector
// is exactly argv.
func processes(t *testing.T, argv ...string) []int {
	t.Helper()
	want := []byte(strings.Join(argv, "\x00") + "\x00")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("listing processes: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A zombie's cmdline is empty: it is dead, only not yet reaped.
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Equal(cmdline, want) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// waitProcesses waits until n processes run argv.
func waitProcesses(t *testing.T, within time.Duration, n int, argv ...string) {
	t.Helper()
	agqtest.Eventually(t, within, func() error {
		if got := processes(t, argv...); len(got) != n {
			return fmt.Errorf("%d processes run %q (pids %v), want %d", len(got), argv, got, n)
		}
		return nil
	})
}
