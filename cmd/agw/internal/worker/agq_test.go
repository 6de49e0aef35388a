package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/agq/agq/cmd/agw/internal/pipeline"
	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

const testWorkerID = "worker-test"

// testBundle is a Worker running against a real in-process agq.
type testBundle struct {
	agq    *agqtest.Agq
	admin  *redis.Client
	worker *Worker
	cfg    Config
	logs   *lockedBuffer
	cancel context.CancelFunc
	done   chan error
}

// setup starts an agq node (opts adjust its config), mints a worker key
// and runs a worker with it; adjust may change the worker's config first.
func setup(t *testing.T, adjust func(*Config), opts ...agqtest.Option) *testBundle {
	t.Helper()
	a := agqtest.Start(t, opts...)
	cfg := testConfig(t, a.Addr, a.CreateKey(t, "worker", testWorkerID))
	if adjust != nil {
		adjust(&cfg)
	}
	return run(t, a, cfg)
}

// heartbeatEvery is an agqtest option setting the heartbeat interval.
func heartbeatEvery(d time.Duration) agqtest.Option {
	return func(c *config.Config) { c.HeartbeatInterval = d }
}

// testConfig is a worker's config for tests: quick backoff, short pops,
// and a few tools.
func testConfig(t *testing.T, addr, key string) Config {
	t.Helper()
	tools, _, err := pipeline.ResolveTools([]string{"sort", "uniq", "sleep", "true", "cat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Addr:              addr,
		WorkerID:          testWorkerID,
		Key:               key,
		Queues:            []string{"urgent", "ready"},
		Concurrency:       2,
		ShutdownTimeout:   5 * time.Second,
		Executor:          &pipeline.Executor{Tools: tools, KillGrace: 200 * time.Millisecond},
		Version:           "9.9.9",
		PopTimeout:        time.Second,
		BackoffMin:        20 * time.Millisecond,
		BackoffMax:        200 * time.Millisecond,
		UnregisterTimeout: 2 * time.Second,
	}
}

// run starts cfg's worker against a (which may be nil when the server is
// not up yet) and stops it when the test ends.
func run(t *testing.T, a *agqtest.Agq, cfg Config) *testBundle {
	t.Helper()
	logs := &lockedBuffer{}
	cfg.Log = zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.DebugLevel)
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &testBundle{agq: a, worker: w, cfg: cfg, logs: logs, cancel: cancel, done: make(chan error, 1)}
	if a != nil {
		b.admin = a.Admin(t)
	}
	go func() { b.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		b.stopAtEnd(t)
		if strings.Contains(logs.String(), cfg.Key) {
			t.Error("the key appears in the log")
		}
	})
	return b
}

// stopAtEnd drains the worker as a test ends and waits for Run to return.
func (b *testBundle) stopAtEnd(t *testing.T) {
	b.cancel()
	select {
	case err := <-b.done:
		b.done <- err
	case <-time.After(20 * time.Second):
		t.Error("the worker did not stop")
	}
}

