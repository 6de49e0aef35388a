package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/client"
	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/auth"
)

// A kill -9 of agq while the worker reports: the reports it had not had an
// answer to are sent again once agq is back and accepted, so that every
// job whose handler returned ends completed, on its first attempt and
// without running again.
func TestWorkerLosesNoReportWhenAgqIsKilled(t *testing.T) {
	t.Parallel()
	var runs counts
	k := killWhileReporting(t, func(ctx context.Context, j *client.Job, hold func()) error {
		hold()
		time.Sleep(10 * time.Millisecond)
		runs.add(j.ID())
		return nil
	})
	for _, id := range k.returnedWhileDown {
		if n := runs.get(id); n != 1 {
			t.Errorf("job %s, done before agq was back, ran %d times", id, n)
		}
	}
	if retries := k.logs.count("JOB.UPDATE failed"); retries == 0 {
		t.Errorf("no report was sent again; the worker's log:\n%s", k.logs.String())
	}
}

// A kill -9 of agq while the completions of jobs' last steps ride in
// their final reports' pipelines: sent again with the reports once agq is
// back, every step reads completed with its output, and no step's work
// ran twice.
func TestWorkerLosesNoHeldStepWhenAgqIsKilled(t *testing.T) {
	t.Parallel()
	var runs counts
	steps := []string{"fetch", "transform", "store"}
	k := killWhileReporting(t, func(ctx context.Context, j *client.Job, hold func()) error {
		for i, s := range steps {
			_, err := client.Step(ctx, j, s, nil, func(context.Context) (string, error) {
				if i == len(steps)-1 {
					// Its completion is held and the handler returns
					// at once: the final report carries it, into the
					// outage.
					hold()
				}
				runs.add(j.ID() + "/" + s)
				return s + " of " + j.ID(), nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	for _, id := range k.ids {
		raw, err := k.admin.Do(context.Background(), "JOB.STEPS", id).Text()
		if err != nil {
			t.Fatal(err)
		}
		var got []struct {
			StepID   string          `json:"step_id"`
			Status   string          `json:"status"`
			Attempts int             `json:"attempts"`
			Output   json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal([]byte(raw), &got); err != nil {
			t.Fatalf("JOB.STEPS %s: %v: %s", id, err, raw)
		}
		if len(got) != len(steps) {
			t.Fatalf("job %s has %d steps: %s", id, len(got), raw)
		}
		for i, s := range got {
			want, _ := json.Marshal(steps[i] + " of " + id)
			if s.StepID != steps[i] || s.Status != "completed" || s.Attempts != 1 || string(s.Output) != string(want) {
				t.Errorf("job %s, step %d: %+v (output %s), want %s completed on its first attempt with %s", id, i, s, s.Output, steps[i], want)
			}
			if n := runs.get(id + "/" + s.StepID); n != 1 {
				t.Errorf("job %s, step %s ran %d times", id, s.StepID, n)
			}
		}
	}
	if retries := k.logs.count("JOB.UPDATE failed"); retries == 0 {
		t.Errorf("no report was sent again; the worker's log:\n%s", k.logs.String())
	}
}

// killed is what killWhileReporting leaves to check.
type killed struct {
	ids               []string // the jobs, every one completed on its first attempt
	returnedWhileDown []string // the jobs whose handler returned while agq was down
	logs              *lockedBuffer
	admin             *redis.Client
}

// killWhileReporting runs 400 jobs through a Worker of 20 slots, each by
// work. Once a quarter of them returned, hold waits until agq is down, and
// agq is killed with SIGKILL when 15 slots wait there: the work after
// hold, and the reports, meet the outage, which outlasts go-redis's own
// dial retries (5 attempts) that would hide it. agq is then started
// again, and every job must end completed on its first attempt.
func killWhileReporting(t *testing.T, work func(ctx context.Context, j *client.Job, hold func()) error) killed {
	srv := &agqProcess{bin: buildAgq(t), addr: agqtest.StableAddr(t), databaseURL: agqtest.NewDatabase(t),
		adminKey: auth.GenerateKey(), dir: t.TempDir()}
	t.Cleanup(srv.kill)
	ctx := context.Background()
	srv.start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.addr, Password: srv.adminKey, MaxRetries: -1})
	t.Cleanup(func() { admin.Close() })
	key, err := admin.Do(ctx, "KEY.CREATE", "worker", "kill-1").Text()
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	docs := make([]string, n)
	for i := range docs {
		docs[i] = `{"type":"work","max_attempts":3}`
	}
	raw, err := admin.Do(ctx, "JOB.SUBMIT", "["+strings.Join(docs, ",")+"]").StringSlice()
	if err != nil || len(raw) != n {
		t.Fatalf("submitted %d jobs: %v", len(raw), err)
	}

	k := killed{ids: raw, logs: &lockedBuffer{}, admin: admin}
	var returned atomic.Int64
	var mu sync.Mutex
	whileDown := map[string]bool{}
	down := make(chan struct{})
	w, err := client.NewWorker(client.WorkerOptions{Addr: srv.addr, WorkerID: "kill-1", Key: key, Concurrency: 20,
		Logger:     slog.New(slog.NewTextHandler(k.logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PopTimeout: time.Second, BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var held atomic.Int64
	w.Handle("work", func(ctx context.Context, j *client.Job) (any, error) {
		heldHere := false
		err := work(ctx, j, func() {
			if returned.Load() >= n/4 {
				held.Add(1)
				heldHere = true
				<-down
			}
		})
		if heldHere {
			mu.Lock()
			whileDown[j.ID()] = true
			mu.Unlock()
		}
		returned.Add(1)
		return "done", err
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	agqtest.Eventually(t, 30*time.Second, func() error {
		if r, h := returned.Load(), held.Load(); r < n/4 || h < 15 {
			return fmt.Errorf("%d handlers returned, %d wait", r, h)
		}
		return nil
	})
	srv.kill()
	close(down)
	time.Sleep(2 * time.Second)
	mu.Lock()
	k.returnedWhileDown = slices.Collect(maps.Keys(whileDown))
	mu.Unlock()
	srv.start(t)

	for _, id := range raw {
		var j struct {
			Status  string `json:"status"`
			Attempt int    `json:"attempt"`
		}
		agqtest.Eventually(t, 30*time.Second, func() error {
			got, err := admin.Do(ctx, "JOB.GET", id).Text()
			if err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(got), &j); err != nil {
				return err
			}
			if j.Status != "completed" {
				return fmt.Errorf("job %s is %s", id, j.Status)
			}
			return nil
		})
		if j.Attempt != 1 {
			t.Errorf("job %s completed on attempt %d", id, j.Attempt)
		}
	}
	t.Logf("%d of %d handlers had returned before agq was back", len(k.returnedWhileDown), n)
	return k
}

// counts counts runs by name, from many goroutines.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

func (c *counts) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// agqProcess is the agq binary run as a subprocess, restartable on the
// same address and database.
type agqProcess struct {
	bin, addr, databaseURL, adminKey, dir string
	runs                                  int
	cmd                                   *exec.Cmd
	exited                                chan error
}

// start runs agq and waits until it answers PING.
func (p *agqProcess) start(t *testing.T) {
	t.Helper()
	p.runs++
	logFile, err := os.Create(filepath.Join(p.dir, fmt.Sprintf("agq-%d.log", p.runs)))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(p.bin, "--listen", p.addr, "--http-listen", "off", "--database-url", p.databaseURL,
		"--data-dir", p.dir, "--admin-key", p.adminKey, "--ack-timeout", "5s", "--log-level", "warn")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "AGQ_") })
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting agq: %v", err)
	}
	p.cmd, p.exited = cmd, make(chan error, 1)
	go func() { p.exited <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	agqtest.Eventually(t, 30*time.Second, func() error { return c.Ping(context.Background()).Err() })
}

// kill ends agq with SIGKILL: no shutdown code runs.
func (p *agqProcess) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.cmd = nil
}

// buildAgq builds the agq binary of this checkout.
func buildAgq(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agq")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/agq").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// lockedBuffer collects a worker's log, written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
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

func (b *lockedBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}
