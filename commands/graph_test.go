package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// A graph of 1,000 jobs in one JOB.SUBMIT — a fan-out of 999, then one job
// after all of them — worked by eight plain go-redis workers on two nodes:
// the last job runs once, after every other ended, with their results.
func TestGraphOfAThousandJobsRunsItsLastJobOnceAfterAllOthers(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	b := agqtest.Start(t, func(c *config.Config) { c.DatabaseURL = a.DatabaseURL })
	ctx := context.Background()
	const fan = 999
	jobs := make([]map[string]any, 0, fan+1)
	after := make([]string, fan)
	for i := range fan {
		after[i] = fmt.Sprintf("part-%03d", i)
		jobs = append(jobs, map[string]any{"job_id": after[i], "queue": "graph", "type": "part", "payload": map[string]int{"n": i}})
	}
	jobs = append(jobs, map[string]any{"job_id": "sum", "queue": "graph", "type": "part", "after": after})
	doc, _ := json.Marshal(jobs)
	ids, err := a.Admin(t).Do(ctx, "JOB.SUBMIT", string(doc)).StringSlice()
	if err != nil || len(ids) != fan+1 {
		t.Fatalf("JOB.SUBMIT of the graph: %d ids, %v", len(ids), err)
	}

	var completed, sumRuns atomic.Int64
	var sumSawCompleted int64
	var sum parentsView
	var mu sync.Mutex
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		node := a
		if i%2 == 1 {
			node = b
		}
		w := registerWorker(t, node, fmt.Sprintf("graph-w%d", i), "part")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				res, err := w.c.Do(ctx, "BRPOP", "queue:graph", "0.5").StringSlice()
				if err == redis.Nil {
					continue
				}
				if err != nil {
					t.Errorf("BRPOP: %v", err)
					return
				}
				var d parentsView
				if err := json.Unmarshal([]byte(res[1]), &d); err != nil {
					t.Errorf("job json: %v", err)
					return
				}
				if d.JobID == "sum" {
					mu.Lock()
					sumRuns.Add(1)
					sumSawCompleted, sum = completed.Load(), d
					mu.Unlock()
				}
				result := map[string]any{"status": "completed", "delivery": d.Delivery, "output": "done " + d.JobID}
				if err := w.update(ctx, d.JobID, result); err != nil {
					t.Errorf("JOB.UPDATE %s: %v", d.JobID, err)
					return
				}
				if d.JobID != "sum" {
					completed.Add(1)
				}
			}
		}()
	}
	raw, err := a.Admin(t).Do(ctx, "JOB.WAIT", "sum", "60").Text()
	if err != nil || !strings.Contains(raw, `"status":"completed"`) {
		t.Fatalf("JOB.WAIT sum: %v %.200s", err, raw)
	}
	// Long enough for a second delivery, were there one.
	time.Sleep(time.Second)
	close(done)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if n := sumRuns.Load(); n != 1 {
		t.Fatalf("the last job ran %d times", n)
	}
	// A worker counts its parent once its report was answered, which may
	// come a moment after the release: the statuses in parents, read when
	// the last job was delivered, are what says it came after the others.
	if sumSawCompleted < fan-8 {
		t.Fatalf("the last job ran when %d of %d parents had been reported", sumSawCompleted, fan)
	}
	if len(sum.Parents) != fan || sum.ParentsTruncated {
		t.Fatalf("the last job got %d parents (truncated %v)", len(sum.Parents), sum.ParentsTruncated)
	}
	for _, id := range after {
		p := sum.Parents[id]
		if p.Status != "completed" || !strings.Contains(string(p.Result), "done "+id) {
			t.Fatalf("parent %s as the last job saw it: %+v", id, p)
		}
	}
}