// lockedBuffer collects the log of a worker, written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// count returns how many log lines contain s.
func (b *lockedBuffer) count(s string) int {
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// stop drains the worker and waits for Run to return.
func (b *testBundle) stop(t *testing.T, within time.Duration) error {
	t.Helper()
	b.cancel()
	select {
	case err := <-b.done:
		b.done <- err // for the cleanup
		return err
	case <-time.After(within):
		t.Fatalf("Run did not return within %v of the shutdown", within)
		return nil
	}
}

// jobView is the part of JOB.GET's JSON these tests read.
type jobView struct {
	ID         string          `json:"job_id"`
	Status     string          `json:"status"`
	Attempt    int             `json:"attempt"`
	WorkerID   *string         `json:"worker_id"`
	Progress   json.RawMessage `json:"progress"`
	Result     json.RawMessage `json:"result"`
	StartedAt  *time.Time      `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at"`
	Errors     []struct {
		Attempt  int    `json:"attempt"`
		WorkerID string `json:"worker_id"`
		Error    string `json:"error"`
	} `json:"errors"`
}

// resultView is agw's final report as agq keeps it in the job's result.
type resultView struct {
	Status          string           `json:"status"`
	Output          string           `json:"output"`
	OutputTruncated bool             `json:"output_truncated"`
	Error           string           `json:"error"`
	Retryable       *bool            `json:"retryable"`
	CompletedAt     string           `json:"completed_at"`
	FailedAt        string           `json:"failed_at"`
	TaskResults     []map[string]any `json:"task_results"`
}

func (j jobView) result(t *testing.T) resultView {
	t.Helper()
	var r resultView
	if err := json.Unmarshal(j.Result, &r); err != nil {
		t.Fatalf("job %s: result %s: %v", j.ID, j.Result, err)
	}
	return r
}

// submit submits one job given as JSON and returns its id.
func (b *testBundle) submit(t *testing.T, job string) string {
	t.Helper()
	id, err := b.admin.Do(context.Background(), "JOB.SUBMIT", job).Text()
	if err != nil {
		t.Fatalf("JOB.SUBMIT %s: %v", job, err)
	}
	return id
}

func (b *testBundle) get(t *testing.T, id string) jobView {
	t.Helper()
	raw, err := b.admin.Do(context.Background(), "JOB.GET", id).Text()
	if err != nil {
		t.Fatalf("JOB.GET %s: %v", id, err)
	}
	return decodeJob(t, raw)
}

// wait waits with JOB.WAIT for the job to end.
func (b *testBundle) wait(t *testing.T, id string, timeout time.Duration) jobView {
	t.Helper()
	raw, err := b.admin.Do(context.Background(), "JOB.WAIT", id, timeout.Seconds()).Text()
	if errors.Is(err, redis.Nil) {
		t.Fatalf("job %s did not end within %v: %+v", id, timeout, b.get(t, id))
	}
	if err != nil {
		t.Fatalf("JOB.WAIT %s: %v", id, err)
	}
	return decodeJob(t, raw)
}

func decodeJob(t *testing.T, raw string) jobView {
	t.Helper()
	var j jobView
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		t.Fatalf("job %q: %v", raw, err)
	}
	return j
}

// workerView is the part of WORKER.GET's JSON these tests read.
type workerView struct {
	State             string          `json:"state"`
	Principal         string          `json:"principal"`
	Capabilities      []string        `json:"capabilities"`
	Metadata          json.RawMessage `json:"metadata"`
	Stats             json.RawMessage `json:"stats"`
	MaxConcurrentJobs int             `json:"max_concurrent_jobs"`
	RegisteredAt      time.Time       `json:"registered_at"`
	LastHeartbeatAt   time.Time       `json:"last_heartbeat_at"`
	StateChangedAt    time.Time       `json:"state_changed_at"`
}

func (b *testBundle) workerState(t *testing.T) workerView {
	t.Helper()
	raw, err := b.admin.Do(context.Background(), "WORKER.GET", b.cfg.WorkerID).Text()
	if err != nil {
		t.Fatalf("WORKER.GET %s: %v", b.cfg.WorkerID, err)
	}
	var w workerView
	if err := json.Unmarshal([]byte(raw), &w); err != nil {
		t.Fatalf("worker %q: %v", raw, err)
	}
	return w
}

// waitState waits for the worker's registration to be in state.
func (b *testBundle) waitState(t *testing.T, state string) workerView {
	t.Helper()
	var w workerView
	agqtest.Eventually(t, 10*time.Second, func() error {
		raw, err := b.admin.Do(context.Background(), "WORKER.GET", b.cfg.WorkerID).Text()
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(raw), &w); err != nil {
			return err
		}
		if w.State != state {
			return fmt.Errorf("worker is %s, want %s", w.State, state)
		}
		return nil
	})
	return w
}

// waitStarted waits until the worker has acknowledged the job and started
// its plan.
func (b *testBundle) waitStarted(t *testing.T, jobID string) {
	t.Helper()
	agqtest.Eventually(t, 10*time.Second, func() error {
		for _, line := range strings.Split(b.logs.String(), "\n") {
			if strings.Contains(line, `"job_id":"`+jobID+`"`) && strings.Contains(line, `"message":"job started"`) {
				return nil
			}
		}
		return fmt.Errorf("job %s has not started", jobID)
	})
}

// waitIdle waits until the worker holds no job.
func (b *testBundle) waitIdle(t *testing.T, within time.Duration) {
	t.Helper()
	agqtest.Eventually(t, within, func() error {
		if n := b.worker.client.Stats().ActiveJobs; n != 0 {
			return fmt.Errorf("%d jobs still running", n)
		}
		return nil
	})
}
