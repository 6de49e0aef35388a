package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
)

func TestJobWaitReturnsTheFinishedJob(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "w", "t")
	id := submit(t, admin, map[string]any{"type": "t"})

	if got, err := admin.Do(ctx, "JOB.WAIT", id, "0.2").Result(); err == nil {
		t.Fatalf("JOB.WAIT on a queued job = %v, want nil after the timeout", got)
	}
	waited := make(chan string, 1)
	go func() {
		raw, err := a.Admin(t).Do(ctx, "JOB.WAIT", id, "10").Text()
		if err != nil {
			raw = err.Error()
		}
		waited <- raw
	}()
	if _, d, ok := w.pop(t, "1", "ready"); !ok || d.JobID != id {
		t.Fatalf("pop: %+v", d)
	}
	if err := w.update(ctx, id, map[string]any{"status": "completed", "output": "42\n"}); err != nil {
		t.Fatal(err)
	}
	select {
	case raw := <-waited:
		var v struct {
			Status string `json:"status"`
			Result struct {
				Output string `json:"output"`
			} `json:"result"`
		}
		if err := json.Unmarshal([]byte(raw), &v); err != nil || v.Status != "completed" || v.Result.Output != "42\n" {
			t.Fatalf("JOB.WAIT = %s", raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("JOB.WAIT did not return after the job completed")
	}
	if err := admin.Do(ctx, "JOB.WAIT", "no-such-job", "1").Err(); err == nil || err.Error() != "ERR no such job no-such-job" {
		t.Fatalf("JOB.WAIT unknown: %v", err)
	}
}

func TestJobListPages(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	for i := 0; i < 25; i++ {
		submit(t, admin, map[string]any{"job_id": fmt.Sprintf("list-%02d", i), "queue": "listed", "type": "t"})
	}
	submit(t, admin, map[string]any{"job_id": "elsewhere", "queue": "other", "type": "t"})
	seen := map[string]bool{}
	cursor := "0"
	pages := 0
	for {
		res, err := admin.Do(ctx, "JOB.LIST", "QUEUE", "listed", "STATUS", "queued", "LIMIT", "10", "CURSOR", cursor).Slice()
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, item := range res[1].([]any) {
			var v jobView
			json.Unmarshal([]byte(item.(string)), &v)
			if seen[v.ID] || v.ID == "elsewhere" {
				t.Fatalf("job %s listed twice or from the wrong queue", v.ID)
			}
			seen[v.ID] = true
		}
		cursor = res[0].(string)
		if cursor == "0" {
			break
		}
	}
	if len(seen) != 25 || pages != 3 {
		t.Fatalf("listed %d jobs in %d pages", len(seen), pages)
	}
	if err := admin.Do(ctx, "JOB.LIST", "STATUS", "bogus").Err(); err == nil {
		t.Fatal("unknown status accepted")
	}
}

func TestQueueControl(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "w", "t")
	first := submit(t, admin, map[string]any{"queue": "q", "type": "t", "job_id": "first"})
	submit(t, admin, map[string]any{"queue": "q", "type": "t", "job_id": "second"})
	submit(t, admin, map[string]any{"queue": "q", "type": "t", "job_id": "later", "delay_seconds": 1})

	t.Run("LRangeEndsWithTheNextToPop", func(t *testing.T) {
		items, err := admin.Do(ctx, "LRANGE", "queue:q", "0", "-1").StringSlice()
		if err != nil || len(items) != 2 {
			t.Fatalf("LRANGE = %v, %v", items, err)
		}
		var last delivered
		json.Unmarshal([]byte(items[1]), &last)
		if last.JobID != first {
			t.Fatalf("last element is %s, want %s", last.JobID, first)
		}
	})
	t.Run("StatsCountByStatus", func(t *testing.T) {
		// go-redis speaks RESP3 here, so the reply is a real map.
		res, err := admin.Do(ctx, "QUEUE.STATS", "q").Result()
		if err != nil {
			t.Fatal(err)
		}
		stats := map[string]any{}
		for k, v := range res.(map[any]any) {
			stats[k.(string)] = v
		}
		if stats["queued"] != int64(2) || stats["scheduled"] != int64(1) || stats["paused"] != int64(0) {
			t.Fatalf("QUEUE.STATS q = %v", stats)
		}
		names, err := admin.Do(ctx, "QUEUE.LIST").StringSlice()
		if err != nil || len(names) != 1 || names[0] != "q" {
			t.Fatalf("QUEUE.LIST = %v, %v", names, err)
		}
	})
	t.Run("PausedQueueGivesNothingUntilResumed", func(t *testing.T) {
		if err := admin.Do(ctx, "QUEUE.PAUSE", "q").Err(); err != nil {
			t.Fatal(err)
		}
		if _, d, ok := w.pop(t, "0.2", "q"); ok {
			t.Fatalf("paused queue gave %s", d.JobID)
		}
		popped := make(chan string, 1)
		go func() {
			_, d, _ := w.pop(t, "5", "q")
			popped <- d.JobID
		}()
		time.Sleep(100 * time.Millisecond) // let the pop block on the paused queue
		if err := admin.Do(ctx, "QUEUE.RESUME", "q").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-popped:
			if id != first {
				t.Fatalf("after resume got %q, want %s", id, first)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("resume did not wake the blocked pop")
		}
	})
	t.Run("ScheduledJobWakesAWaiterWhenDue", func(t *testing.T) {
		if _, d, ok := w.pop(t, "1", "q"); !ok || d.JobID != "second" {
			t.Fatalf("pop: %+v", d)
		}
		_, d, ok := w.pop(t, "5", "q")
		if !ok || d.JobID != "later" {
			t.Fatalf("scheduled job: %+v ok=%v", d, ok)
		}
	})
	t.Run("RPopDoesNotBlock", func(t *testing.T) {
		if got, err := w.c.Do(ctx, "RPOP", "queue:q").Result(); err == nil {
			t.Fatalf("RPOP on an empty queue = %v", got)
		}
		submit(t, admin, map[string]any{"queue": "q", "type": "t", "job_id": "r1"})
		raw, err := w.c.Do(ctx, "RPOP", "queue:q").Text()
		var d delivered
		if err != nil || json.Unmarshal([]byte(raw), &d) != nil || d.JobID != "r1" {
			t.Fatalf("RPOP = %s, %v", raw, err)
		}
	})
}
