package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

func TestWorkerRunsAJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, heartbeatEvery(time.Second))

	id := b.submit(t, `{"job_id":"j1","plan":{"tasks":[{"tool":"sort"},{"tool":"uniq","args":["-c"]}]},"inputs":{"stdin":"b\na\nb\n"}}`)
	j := b.wait(t, id, 10*time.Second)
	if j.Status != "completed" || j.Attempt != 1 || j.WorkerID == nil || *j.WorkerID != testWorkerID {
		t.Fatalf("job %+v", j)
	}
	res := j.result(t)
	if res.Status != "completed" || res.Output != "      1 a\n      2 b\n" || res.OutputTruncated {
		t.Fatalf("result %s", j.Result)
	}
	if len(res.TaskResults) != 2 || res.TaskResults[0]["tool"] != "sort" || res.TaskResults[1]["tool"] != "uniq" {
		t.Fatalf("task_results %v", res.TaskResults)
	}
	for _, tr := range res.TaskResults {
		for _, k := range []string{"tool", "exit_code", "stderr", "duration_ms"} {
			if _, ok := tr[k]; !ok {
				t.Fatalf("task result %v has no %s", tr, k)
			}
		}
	}
	if _, err := time.Parse(time.RFC3339, res.CompletedAt); err != nil {
		t.Fatal(err)
	}

	// The registration as agq keeps it, and the stats of the heartbeats.
	w := b.waitState(t, "ACTIVE")
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
	if err := json.Unmarshal(w.Metadata, &reg); err != nil {
		t.Fatal(err)
	}
	if reg.WorkerID != testWorkerID || reg.Hostname == "" || reg.Platform == "" || reg.AgwVersion != "9.9.9" ||
		strings.Join(reg.Capabilities.Tools, ",") != "cat,sleep,sort,true,uniq" || reg.Capabilities.AgenticUnits == nil ||
		reg.Capabilities.Types == nil || reg.MaxConcurrentJobs != 2 || reg.Tags == nil {
		t.Fatalf("registration %s", w.Metadata)
	}
	if w.Principal != testWorkerID || w.MaxConcurrentJobs != 2 || !slices.Equal(w.Capabilities, reg.Capabilities.Tools) {
		t.Fatalf("worker %+v", w)
	}
	agqtest.Eventually(t, 5*time.Second, func() error {
		w = b.workerState(t)
		var stats map[string]any
		if err := json.Unmarshal(w.Stats, &stats); err != nil {
			return err
		}
		for _, k := range []string{"active_jobs", "completed_jobs_total", "failed_jobs_total", "uptime_seconds", "cpu_usage_percent", "memory_mb", "disk_available_gb"} {
			if _, ok := stats[k]; !ok {
				return fmt.Errorf("no %s in the stats %s", k, w.Stats)
			}
		}
		if stats["completed_jobs_total"] != 1.0 {
			return fmt.Errorf("stats %s: want completed_jobs_total 1", w.Stats)
		}
		return nil
	})

	if err := b.stop(t, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if w := b.workerState(t); w.State != "UNREGISTERED" {
		t.Fatalf("after Run: %s", w.State)
	}
}

func TestWorkerReportsProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// cat ends at once (its input is empty), then sleep holds the job
	// while the progress is read.
	id := b.submit(t, `{"plan":{"tasks":[{"tool":"cat"},{"tool":"sleep","args":["2"]}]}}`)
	var progress struct {
		CurrentTask     int `json:"current_task"`
		ProgressPercent int `json:"progress_percent"`
	}
	agqtest.Eventually(t, 10*time.Second, func() error {
		j := b.get(t, id)
		if j.Status != "running" || string(j.Progress) == "null" || len(j.Progress) == 0 {
			return fmt.Errorf("job %s, progress %s", j.Status, j.Progress)
		}
		return json.Unmarshal(j.Progress, &progress)
	})
	if progress.CurrentTask != 1 || progress.ProgressPercent != 50 {
		t.Fatalf("progress %+v", progress)
	}
	if j := b.wait(t, id, 10*time.Second); j.Status != "completed" {
		t.Fatalf("job %+v", j)
	}
}

