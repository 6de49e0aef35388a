package commands_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agq/agq/internal/agqtest"
)

// stepSummary is a job's steps as step:status:attempts:output.
func stepSummary(t *testing.T, a *agqtest.Agq, id string) string {
	t.Helper()
	var got []string
	for _, s := range jobSteps(t, a.Admin(t), id) {
		got = append(got, fmt.Sprintf("%s:%s:%d:%s", s.StepID, s.Status, s.Attempts, s.Output))
	}
	return strings.Join(got, " ")
}

// STEP.COMPLETE … NEXT completes a step and begins the next in one call:
// the reply is the next step's STEP.BEGIN reply, a re-send answers the
// same, and a step completed with an equal input answers its output.
func TestStepCompleteNextBeginsTheNextStep(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	w := registerWorker(t, a, "stepper", "shop")
	id := submit(t, a.Admin(t), map[string]any{"type": "shop", "queue": "orders"})
	j := popStep(t, w, "orders")

	if got := j.text("STEP.BEGIN", "charge"); got != `{"execute":true,"attempt":1}` {
		t.Fatalf("STEP.BEGIN charge: %s", got)
	}
	next := `{"input":{"to":"Oslo"},"max_attempts":2}`
	if got := j.text("STEP.COMPLETE", "charge", `{"charge_id":"ch_1"}`, "NEXT", "ship", next); got != `{"execute":true,"attempt":1}` {
		t.Fatalf("STEP.COMPLETE charge NEXT ship: %s", got)
	}
	// Re-sent after a lost reply: the completion repeats, the step begun
	// by this delivery runs on in the same attempt.
	if got := j.text("STEP.COMPLETE", "charge", `{"charge_id":"ch_1"}`, "NEXT", "ship", next); got != `{"execute":true,"attempt":1}` {
		t.Fatalf("the same again: %s", got)
	}
	if got, want := stepSummary(t, a, id), `charge:completed:1:{"charge_id":"ch_1"} ship:running:1:null`; got != want {
		t.Fatalf("JOB.STEPS: %s, want %s", got, want)
	}
	steps := jobSteps(t, a.Admin(t), id)
	if string(steps[1].Input) != `{"to":"Oslo"}` {
		t.Fatalf("ship's input: %s", steps[1].Input)
	}
	// Without an output, and naming the step it completes: that step
	// completed with an equal (null) input, so its output is answered.
	if got := j.text("STEP.COMPLETE", "ship", "NEXT", "ship", next); got != `{"execute":false,"output":null}` {
		t.Fatalf("STEP.COMPLETE ship NEXT ship: %s", got)
	}
	if got := j.text("STEP.COMPLETE", "ship", `"tracked"`); got != "OK" {
		t.Fatalf("STEP.COMPLETE without NEXT: %s", got)
	}
	if err := w.update(ctx, id, map[string]any{"status": "completed", "delivery": j.d.Delivery}); err != nil {
		t.Fatal(err)
	}
	if got, want := stepSummary(t, a, id), `charge:completed:1:{"charge_id":"ch_1"} ship:completed:1:null`; got != want {
		t.Fatalf("JOB.STEPS at the end: %s, want %s", got, want)
	}
}

// A completion refused begins nothing; a malformed NEXT refuses the whole
// call before anything is written.
func TestStepCompleteNextRefused(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	w := registerWorker(t, a, "stepper", "shop")
	id := submit(t, a.Admin(t), map[string]any{"type": "shop", "queue": "orders"})
	j := popStep(t, w, "orders")
	if got := j.text("STEP.BEGIN", "charge"); got != `{"execute":true,"attempt":1}` {
		t.Fatalf("STEP.BEGIN charge: %s", got)
	}

	for _, c := range []struct {
		args []any
		want string
	}{
		{[]any{`"x"`, "NEXT"}, "ERR syntax error"},
		{[]any{`"x"`, "NEXT", "ship", "{}", "extra"}, "ERR syntax error"},
		{[]any{`"x"`, "LATER", "ship"}, "ERR syntax error"},
		{[]any{`"x"`, "NEXT", "ship!"}, "ERR step_id must be"},
		{[]any{`"x"`, "NEXT", "ship", `{"inputs":1}`}, "ERR invalid step: "},
		{[]any{`"x"`, "NEXT", "ship", `{"max_attempts":0}`}, "ERR invalid step: max_attempts"},
		{[]any{"not json", "NEXT", "ship"}, "ERR invalid step output"},
	} {
		err := j.call("STEP.COMPLETE", "charge", c.args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("STEP.COMPLETE charge %v: %v, want %s…", c.args, err, c.want)
		}
	}
	// A step not begun: refused, and the next is not begun.
	if err := j.call("STEP.COMPLETE", "pack", "NEXT", "ship").Err(); err == nil || !strings.Contains(err.Error(), "was not begun") {
		t.Fatalf("completing a step not begun: %v", err)
	}
	// A stale delivery: refused likewise.
	stale := j
	stale.d.Delivery = "00000000-0000-4000-8000-000000000000"
	if err := stale.call("STEP.COMPLETE", "charge", "NEXT", "ship").Err(); err == nil || !strings.Contains(err.Error(), "delivery") {
		t.Fatalf("a stale delivery: %v", err)
	}
	if got, want := stepSummary(t, a, id), `charge:running:1:null`; got != want {
		t.Fatalf("JOB.STEPS after the refusals: %s, want %s", got, want)
	}
}

// Many workers completing and beginning at once share groups: every job
// ends with its three steps completed once, in order.
func TestStepCompleteNextFromManyWorkers(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	const workers, each = 8, 5
	ids := make([]string, workers*each)
	for i := range ids {
		ids[i] = submit(t, a.Admin(t), map[string]any{"type": "shop", "queue": "many"})
	}
	steps := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for n := range workers {
		w := registerWorker(t, a, fmt.Sprintf("many-%d", n), "shop")
		wg.Go(func() {
			for range each {
				res, err := w.c.BRPop(ctx, 0, "queue:many").Result()
				if err != nil {
					errs <- fmt.Errorf("BRPOP: %w", err)
					return
				}
				var d delivered
				if err := json.Unmarshal([]byte(res[1]), &d); err != nil {
					errs <- err
					return
				}
				j := stepJob{t: t, w: w, id: d.JobID, d: d}
				if got := j.call("STEP.BEGIN", steps[0]).Val(); got != `{"execute":true,"attempt":1}` {
					errs <- fmt.Errorf("STEP.BEGIN %s: %v", steps[0], got)
					return
				}
				for i, s := range steps {
					args := []any{fmt.Sprintf(`"%s of %s"`, s, j.id)}
					want := any("OK")
					if i+1 < len(steps) {
						args = append(args, "NEXT", steps[i+1])
						want = `{"execute":true,"attempt":1}`
					}
					if got, err := j.call("STEP.COMPLETE", s, args...).Result(); err != nil || got != want {
						errs <- fmt.Errorf("STEP.COMPLETE %s of %s: %v %v", s, j.id, got, err)
						return
					}
				}
				if err := w.update(ctx, j.id, map[string]any{"status": "completed", "delivery": j.d.Delivery}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, id := range ids {
		want := fmt.Sprintf(`a:completed:1:"a of %s" b:completed:1:"b of %s" c:completed:1:"c of %s"`, id, id, id)
		if got := stepSummary(t, a, id); got != want {
			t.Fatalf("JOB.STEPS of %s: %s, want %s", id, got, want)
		}
	}
}
