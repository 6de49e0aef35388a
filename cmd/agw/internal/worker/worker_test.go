package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agq/agq/cmd/agw/internal/pipeline"
)

// testBundle is a worker connected to a fake agq.
type testBundle struct {
	agq    *fakeAgq
	worker *Worker
	cancel context.CancelFunc
	done   chan error
}

// setup starts a worker against a fake agq; adjust may change the fake's
// hooks and the worker's config before anything starts.
func setup(t *testing.T, adjust func(*fakeAgq, *Config)) *testBundle {
	t.Helper()
	f := newFakeAgq(t)
	logs := &lockedBuffer{}
	tools, _, err := pipeline.ResolveTools([]string{"sort", "uniq", "sleep", "true", "cat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Addr:              f.addr(),
		WorkerID:          "worker-test",
		Key:               "k3y",
		Queues:            []string{"urgent", "ready"},
		Concurrency:       2,
		ShutdownTimeout:   5 * time.Second,
		Executor:          &pipeline.Executor{Tools: tools, KillGrace: 200 * time.Millisecond},
		Version:           "9.9.9",
		Log:               zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.DebugLevel),
		PopTimeout:        time.Second,
		BackoffMin:        20 * time.Millisecond,
		BackoffMax:        200 * time.Millisecond,
		UnregisterTimeout: 2 * time.Second,
	}
	if adjust != nil {
		adjust(f, &cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &testBundle{agq: f, worker: w, cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-b.done:
		case <-time.After(20 * time.Second):
			t.Error("the worker did not stop")
		}
		if strings.Contains(logs.String(), cfg.Key) {
			t.Error("the key appears in the log")
		}
	})
	return b
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

func job(id, plan, stdin string) string {
	b, _ := json.Marshal(map[string]any{
		"job_id": id, "type": "", "queue": "ready", "attempt": 1, "max_attempts": 3, "timeout_seconds": 60,
		"plan": json.RawMessage(plan), "inputs": map[string]string{"stdin": stdin}, "payload": nil,
	})
	return string(b)
}

func decode(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("update %q: %v", body, err)
	}
	return m
}

