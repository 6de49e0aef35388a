package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agq/agq/client"
)

func TestSteps(t *testing.T) {
	t.Parallel()

	t.Run("ResumeAfterALostDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var charged, packed, shipped atomic.Int64
		inThird := make(chan struct{}, 2)
		release := make(chan struct{})
		handler := func(ctx context.Context, j *client.Job) (any, error) {
			order, err := client.Decode[struct{ Amount int }](j)
			if err != nil {
				return nil, err
			}
			charge, err := client.Step(ctx, j, "charge", order, func(context.Context) (string, error) {
				charged.Add(1)
				return "ch_1", nil
			})
			if err != nil {
				return nil, err
			}
			box, err := client.Step(ctx, j, "pack", nil, func(context.Context) (int, error) {
				packed.Add(1)
				return 7, nil
			})
			if err != nil {
				return nil, err
			}
			label, err := client.Step(ctx, j, "ship", nil, func(ctx context.Context) (string, error) {
				if shipped.Add(1) == 1 {
					inThird <- struct{}{}
					<-release // the first delivery is lost meanwhile
				}
				return "1Z999", nil
			})
			if err != nil {
				return nil, err
			}
			return map[string]any{"charge": charge, "box": box, "label": label}, nil
		}
		first := b.startWorker(t, "shop-1", map[string]client.HandlerFunc{"order": handler}, nil)
		id := b.submit(t, 1, client.JobSpec{Type: "order", Payload: map[string]int{"amount": 10}})[0]
		<-inThird
		// The first worker stops popping, and agq takes its job back as
		// it would from a worker that died: the delivery is lost.
		first.stop()
		if err := b.admin.Do(context.Background(), "WORKER.UNREGISTER", "shop-1").Err(); err != nil {
			t.Fatal(err)
		}
		b.startWorker(t, "shop-2", map[string]client.HandlerFunc{"order": handler}, nil)
		j := b.waitAll(t, []string{id})[0]
		close(release)
		if err := first.wait(t); err != nil {
			t.Fatal(err)
		}
		var result struct {
			Output map[string]any `json:"output"`
		}
		json.Unmarshal(j.Result, &result)
		if j.Status != "completed" || result.Output["charge"] != "ch_1" || result.Output["box"] != 7.0 || result.Output["label"] != "1Z999" {
			t.Fatalf("job %s: %s", j.Status, j.Result)
		}
		if charged.Load() != 1 || packed.Load() != 1 || shipped.Load() != 2 {
			t.Fatalf("charged %d, packed %d, shipped %d times; want 1, 1, 2", charged.Load(), packed.Load(), shipped.Load())
		}
		if got, err := b.producer.Get(context.Background(), id); err != nil || got.Steps != 3 {
			t.Fatalf("JOB.GET: %+v, %v; want 3 steps", got, err)
		}
	})

	t.Run("AFailedStepRetriesTheJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var tries atomic.Int64
		b.startWorker(t, "flaky-1", map[string]client.HandlerFunc{"flaky": func(ctx context.Context, j *client.Job) (any, error) {
			return client.Step(ctx, j, "call", nil, func(context.Context) (int64, error) {
				if n := tries.Add(1); n < 2 {
					return 0, errors.New("carrier down")
				} else {
					return n, nil
				}
			})
		}}, nil)
		j := b.waitAll(t, b.submit(t, 1, client.JobSpec{Type: "flaky", RetryBackoff: 100 * time.Millisecond}))[0]
		if j.Status != "completed" || j.Attempt != 2 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "carrier down") {
			t.Fatalf("job %+v", j)
		}
	})

	t.Run("APermanentStepErrorFailsTheJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWorker(t, "perm-1", map[string]client.HandlerFunc{"perm": func(ctx context.Context, j *client.Job) (any, error) {
			return client.Step(ctx, j, "call", nil, func(context.Context) (int, error) {
				return 0, client.Permanent(errors.New("card declined"))
			})
		}}, nil)
		j := b.waitAll(t, b.submit(t, 1, client.JobSpec{Type: "perm"}))[0]
		if j.Status != "failed" || j.Attempt != 1 {
			t.Fatalf("job %+v", j)
		}
	})

	t.Run("SleepWakesTheJobLater", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var runs atomic.Int64
		b.startWorker(t, "sleepy-1", map[string]client.HandlerFunc{"sleepy": func(ctx context.Context, j *client.Job) (any, error) {
			runs.Add(1)
			if err := j.Sleep(ctx, "cool-off", time.Second); err != nil {
				return nil, err
			}
			return "awake", nil
		}}, nil)
		start := time.Now()
		j := b.waitAll(t, b.submit(t, 1, client.JobSpec{Type: "sleepy"}))[0]
		if j.Status != "completed" || runs.Load() != 2 || time.Since(start) < time.Second {
			t.Fatalf("job %+v after %d runs, %v", j, runs.Load(), time.Since(start))
		}
	})
}

