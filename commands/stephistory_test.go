package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// attemptView is an entry of a step's history in JOB.STEPS.
type attemptView struct {
	Attempt int        `json:"attempt"`
	BeganAt time.Time  `json:"began_at"`
	EndedAt *time.Time `json:"ended_at"`
	Outcome *string    `json:"outcome"`
	Error   *string    `json:"error"`
}

// stepHistory is the history of step of job id, as JOB.STEPS shows it.
func stepHistory(t *testing.T, c *redis.Client, id, step string) []attemptView {
	t.Helper()
	raw, err := c.Do(context.Background(), "JOB.STEPS", id).Text()
	if err != nil {
		t.Fatalf("JOB.STEPS: %v", err)
	}
	var steps []struct {
		StepID  string        `json:"step_id"`
		History []attemptView `json:"history"`
	}
	if err := json.Unmarshal([]byte(raw), &steps); err != nil {
		t.Fatalf("JOB.STEPS %s: %v", raw, err)
	}
	for _, s := range steps {
		if s.StepID == step {
			if s.History == nil {
				t.Fatalf("JOB.STEPS without a history: %s", raw)
			}
			return s.History
		}
	}
	t.Fatalf("no step %s in %s", step, raw)
	return nil
}

// describe writes a history as attempt:outcome[:error], an entry without
// an end marked open, for comparisons.
func describe(history []attemptView) string {
	var out []string
	for _, a := range history {
		s := fmt.Sprintf("%d:", a.Attempt)
		if a.Outcome != nil {
			s += *a.Outcome
		}
		if a.Error != nil {
			s += ":" + *a.Error
		}
		if a.EndedAt == nil {
			s += ":open"
		} else if a.EndedAt.Before(a.BeganAt) {
			s += ":ended-before-it-began"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// Each attempt of a step is kept: one that failed, with its error, and the
// one that completed after it; the running attempt shows with no end and
// no outcome.
func TestAStepsHistoryKeepsEachAttempt(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "historian", "h")
	id := submit(t, admin, map[string]any{"type": "h", "queue": "history", "retry_backoff_seconds": 0})

	j := popStep(t, w, "history")
	if got := j.text("STEP.BEGIN", "call", `{"max_attempts":3}`); got != `{"execute":true,"attempt":1}` {
		t.Fatal(got)
	}
	if got := describe(stepHistory(t, admin, id, "call")); got != "1::open" {
		t.Fatalf("the running attempt: %s", got)
	}
	j.text("STEP.FAIL", "call", `{"message":"503 from upstream","retry_after_seconds":0.01}`)
	if got := describe(stepHistory(t, admin, id, "call")); got != "1:failed:503 from upstream" {
		t.Fatalf("after the failure: %s", got)
	}
	j = popStep(t, w, "history")
	if got := j.text("STEP.BEGIN", "call"); got != `{"execute":true,"attempt":2}` {
		t.Fatal(got)
	}
	if got := describe(stepHistory(t, admin, id, "call")); got != "1:failed:503 from upstream 2::open" {
		t.Fatalf("the second attempt running: %s", got)
	}
	if s := j.text("STEP.COMPLETE", "call", `"ok"`); s != "OK" {
		t.Fatal(s)
	}
	history := stepHistory(t, admin, id, "call")
	if got := describe(history); got != "1:failed:503 from upstream 2:completed" {
		t.Fatalf("after the completion: %s", got)
	}
	if !history[1].BeganAt.After(history[0].BeganAt) || history[1].BeganAt.Before(*history[0].EndedAt) {
		t.Fatalf("the attempts' times: %+v", history)
	}
	// A plain JOB.STEPS step without attempts (a sleep) has an empty history.
	if got := j.text("STEP.SLEEP", "nap", "0.01"); !strings.HasPrefix(got, "SLEEPING") {
		t.Fatal(got)
	}
	if h := stepHistory(t, admin, id, "nap"); len(h) != 0 {
		t.Fatalf("a sleep's history: %+v", h)
	}
}

// An attempt whose worker was lost (no heartbeat: the watchdog found it
// dead) is kept as interrupted, with the time its delivery ended, and an
// attempt its job's timeout ended as timed_out.
func TestAStepsHistoryTellsInterruptedFromTimedOut(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, fastHeartbeats)
	ctx := context.Background()
	admin := a.Admin(t)
	silent := registerWorker(t, a, "h-silent", "t")
	alive := registerWorker(t, a, "h-alive", "t")
	lost := submit(t, admin, map[string]any{"type": "t", "queue": "h-lost"})
	j := popStep(t, silent, "h-lost")
	if got := j.text("STEP.BEGIN", "s"); got != `{"execute":true,"attempt":1}` {
		t.Fatal(got)
	}
	defer alive.keepHeartbeating()()
	j = popStep(t, alive, "h-lost")
	if got := describe(stepHistory(t, admin, lost, "s")); got != "1:interrupted" {
		t.Fatalf("the lost worker's attempt: %s", got)
	}
	if got := j.text("STEP.BEGIN", "s"); got != `{"execute":true,"attempt":2}` {
		t.Fatal(got)
	}
	if got := describe(stepHistory(t, admin, lost, "s")); got != "1:interrupted 2::open" {
		t.Fatalf("begun again: %s", got)
	}
	if err := alive.update(ctx, lost, map[string]any{"status": "completed", "delivery": j.d.Delivery}); err != nil {
		t.Fatal(err)
	}
	// The step left open when its job completed: its delivery ended.
	if got := describe(stepHistory(t, admin, lost, "s")); got != "1:interrupted 2:interrupted:open" {
		t.Fatalf("left open: %s", got)
	}

	slow := submit(t, admin, map[string]any{"type": "t", "queue": "h-slow", "timeout_seconds": 1, "retry_backoff_seconds": 0.1})
	j = popStep(t, alive, "h-slow")
	if got := j.text("STEP.BEGIN", "s"); got != `{"execute":true,"attempt":1}` {
		t.Fatal(got)
	}
	j = popStep(t, alive, "h-slow")
	if got := describe(stepHistory(t, admin, slow, "s")); got != "1:timed_out" {
		t.Fatalf("the attempt its timeout ended: %s", got)
	}
}