// waitStatus waits for a job's update with the given status and returns it.
func (b *testBundle) waitStatus(t *testing.T, jobID, status string) map[string]any {
	t.Helper()
	var found map[string]any
	b.agq.waitFor(jobID+" "+status, 10*time.Second, func() bool {
		for _, u := range b.agq.updates(jobID) {
			if m := decode(t, u); m["status"] == status {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

func TestWorkerRunsAJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.agq.push("ready", job("j1", `{"tasks":[{"tool":"sort"},{"tool":"uniq","args":["-c"]}]}`, "b\na\nb\n"))

	done := b.waitStatus(t, "j1", "completed")
	if done["output"] != "      1 a\n      2 b\n" {
		t.Fatalf("output %q", done["output"])
	}
	results, _ := done["task_results"].([]any)
	if len(results) != 2 {
		t.Fatalf("task_results %v", done["task_results"])
	}
	first := results[0].(map[string]any)
	for _, k := range []string{"tool", "exit_code", "stderr", "duration_ms"} {
		if _, ok := first[k]; !ok {
			t.Fatalf("task result %v has no %s", first, k)
		}
	}
	if _, err := time.Parse(time.RFC3339, done["completed_at"].(string)); err != nil {
		t.Fatal(err)
	}

	ups := b.agq.updates("j1")
	running := decode(t, ups[0])
	if running["status"] != "running" || running["worker_id"] != "worker-test" {
		t.Fatalf("first update %v: want the running acknowledgement", running)
	}
	if _, err := time.Parse(time.RFC3339, running["started_at"].(string)); err != nil {
		t.Fatal(err)
	}
	for _, u := range ups[1 : len(ups)-1] {
		m := decode(t, u)
		if _, ok := m["current_task"]; !ok || m["status"] != nil {
			t.Fatalf("middle update %v: want progress", m)
		}
	}

	// Registration, pops and heartbeats as the protocol says.
	regs := b.agq.calls("WORKER.REGISTER")
	if len(regs) != 1 {
		t.Fatalf("%d registrations", len(regs))
	}
	var reg struct {
		WorkerID     string `json:"worker_id"`
		Hostname     string `json:"hostname"`
		Platform     string `json:"platform"`
		AgwVersion   string `json:"agw_version"`
		Capabilities struct {
			Tools        []string `json:"tools"`
			AgenticUnits []string `json:"agentic_units"`
			Types        []string `json:"types"`
		} `json:"capabilities"`
		MaxConcurrentJobs int               `json:"max_concurrent_jobs"`
		Tags              map[string]string `json:"tags"`
	}
	if err := json.Unmarshal([]byte(regs[0][1]), &reg); err != nil {
		t.Fatal(err)
	}
	if reg.WorkerID != "worker-test" || reg.Hostname == "" || reg.Platform == "" || reg.AgwVersion != "9.9.9" ||
		strings.Join(reg.Capabilities.Tools, ",") != "cat,sleep,sort,true,uniq" || reg.Capabilities.AgenticUnits == nil ||
		reg.Capabilities.Types == nil || reg.MaxConcurrentJobs != 2 || reg.Tags == nil {
		t.Fatalf("registration %s", regs[0][1])
	}
	for _, p := range b.agq.calls("BRPOP") {
		if strings.Join(p[1:], " ") != "queue:urgent queue:ready 1" {
			t.Fatalf("BRPOP %q", p)
		}
	}
	b.agq.waitFor("a heartbeat", 5*time.Second, func() bool { return len(b.agq.calls("WORKER.HEARTBEAT")) > 0 })
	hb := b.agq.calls("WORKER.HEARTBEAT")[0]
	stats := decode(t, hb[2])
	for _, k := range []string{"active_jobs", "completed_jobs_total", "failed_jobs_total", "uptime_seconds", "cpu_usage_percent", "memory_mb", "disk_available_gb"} {
		if _, ok := stats[k]; !ok || hb[1] != "worker-test" {
			t.Fatalf("heartbeat %q lacks %s", hb, k)
		}
	}

	if err := b.stop(t, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if u := b.agq.calls("WORKER.UNREGISTER"); len(u) != 1 || u[0][1] != "worker-test" {
		t.Fatalf("unregister calls %q", u)
	}
	auth := b.agq.calls("AUTH")
	if len(auth) == 0 || auth[0][1] != "worker-test" || auth[0][2] != "k3y" {
		t.Fatalf("AUTH %q: want the worker id as user and the key as password", auth)
	}
}

func TestWorkerReportsFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.agq.push("ready", job("refused", `{"tasks":[{"tool":"sh","args":["-c","id"]}]}`, ""))
	b.agq.push("ready", job("exit", `{"tasks":[{"tool":"sort","args":["--no-such-option"]}]}`, ""))
	b.agq.push("ready", job("noplan", `null`, ""))

	for _, tt := range []struct {
		id        string
		retryable bool
		error     string
	}{
		{"refused", false, `task 1 (sh): refused: tool "sh" is not offered by this worker`},
		{"exit", true, "task 1 (sort): exited with status 2: sort: unrecognized option"},
		{"noplan", false, "refused: the job has no plan"},
	} {
		m := b.waitStatus(t, tt.id, "failed")
		if m["retryable"] != tt.retryable || !strings.HasPrefix(m["error"].(string), tt.error) {
			t.Errorf("%s: %v", tt.id, m)
		}
		if _, ok := m["task_results"].([]any); !ok {
			t.Errorf("%s: task_results %v, want a list", tt.id, m["task_results"])
		}
	}
}

func TestWorkerCancellation(t *testing.T) {
	t.Parallel()

	t.Run("ThroughHeartbeat", func(t *testing.T) {
		t.Parallel()
		var cancelJob atomic.Bool
		b := setup(t, func(f *fakeAgq, _ *Config) {
			f.heartbeatReply = func(string) string {
				if cancelJob.Load() {
					return "+OK cancel=other,slow"
				}
				return "+OK"
			}
		})
		b.agq.push("ready", job("slow", `{"tasks":[{"tool":"sleep","args":["30"]}]}`, ""))
		b.waitStatus(t, "slow", "running")
		cancelJob.Store(true)
		b.agq.waitFor("the job to stop", 5*time.Second, func() bool { return b.worker.active.Load() == 0 })
		for _, u := range b.agq.updates("slow")[1:] {
			if s := decode(t, u)["status"]; s != nil {
				t.Fatalf("a cancelled job was reported %v", s)
			}
		}
	})

	t.Run("ThroughUpdateReply", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(f *fakeAgq, _ *Config) {
			f.updateReply = func(_, body string, _ int) string {
				if strings.Contains(body, "current_task") {
					return "-CANCELLED job slow was cancelled"
				}
				return "+OK"
			}
		})
		// "true" ends at once, which sends progress, which is answered
		// -CANCELLED: the sleep must be killed.
		start := time.Now()
		b.agq.push("ready", job("slow", `{"tasks":[{"tool":"true"},{"tool":"sleep","args":["30"]}]}`, ""))
		b.waitStatus(t, "slow", "running")
		b.agq.waitFor("the job to stop", 5*time.Second, func() bool {
			return len(b.agq.updates("slow")) >= 2 && b.worker.active.Load() == 0
		})
		if time.Since(start) > 5*time.Second {
			t.Fatal("the job ran on")
		}
		for _, u := range b.agq.updates("slow")[1:] {
			if s := decode(t, u)["status"]; s != nil {
				t.Fatalf("a cancelled job was reported %v", s)
			}
		}
	})
}

func TestWorkerDrains(t *testing.T) {
	t.Parallel()

	t.Run("OnServerRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(f *fakeAgq, _ *Config) {
			f.heartbeatReply = func(string) string { return "+OK drain=true" }
		})
		b.agq.waitFor("a drain heartbeat", 5*time.Second, func() bool { return len(b.agq.calls("WORKER.HEARTBEAT")) > 0 })
		// Pops already blocked end within their timeout; no new ones.
		time.Sleep(1500 * time.Millisecond)
		pops := len(b.agq.calls("BRPOP"))
		b.agq.push("ready", job("late", `{"tasks":[{"tool":"true"}]}`, ""))
		hbs := len(b.agq.calls("WORKER.HEARTBEAT"))
		b.agq.waitFor("more heartbeats", 5*time.Second, func() bool { return len(b.agq.calls("WORKER.HEARTBEAT")) >= hbs+3 })
		if got := len(b.agq.calls("BRPOP")); got != pops || len(b.agq.updates("late")) != 0 {
			t.Fatalf("a draining worker popped: %d pops after %d, updates %q", got, pops, b.agq.updates("late"))
		}
		if err := b.stop(t, 5*time.Second); err != nil || len(b.agq.calls("WORKER.UNREGISTER")) != 1 {
			t.Fatalf("stop: %v", err)
		}
	})

	t.Run("WaitsForRunningJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.agq.push("ready", job("short", `{"tasks":[{"tool":"sleep","args":["1"]}]}`, ""))
		b.waitStatus(t, "short", "running")
		if err := b.stop(t, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		ups := b.agq.updates("short")
		if last := decode(t, ups[len(ups)-1]); last["status"] != "completed" {
			t.Fatalf("last update %v", last)
		}
		if len(b.agq.calls("WORKER.UNREGISTER")) != 1 {
			t.Fatal("no unregister")
		}
	})

	t.Run("CancelsAfterTheShutdownTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(_ *fakeAgq, c *Config) { c.ShutdownTimeout = 300 * time.Millisecond })
		b.agq.push("ready", job("long", `{"tasks":[{"tool":"sleep","args":["30"]}]}`, ""))
		b.waitStatus(t, "long", "running")
		start := time.Now()
		if err := b.stop(t, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Fatalf("shutdown took %v", d)
		}
		ups := b.agq.updates("long")
		last := decode(t, ups[len(ups)-1])
		if last["status"] != "failed" || last["error"] != "agw shutting down" || last["retryable"] != true {
			t.Fatalf("last update %v", last)
		}
		unreg := b.agq.calls("WORKER.UNREGISTER")
		if len(unreg) != 1 {
			t.Fatal("no unregister")
		}
	})
}