func TestWorkerTakesQueuesInPriorityOrder(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	cfg := testConfig(t, a.Addr, a.CreateKey(t, "worker", testWorkerID))
	cfg.Concurrency = 1
	admin := a.Admin(t)
	ctx := context.Background()
	for _, job := range []string{
		`{"job_id":"later","queue":"ready","plan":{"tasks":[{"tool":"true"}]}}`,
		`{"job_id":"first","queue":"urgent","plan":{"tasks":[{"tool":"true"}]}}`,
	} {
		if err := admin.Do(ctx, "JOB.SUBMIT", job).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := run(t, a, cfg)
	first, later := b.wait(t, "first", 10*time.Second), b.wait(t, "later", 10*time.Second)
	if first.Status != "completed" || later.Status != "completed" || !first.StartedAt.Before(*later.StartedAt) {
		t.Fatalf("urgent job started %v, ready job %v", first.StartedAt, later.StartedAt)
	}
}

// TestWorkerAuthenticatesAsItsWorkerID runs a worker whose key belongs to a
// principal with several workers: every connection must act as this
// worker, which agq knows from the user name go-redis sends with the key.
func TestWorkerAuthenticatesAsItsWorkerID(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	key := a.CreateKey(t, "worker", "build-farm")
	b := run(t, a, testConfig(t, a.Addr, key))
	b.waitState(t, "ACTIVE")

	// Another worker of the principal registers after it: connections that
	// named no worker would now act as this one.
	other := a.Client(t, redis.Options{Username: "decoy", Password: key})
	if err := other.Do(context.Background(), "WORKER.REGISTER",
		`{"worker_id":"decoy","hostname":"h","agw_version":"1","capabilities":{"tools":["sort"]}}`).Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		b.submit(t, `{"job_id":"`+id+`","plan":{"tasks":[{"tool":"sort"}]},"inputs":{"stdin":"x\n"}}`)
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		j := b.wait(t, id, 10*time.Second)
		if j.Status != "completed" || *j.WorkerID != testWorkerID {
			t.Fatalf("job %+v", j)
		}
	}
	if w := b.workerState(t); w.Principal != "build-farm" {
		t.Fatalf("principal %q", w.Principal)
	}
}

func TestWorkerReportsFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// "requires" brings a plan agw refuses to it; derived from the plan it
	// would name sh and never reach a worker that does not offer sh.
	b.submit(t, `{"job_id":"refused","requires":["sort"],"plan":{"tasks":[{"tool":"sh","args":["-c","id"]}]}}`)
	b.submit(t, `{"job_id":"exit","max_attempts":2,"retry_backoff_seconds":0.1,"plan":{"tasks":[{"tool":"sort","args":["--no-such-option"]}]}}`)
	b.submit(t, `{"job_id":"noplan"}`)

	for _, tt := range []struct {
		id        string
		attempts  int
		retryable bool
		error     string
	}{
		{"refused", 1, false, `task 1 (sh): refused: tool "sh" is not offered by this worker`},
		{"exit", 2, true, "task 1 (sort): exited with status 2: sort: unrecognized option"},
		{"noplan", 1, false, "refused: the job has no plan"},
	} {
		j := b.wait(t, tt.id, 15*time.Second)
		res := j.result(t)
		if j.Status != "failed" || j.Attempt != tt.attempts || len(j.Errors) != tt.attempts {
			t.Errorf("%s: %+v", tt.id, j)
			continue
		}
		if res.Status != "failed" || res.Retryable == nil || *res.Retryable != tt.retryable || !strings.HasPrefix(res.Error, tt.error) ||
			!strings.HasPrefix(j.Errors[0].Error, tt.error) || j.Errors[0].WorkerID != testWorkerID {
			t.Errorf("%s: result %s, errors %+v", tt.id, j.Result, j.Errors)
		}
		if res.TaskResults == nil {
			t.Errorf("%s: task_results %s, want a list", tt.id, j.Result)
		}
	}
}