// A completed job retried from its second step runs that step and the
// next again, the first answering its output.
func TestRetryFromAStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var runs [3]atomic.Int64
	b.startWorker(t, "rerun-1", map[string]client.HandlerFunc{"three": func(ctx context.Context, j *client.Job) (any, error) {
		var outs []int64
		for i, step := range []string{"fetch", "transform", "load"} {
			out, err := client.Step(ctx, j, step, nil, func(context.Context) (int64, error) { return runs[i].Add(1), nil })
			if err != nil {
				return nil, err
			}
			outs = append(outs, out)
		}
		return outs, nil
	}}, nil)
	id := b.submit(t, 1, client.JobSpec{Type: "three"})[0]
	b.waitAll(t, []string{id})
	if err := b.producer.RetryFrom(ctx, id, "nope"); err == nil || !strings.Contains(err.Error(), "step nope was not begun") {
		t.Fatalf("RetryFrom a step never begun: %v", err)
	}
	if err := b.producer.RetryFrom(ctx, id, "transform"); err != nil {
		t.Fatal(err)
	}
	j := b.waitAll(t, []string{id})[0]
	if j.Status != "completed" || runs[0].Load() != 1 || runs[1].Load() != 2 || runs[2].Load() != 2 {
		t.Fatalf("job %s; steps run %d, %d, %d times, want 1, 2, 2", j.Status, runs[0].Load(), runs[1].Load(), runs[2].Load())
	}
}

// A job's steps share their round trips: each completion rides on the next
// step's begin (STEP.COMPLETE … NEXT), the last on the final report's
// pipeline, and a handler that goes on slowly has it sent alone, soon.
func TestStepCompletionsShareRoundTrips(t *testing.T) {
	t.Parallel()

	t.Run("ThreeStepsTakeOneBeginAndThreeCompletions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWorker(t, "steps-1", map[string]client.HandlerFunc{"three": func(ctx context.Context, j *client.Job) (any, error) {
			sum := 0
			for i, id := range []string{"one", "two", "three"} {
				n, err := client.Step(ctx, j, id, nil, func(context.Context) (int, error) { return i + 1, nil })
				if err != nil {
					return nil, err
				}
				sum += n
			}
			return sum, nil
		}}, nil)
		before := stepCommands(t, b)
		ids := b.submit(t, 2, client.JobSpec{Type: "three"})
		for _, j := range b.waitAll(t, ids) {
			if j.Status != "completed" {
				t.Fatalf("job %+v", j)
			}
			steps := jobSteps(t, b, j.ID)
			if len(steps) != 3 {
				t.Fatalf("job %s has %d steps: %+v", j.ID, len(steps), steps)
			}
			for i, s := range steps {
				if s.Status != "completed" || string(s.Output) != strconv.Itoa(i+1) {
					t.Fatalf("job %s step %d: %+v", j.ID, i, s)
				}
			}
		}
		got := stepCommands(t, b).minus(before)
		// Each job's other two steps began with the completions before
		// them (… NEXT).
		if got.begins != 2 || got.completions != 6 {
			t.Fatalf("two three-step jobs sent %d STEP.BEGIN and %d STEP.COMPLETE; want 2 and 6", got.begins, got.completions)
		}
	})

	t.Run("AStepIsKeptSoonWhileItsHandlerGoesOn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		inBetween, release := make(chan struct{}), make(chan struct{})
		b.startWorker(t, "slow-1", map[string]client.HandlerFunc{"slow": func(ctx context.Context, j *client.Job) (any, error) {
			if _, err := client.Step(ctx, j, "first", nil, func(context.Context) (string, error) { return "done", nil }); err != nil {
				return nil, err
			}
			close(inBetween)
			<-release
			return client.Step(ctx, j, "second", nil, func(context.Context) (string, error) { return "done too", nil })
		}}, nil)
		id := b.submit(t, 1, client.JobSpec{Type: "slow"})[0]
		<-inBetween
		deadline := time.Now().Add(5 * time.Second)
		for {
			if steps := jobSteps(t, b, id); len(steps) == 1 && steps[0].Status == "completed" && string(steps[0].Output) == `"done"` {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the first step is not completed while its handler goes on: %+v", jobSteps(t, b, id))
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(release)
		if j := b.waitAll(t, []string{id})[0]; j.Status != "completed" {
			t.Fatalf("job %+v", j)
		}
		if steps := jobSteps(t, b, id); len(steps) != 2 || steps[1].Status != "completed" {
			t.Fatalf("steps %+v", steps)
		}
	})
}

// stepSummary is a step as JOB.STEPS lists it.
type stepSummary struct {
	StepID string          `json:"step_id"`
	Status string          `json:"status"`
	Output json.RawMessage `json:"output"`
}

func jobSteps(t *testing.T, b *testBundle, id string) []stepSummary {
	t.Helper()
	raw, err := b.admin.Do(context.Background(), "JOB.STEPS", id).Text()
	if err != nil {
		t.Fatal(err)
	}
	var steps []stepSummary
	if err := json.Unmarshal([]byte(raw), &steps); err != nil {
		t.Fatalf("JOB.STEPS %s: %v: %s", id, err, raw)
	}
	return steps
}

// stepCounts are the step commands agq ran, from its metrics.
type stepCounts struct{ begins, completions int }

func (c stepCounts) minus(o stepCounts) stepCounts {
	return stepCounts{c.begins - o.begins, c.completions - o.completions}
}

func stepCommands(t *testing.T, b *testBundle) stepCounts {
	t.Helper()
	n := commandCounts(t, b.agq)
	return stepCounts{begins: n["step.begin"], completions: n["step.complete"]}
}