func TestWorkerRecovers(t *testing.T) {
	t.Parallel()

	t.Run("RegistersAgainWhenUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.agq.waitFor("a heartbeat", 5*time.Second, func() bool { return len(b.agq.calls("WORKER.HEARTBEAT")) > 0 })
		b.agq.forget()
		b.agq.waitFor("a second registration", 5*time.Second, func() bool { return len(b.agq.calls("WORKER.REGISTER")) == 2 })
		b.agq.push("ready", job("after", `{"tasks":[{"tool":"true"}]}`, ""))
		b.waitStatus(t, "after", "completed")
	})

	t.Run("ReconnectsAndRegistersAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.agq.waitFor("pops", 5*time.Second, func() bool { return len(b.agq.calls("BRPOP")) >= 2 })
		b.agq.dropConnections()
		b.agq.waitFor("a second registration", 5*time.Second, func() bool { return len(b.agq.calls("WORKER.REGISTER")) >= 2 })
		b.agq.push("ready", job("after", `{"tasks":[{"tool":"true"}]}`, ""))
		b.waitStatus(t, "after", "completed")
	})

	t.Run("RetriesAReportAcrossABlip", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(f *fakeAgq, _ *Config) {
			// The first two completed reports get no answer: the
			// connection closes under them.
			f.updateDrop = func(_, body string, _ int) bool {
				return strings.Contains(body, `"status":"completed"`) && countCompleted(f.updates("j")) < 3
			}
		})
		b.agq.push("ready", job("j", `{"tasks":[{"tool":"cat"}]}`, "hello\n"))
		b.agq.waitFor("the completed report to be sent three times", 10*time.Second, func() bool {
			return countCompleted(b.agq.updates("j")) >= 3
		})
		var completed []string
		for _, u := range b.agq.updates("j") {
			if strings.Contains(u, `"completed"`) {
				completed = append(completed, u)
			}
		}
		for _, u := range completed[1:] {
			if u != completed[0] {
				t.Fatalf("a retried report changed:\n%s\n%s", completed[0], u)
			}
		}
		if decode(t, completed[0])["output"] != "hello\n" {
			t.Fatalf("%s", completed[0])
		}
	})

	t.Run("GivesUpOnARefusedReport", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(f *fakeAgq, _ *Config) {
			f.updateReply = func(_, body string, _ int) string {
				if strings.Contains(body, `"completed"`) {
					return "-ERR job j is owned by worker-other"
				}
				return "+OK"
			}
		})
		b.agq.push("ready", job("j", `{"tasks":[{"tool":"true"}]}`, ""))
		b.waitStatus(t, "j", "completed")
		b.agq.push("ready", job("next", `{"tasks":[{"tool":"true"}]}`, ""))
		b.waitStatus(t, "next", "running")
		if n := countCompleted(b.agq.updates("j")); n != 1 {
			t.Fatalf("a refused report was sent %d times", n)
		}
	})
}

