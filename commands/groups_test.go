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

// Step begins sent at once by many workers share commits; one refused in
// their midst (another worker's job) is that client's reply alone, and a
// stale delivery's is too.
func TestStepBeginsAreGrouped(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	const n = 24
	workers := make([]*testWorker, n)
	for i := range workers {
		workers[i] = registerWorker(t, a, fmt.Sprintf("sb-%d", i), "t")
	}
	intruder := registerWorker(t, a, "sb-intruder", "t")
	grouped := false
	for round := 0; round < 10 && !grouped; round++ {
		held := make([]delivered, n)
		for i, w := range workers {
			submit(t, admin, map[string]any{"queue": "sbgrp", "type": "t"})
			_, d, ok := w.pop(t, "1", "sbgrp")
			if !ok {
				t.Fatalf("worker %d got no job", i)
			}
			held[i] = d
		}
		sumBefore, countBefore := groupSizes(t, a, "step_begin")
		var wg sync.WaitGroup
		start := make(chan struct{})
		replies := make([]string, n)
		errs := make([]error, n+2)
		for i, w := range workers {
			wg.Go(func() {
				<-start
				replies[i], errs[i] = w.c.Do(ctx, "STEP.BEGIN", held[i].JobID, "charge", `{"input":{"round":1}}`,
					"DELIVERY", held[i].Delivery).Text()
			})
		}
		wg.Go(func() {
			<-start
			errs[n] = intruder.c.Do(ctx, "STEP.BEGIN", held[0].JobID, "charge").Err()
		})
		wg.Go(func() {
			<-start
			errs[n+1] = workers[1].c.Do(ctx, "STEP.BEGIN", held[1].JobID, "ship", "DELIVERY", "00000000-0000-4000-8000-000000000000").Err()
		})
		close(start)
		wg.Wait()
		for i := range workers {
			if errs[i] != nil || replies[i] != `{"execute":true,"attempt":1}` {
				t.Fatalf("worker %d's begin: %q, %v", i, replies[i], errs[i])
			}
		}
		if err := errs[n]; err == nil || err.Error() != "ERR job "+held[0].JobID+" is owned by sb-0" {
			t.Fatalf("a begin on another worker's job: %v", err)
		}
		if err := errs[n+1]; err == nil || !strings.Contains(err.Error(), "was delivered again") {
			t.Fatalf("a begin by a stale delivery: %v", err)
		}
		sum, count := groupSizes(t, a, "step_begin")
		grouped = sum-sumBefore > count-countBefore
		for i, w := range workers {
			if err := w.c.Do(ctx, "JOB.UPDATE", held[i].JobID, `{"status":"completed"}`).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !grouped {
		t.Fatal("24 step begins sent at once never shared a group in 10 rounds")
	}
}