func TestWorkerCancellation(t *testing.T) {
	t.Parallel()

	t.Run("ThroughHeartbeat", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, heartbeatEvery(time.Second))
		id := b.submit(t, `{"plan":{"tasks":[{"tool":"sleep","args":["30"]}]}}`)
		b.waitStarted(t, id)
		if err := b.admin.Do(context.Background(), "JOB.CANCEL", id).Err(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// The next heartbeat (within a second) names the job; agw kills
		// it and says so, which ends it.
		j := b.wait(t, id, 5*time.Second)
		if j.Status != "cancelled" {
			t.Fatalf("job %+v", j)
		}
		b.waitIdle(t, time.Second)
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("the cancellation took %v", d)
		}
		if s := b.worker.client.Stats(); s.FailedJobsTotal != 0 || s.CompletedJobsTotal != 0 {
			t.Fatal("a cancelled job was counted as failed or completed")
		}
	})

	t.Run("ThroughUpdateReply", func(t *testing.T) {
		t.Parallel()
		// No heartbeat comes during the test, and job.cancel is not
		// heard: the progress update sent when the first sleep ends is
		// answered -CANCELLED, and the second sleep must be killed.
		b := setup(t, func(c *Config) { c.IgnoreCancelChannel = true }, heartbeatEvery(time.Minute))
		id := b.submit(t, `{"plan":{"tasks":[{"tool":"sleep","args":["1.5"]},{"tool":"sleep","args":["30"]}]}}`)
		b.waitStarted(t, id)
		if err := b.admin.Do(context.Background(), "JOB.CANCEL", id).Err(); err != nil {
			t.Fatal(err)
		}
		j := b.wait(t, id, 10*time.Second)
		if j.Status != "cancelled" {
			t.Fatalf("job %+v", j)
		}
		b.waitIdle(t, 3*time.Second)
		if n := b.logs.count("agq says the job was cancelled"); n != 1 {
			t.Fatalf("the cancellation was seen %d times in progress replies", n)
		}
	})
}

func TestWorkerDrains(t *testing.T) {
	t.Parallel()

	t.Run("OnServerRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, heartbeatEvery(time.Second))
		b.waitState(t, "ACTIVE")
		if err := b.admin.Do(context.Background(), "WORKER.DRAIN", testWorkerID).Err(); err != nil {
			t.Fatal(err)
		}
		agqtest.Eventually(t, 5*time.Second, func() error {
			if !b.worker.client.Draining() {
				return errors.New("still popping")
			}
			return nil
		})
		id := b.submit(t, `{"plan":{"tasks":[{"tool":"true"}]}}`)
		// The worker stays up and heartbeating, and takes nothing.
		seen := b.workerState(t).LastHeartbeatAt
		agqtest.Eventually(t, 5*time.Second, func() error {
			if !b.workerState(t).LastHeartbeatAt.After(seen.Add(time.Second)) {
				return errors.New("no heartbeat")
			}
			return nil
		})
		if j := b.get(t, id); j.Status != "queued" {
			t.Fatalf("a draining worker took a job: %+v", j)
		}
		if err := b.stop(t, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if w := b.workerState(t); w.State != "UNREGISTERED" {
			t.Fatalf("after Run: %s", w.State)
		}
	})

	t.Run("WaitsForRunningJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		id := b.submit(t, `{"plan":{"tasks":[{"tool":"sleep","args":["1"]}]}}`)
		b.waitStarted(t, id)
		if err := b.stop(t, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if j := b.get(t, id); j.Status != "completed" {
			t.Fatalf("job %+v", j)
		}
		if w := b.workerState(t); w.State != "UNREGISTERED" {
			t.Fatalf("after Run: %s", w.State)
		}
	})

	t.Run("CancelsAfterTheShutdownTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *Config) { c.ShutdownTimeout = 300 * time.Millisecond })
		id := b.submit(t, `{"plan":{"tasks":[{"tool":"sleep","args":["30"]}]}}`)
		b.waitStarted(t, id)
		start := time.Now()
		if err := b.stop(t, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Fatalf("shutdown took %v", d)
		}
		j := b.get(t, id)
		if (j.Status != "retrying" && j.Status != "queued") || len(j.Errors) != 1 || j.Errors[0].Error != "agw shutting down" {
			t.Fatalf("job %+v: want it failed retryable by the shutdown", j)
		}
		if w := b.workerState(t); w.State != "UNREGISTERED" {
			t.Fatalf("after Run: %s", w.State)
		}
	})
}