func countCompleted(updates []string) int {
	n := 0
	for _, u := range updates {
		if strings.Contains(u, `"status":"completed"`) {
			n++
		}
	}
	return n
}

func TestWorkerStartup(t *testing.T) {
	t.Parallel()

	t.Run("WrongKeyIsFatal", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(f *fakeAgq, _ *Config) {
			f.authReply = func(string, string) string {
				return "-WRONGPASS invalid username-password pair or user is disabled."
			}
		})
		select {
		case err := <-b.done:
			b.done <- err
			if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
				t.Fatalf("Run = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a worker with a wrong key kept trying")
		}
	})

	t.Run("WaitsForTheServer", func(t *testing.T) {
		t.Parallel()
		var refusals atomic.Int32
		b := setup(t, func(f *fakeAgq, _ *Config) {
			f.registerReply = func(id string) string {
				if refusals.Add(1) <= 2 {
					return "-ERR Worker ID already registered"
				}
				return "+OK worker_id=" + id + " heartbeat_interval=0.2"
			}
		})
		b.agq.waitFor("registration", 5*time.Second, func() bool { return len(b.agq.calls("BRPOP")) > 0 })
		if n := len(b.agq.calls("WORKER.REGISTER")); n != 3 {
			t.Fatalf("%d registrations, want 3", n)
		}
	})
}
