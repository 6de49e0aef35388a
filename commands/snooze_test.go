package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// A holder snoozes its job: the job waits out the delay and comes back
// with the same attempt number; a re-sent snooze is one snooze; past the
// configured number of snoozes the job fails, saying why.
func TestASnoozedJobReturnsWithTheSameAttempt(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) { c.MaxSnoozes = 2 })
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "sleeper", "t")
	other := registerWorker(t, a, "other", "t")
	id := submit(t, admin, map[string]any{"type": "t", "queue": "snooze"})

	popWithDelivery := func(timeout string) (int, string, bool) {
		t.Helper()
		res, err := w.c.Do(ctx, "BRPOP", "queue:snooze", timeout).StringSlice()
		if err != nil {
			return 0, "", false
		}
		var d struct {
			Attempt  int    `json:"attempt"`
			Delivery string `json:"delivery"`
		}
		if err := json.Unmarshal([]byte(res[1]), &d); err != nil {
			t.Fatal(err)
		}
		return d.Attempt, d.Delivery, true
	}
	attempt, delivery, ok := popWithDelivery("1")
	if !ok || attempt != 1 {
		t.Fatalf("first delivery: attempt %d, %v", attempt, ok)
	}

	t.Run("BadSnoozesAreRefused", func(t *testing.T) {
		for doc, want := range map[string]string{
			`{"status":"snoozed"}`:               "ERR invalid update: a snooze needs seconds, more than 0 and at most a year",
			`{"status":"snoozed","seconds":0}`:   "ERR invalid update: a snooze needs seconds, more than 0 and at most a year",
			`{"status":"snoozed","seconds":"1"}`: "ERR invalid update: seconds must be a number, not string",
			`{"status":"snoozed","seconds":1e9}`: "ERR invalid update: a snooze needs seconds, more than 0 and at most a year",
		} {
			if err := w.c.Do(ctx, "JOB.UPDATE", id, doc).Err(); err == nil || err.Error() != want {
				t.Errorf("%s: %v, want %s", doc, err, want)
			}
		}
		if err := other.c.Do(ctx, "JOB.UPDATE", id, `{"status":"snoozed","seconds":1}`).Err(); err == nil || err.Error() != fmt.Sprintf("ERR job %s is owned by sleeper", id) {
			t.Errorf("another worker's snooze: %v", err)
		}
	})

	snooze := fmt.Sprintf(`{"status":"snoozed","seconds":1,"delivery":%q}`, delivery)
	snoozedAt := time.Now()
	for range 2 { // the second is a client's re-send
		if err := w.c.Do(ctx, "JOB.UPDATE", id, snooze).Err(); err != nil {
			t.Fatalf("snooze: %v", err)
		}
	}
	raw, err := admin.Do(ctx, "JOB.GET", id).Text()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Status   string  `json:"status"`
		Attempt  int     `json:"attempt"`
		Snoozes  int     `json:"snoozes"`
		WorkerID *string `json:"worker_id"`
	}
	json.Unmarshal([]byte(raw), &v)
	if v.Status != "scheduled" || v.Attempt != 0 || v.Snoozes != 1 || v.WorkerID != nil {
		t.Fatalf("snoozed job: %s", raw)
	}
	if _, _, ok := popWithDelivery("0.3"); ok {
		t.Fatal("the snoozed job was delivered before its time")
	}
	attempt, delivery, ok = popWithDelivery("5")
	if !ok || attempt != 1 {
		t.Fatalf("after the snooze: attempt %d, %v", attempt, ok)
	}
	if waited := time.Since(snoozedAt); waited < 900*time.Millisecond {
		t.Fatalf("the job came back after %v, before its second", waited)
	}
	// The snooze's delivery is over: a late report about it is refused.
	if err := w.c.Do(ctx, "JOB.UPDATE", id, fmt.Sprintf(`{"status":"snoozed","seconds":1,"delivery":%q}`, "00000000-0000-4000-8000-000000000000")).Err(); err == nil {
		t.Fatal("a snooze naming another delivery was accepted")
	}

	// The second snooze is the last allowed; the third fails the job.
	if err := w.c.Do(ctx, "JOB.UPDATE", id, fmt.Sprintf(`{"status":"snoozed","seconds":0.1,"delivery":%q}`, delivery)).Err(); err != nil {
		t.Fatal(err)
	}
	if attempt, delivery, ok = popWithDelivery("5"); !ok || attempt != 1 {
		t.Fatalf("after the second snooze: attempt %d, %v", attempt, ok)
	}
	err = w.c.Do(ctx, "JOB.UPDATE", id, fmt.Sprintf(`{"status":"snoozed","seconds":1,"delivery":%q}`, delivery)).Err()
	if want := fmt.Sprintf("ERR job %s was snoozed 2 times, the most allowed: the job failed", id); err == nil || err.Error() != want {
		t.Fatalf("a third snooze: %v, want %s", err, want)
	}
	raw, _ = admin.Do(ctx, "JOB.GET", id).Text()
	if !strings.Contains(raw, `"status":"failed"`) || !strings.Contains(raw, "snoozed 2 times, the most allowed") {
		t.Fatalf("the job after too many snoozes: %s", raw)
	}
}
