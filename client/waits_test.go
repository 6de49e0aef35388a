package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agq/agq/client"
	"github.com/agq/agq/internal/agqtest"
)

func TestWaits(t *testing.T) {
	t.Parallel()

	t.Run("WaitSignalEndsWithTheSignalSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var runs atomic.Int64
		b.startWorker(t, "approver", map[string]client.HandlerFunc{"refund": func(ctx context.Context, j *client.Job) (any, error) {
			runs.Add(1)
			approval, err := client.WaitSignal[struct{ By string }](ctx, j, "approval", "approve", time.Hour)
			if err != nil {
				return nil, err
			}
			return "approved by " + approval.By, nil
		}}, nil)
		id := b.submit(t, 1, client.JobSpec{Type: "refund"})[0]
		awaitStatus(t, b, id, "awaiting")
		if err := b.producer.Signal(context.Background(), id, "approve", map[string]string{"by": "ann"}, "approval-1"); err != nil {
			t.Fatal(err)
		}
		j := b.waitAll(t, []string{id})[0]
		var result struct {
			Output string `json:"output"`
		}
		json.Unmarshal(j.Result, &result)
		if j.Status != "completed" || result.Output != "approved by ann" || runs.Load() != 2 {
			t.Fatalf("job %s (%s) after %d runs", j.Status, j.Result, runs.Load())
		}
	})

	t.Run("WaitSignalTimesOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWorker(t, "impatient", map[string]client.HandlerFunc{"ask": func(ctx context.Context, j *client.Job) (any, error) {
			_, err := client.WaitSignal[string](ctx, j, "answer", "answer", time.Second)
			if errors.Is(err, client.ErrWaitTimedOut) {
				return "no answer", nil
			}
			return nil, err
		}}, nil)
		j := b.waitAll(t, b.submit(t, 1, client.JobSpec{Type: "ask"}))[0]
		if j.Status != "completed" {
			t.Fatalf("job %s: %s", j.Status, j.Result)
		}
	})

	t.Run("WaitJobsAwaitsTheChildrenASpawnStepSubmitted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var spawned atomic.Int64
		b.startWorker(t, "spawner", map[string]client.HandlerFunc{
			"child": func(ctx context.Context, j *client.Job) (any, error) {
				n, err := client.Decode[int](j)
				return n * n, err
			},
			"parent": func(ctx context.Context, j *client.Job) (any, error) {
				ids, err := client.Step(ctx, j, "spawn", nil, func(ctx context.Context) ([]string, error) {
					spawned.Add(1)
					var ids []string
					for i := range 3 {
						doc := fmt.Sprintf(`{"job_id":"%s-%d","type":"child","payload":%d}`, j.ID(), i, i)
						id, err := b.admin.Do(ctx, "JOB.SUBMIT", doc).Text()
						if err != nil {
							return nil, err
						}
						ids = append(ids, id)
					}
					return ids, nil
				})
				if err != nil {
					return nil, err
				}
				done, err := client.WaitJobs(ctx, j, "children", ids, 0)
				if err != nil {
					return nil, err
				}
				completed := 0
				for _, c := range done.Jobs {
					if c.Status == "completed" {
						completed++
					}
				}
				return completed, nil
			},
		}, nil)
		id := b.submit(t, 1, client.JobSpec{Type: "parent"})[0]
		j := b.waitAll(t, []string{id})[0]
		var result struct {
			Output int `json:"output"`
		}
		json.Unmarshal(j.Result, &result)
		if j.Status != "completed" || result.Output != 3 || spawned.Load() != 1 {
			t.Fatalf("job %s (%s), spawned %d times", j.Status, j.Result, spawned.Load())
		}
	})
}

// awaitStatus waits for the job to reach status.
func awaitStatus(t *testing.T, b *testBundle, id, status string) {
	t.Helper()
	agqtest.Eventually(t, 10*time.Second, func() error {
		j, err := b.producer.Get(context.Background(), id)
		if err != nil {
			return err
		}
		if j.Status != status {
			return fmt.Errorf("job %s is %s, not %s", id, j.Status, status)
		}
		return nil
	})
}
