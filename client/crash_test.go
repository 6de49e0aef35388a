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
	srv := &agqProcess{bin: buildAgq(t), addr: agqtest.StableAddr(t), databaseURL: agqtest.NewDatabase(t),
		adminKey: auth.GenerateKey(), dir: t.TempDir()}
	t.Cleanup(srv.kill)
	ctx := context.Background()
	srv.start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.addr, Password: srv.adminKey, MaxRetries: -1})
	defer admin.Close()
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

	var mu sync.Mutex
	runs := map[string]int{}
	logs := &lockedBuffer{}
	var returned atomic.Int64
	w, err := client.NewWorker(client.WorkerOptions{Addr: srv.addr, WorkerID: "kill-1", Key: key, Concurrency: 20,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PopTimeout: time.Second, BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Past the first quarter, handlers wait for the kill: they return
	// while agq is down.
	release := make(chan struct{})
	var held atomic.Int64
	w.Handle("work", func(ctx context.Context, j *client.Job) (any, error) {
		if returned.Load() >= n/4 {
			held.Add(1)
			<-release
		}
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		runs[j.ID()]++
		mu.Unlock()
		returned.Add(1)
		return "done", nil
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	agqtest.Eventually(t, 30*time.Second, func() error {
		if k, h := returned.Load(), held.Load(); k < n/4 || h == 0 {
			return fmt.Errorf("%d handlers returned, %d wait", k, h)
		}
		return nil
	})
	srv.kill()
	// The handlers held return while agq is down: their reports fail,
	// and with those the kill cut off, wait for agq. The outage outlasts
	// go-redis's own dial retries (5 attempts), which would hide it.
	close(release)
	time.Sleep(2 * time.Second)
	mu.Lock()
	returnedWhileDown := slices.Collect(maps.Keys(runs))
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
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range returnedWhileDown {
		if runs[id] != 1 {
			t.Errorf("job %s, done before agq was back, ran %d times", id, runs[id])
		}
	}
	if retries := logs.count("JOB.UPDATE failed"); retries == 0 {
		t.Errorf("no report was sent again; the worker's log:\n%s", logs.String())
	}
	t.Logf("%d of %d handlers had returned before agq was back", len(returnedWhileDown), n)
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
