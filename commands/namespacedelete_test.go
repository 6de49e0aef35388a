package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// NAMESPACE.DELETE of a namespace holding 100,000 finished jobs (with
// their logs) while another namespace works: the deletion goes in bounded
// transactions, the other namespace's pops and reports keep flowing, the
// deleted namespace's keys stop working at once, and its name is free
// again once the last row is gone.
func TestNamespaceDeleteLeavesOthersWorking(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	goneKey := a.InNamespace(t, "gone", "producer", "gone-p")
	// A namespace unfinished jobs keep: refused.
	if err := goneKey.Do(ctx, "JOB.SUBMIT", `{"job_id":"left","queue":"q"}`).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "NAMESPACE.DELETE", "gone").Err(); err == nil || err.Error() != "ERR namespace gone has 1 unfinished jobs" {
		t.Fatalf("deleting a namespace with an unfinished job: %v", err)
	}
	if err := admin.Do(ctx, "NAMESPACE.DELETE", "default").Err(); err == nil || err.Error() != "ERR the default namespace cannot be deleted" {
		t.Fatalf("deleting default: %v", err)
	}
	if err := admin.Do(ctx, "NAMESPACE.DELETE", "nowhere").Err(); err == nil || err.Error() != "ERR no such namespace nowhere" {
		t.Fatalf("deleting an unknown namespace: %v", err)
	}
	if err := goneKey.Do(ctx, "JOB.CANCEL", "left").Err(); err != nil {
		t.Fatal(err)
	}

	// 100,000 finished jobs, stored straight into the table: submitting
	// and running them through agq would take most of the test's time.
	db, err := pgx.Connect(ctx, a.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(ctx, `
		INSERT INTO jobs (namespace, id, queue, status, max_attempts, timeout_seconds, finished_at, result)
		SELECT 'gone', 'done-' || i, 'q', 'completed', 3, 60, now(), '{"ok":true}'
		FROM generate_series(1, 100000) i;
		INSERT INTO job_logs (namespace, job_id, attempt, line)
		SELECT 'gone', 'done-' || i, 1, 'a line' FROM generate_series(1, 100000, 10) i`); err != nil {
		t.Fatal(err)
	}

	// Another namespace works throughout: a producer submits, a worker
	// pops and completes; each completion's time is kept.
	producer := a.InNamespace(t, "busy", "producer", "busy-p")
	workerKey, err := admin.Do(ctx, "KEY.CREATE", "worker", "busy-w", "NAMESPACE", "busy").Text()
	if err != nil {
		t.Fatal(err)
	}
	worker := a.Client(t, redis.Options{Username: "busy-w", Password: workerKey})
	if err := worker.Do(ctx, "WORKER.REGISTER", `{"worker_id":"busy-w","hostname":"h","agw_version":"1","capabilities":{"tools":[]}}`).Err(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	var completions []time.Time
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := producer.Do(ctx, "JOB.SUBMIT", fmt.Sprintf(`{"job_id":"b-%d","queue":"work"}`, i)).Err(); err != nil {
				t.Errorf("submitting in busy: %v", err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := worker.Do(ctx, "BRPOP", "queue:work", "0.2").StringSlice()
			if err == redis.Nil {
				continue
			}
			if err != nil {
				t.Errorf("popping in busy: %v", err)
				return
			}
			var d delivered
			_ = json.Unmarshal([]byte(res[1]), &d)
			if err := worker.Do(ctx, "JOB.UPDATE", d.JobID, `{"status":"completed"}`).Err(); err != nil {
				t.Errorf("completing %s: %v", d.JobID, err)
				return
			}
			mu.Lock()
			completions = append(completions, time.Now())
			mu.Unlock()
		}
	})
	time.Sleep(300 * time.Millisecond)

	began := time.Now()
	if err := admin.Do(ctx, "NAMESPACE.DELETE", "gone").Err(); err != nil {
		t.Fatal(err)
	}
	// Its keys stop working at once.
	if err := goneKey.Do(ctx, "JOB.GET", "done-1").Err(); err == nil {
		t.Error("a deleted namespace's key still reads")
	}
	if err := admin.Do(ctx, "NAMESPACE.CREATE", "gone").Err(); err == nil {
		t.Error("a namespace being deleted was created again")
	}
	agqtest.Eventually(t, 120*time.Second, func() error {
		names, err := admin.Do(ctx, "NAMESPACE.LIST").StringSlice()
		if err != nil {
			return err
		}
		if slices.Contains(names, "gone") {
			return fmt.Errorf("still listed: %v", names)
		}
		var n int
		if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs_all WHERE namespace = 'gone') + (SELECT count(*) FROM job_logs_all WHERE namespace = 'gone') + (SELECT count(*) FROM namespaces WHERE name = 'gone')`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%d rows left", n)
		}
		return nil
	})
	ended := time.Now()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var during []time.Time
	for _, c := range completions {
		if c.After(began) && c.Before(ended) {
			during = append(during, c)
		}
	}
	longest, last := time.Duration(0), began
	for _, c := range append(during, ended) {
		longest = max(longest, c.Sub(last))
		last = c
	}
	t.Logf("deleting 100,000 jobs took %v; busy completed %d jobs meanwhile, the longest pause %v",
		ended.Sub(began).Round(time.Millisecond), len(during), longest.Round(time.Millisecond))
	if len(during) == 0 {
		t.Fatal("the other namespace completed nothing while the deletion ran")
	}
	// A liveness bound, generous for a loaded machine: a deletion holding
	// a lock the other namespace needs would stop it for the whole run.
	if longest > 3*time.Second {
		t.Errorf("the other namespace stopped for %v while the deletion ran", longest)
	}
	if err := admin.Do(ctx, "NAMESPACE.CREATE", "gone").Err(); err != nil {
		t.Errorf("creating a deleted namespace's name again: %v", err)
	}
}
