package commands_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agq/agq/internal/agqtest"
)

// groupSizes reads agq_group_size's sum and count for kind from /metrics.
func groupSizes(t *testing.T, a *agqtest.Agq, kind string) (sum, count float64) {
	t.Helper()
	return metric(t, a, `agq_group_size_sum{kind="`+kind+`"}`), metric(t, a, `agq_group_size_count{kind="`+kind+`"}`)
}

// Final reports sent at once by many workers share commits; one refused in
// their midst (another worker's job) is that client's reply alone.
func TestFinalReportsAreGrouped(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	const n = 24
	workers := make([]*testWorker, n)
	for i := range workers {
		workers[i] = registerWorker(t, a, fmt.Sprintf("g-%d", i), "t")
	}
	intruder := registerWorker(t, a, "g-intruder", "t")
	grouped := false
	for round := 0; round < 10 && !grouped; round++ {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = submit(t, admin, map[string]any{"queue": "grp", "type": "t"})
		}
		held := make([]string, n)
		for i, w := range workers {
			_, d, ok := w.pop(t, "1", "grp")
			if !ok {
				t.Fatalf("worker %d got no job", i)
			}
			held[i] = d.JobID
		}
		sumBefore, countBefore := groupSizes(t, a, "final_report")
		var wg sync.WaitGroup
		start := make(chan struct{})
		replies := make([]error, n+1)
		for i, w := range workers {
			wg.Go(func() {
				<-start
				replies[i] = w.c.Do(ctx, "JOB.UPDATE", held[i], `{"status":"completed"}`).Err()
			})
		}
		wg.Go(func() {
			<-start
			replies[n] = intruder.c.Do(ctx, "JOB.UPDATE", held[0], `{"status":"failed","error":"not mine"}`).Err()
		})
		close(start)
		wg.Wait()
		for i := range workers {
			if replies[i] != nil {
				t.Fatalf("worker %d's own report: %v", i, replies[i])
			}
		}
		if err := replies[n]; err == nil || !strings.HasPrefix(err.Error(), "ERR job "+held[0]+" is ") {
			t.Fatalf("a report on another worker's job: %v", err)
		}
		for i, id := range held {
			if raw, _ := admin.Do(ctx, "JOB.GET", id).Text(); !strings.Contains(raw, `"status":"completed"`) {
				t.Fatalf("job %d after its report: %s", i, raw)
			}
		}
		sum, count := groupSizes(t, a, "final_report")
		// More reports than groups: some shared a commit.
		grouped = sum-sumBefore > count-countBefore
	}
	if !grouped {
		t.Fatal("24 final reports sent at once never shared a group in 10 rounds")
	}
}
