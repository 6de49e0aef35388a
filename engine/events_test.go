package engine_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
)

// setupSubscribed is setup with a subscriber on this node, so that the
// engine publishes status events.
func setupSubscribed(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t)
	receive(t, "the hub's notice of interest", b.hub.SetSubscribed(wakeup.StatusInterest))
	return b
}

func TestEvents(t *testing.T) {
	t.Parallel()

	t.Run("ASubmittedClaimedCompletedJobIsAnnouncedInOrder", func(t *testing.T) {
		t.Parallel()
		b := setupSubscribed(t)
		held := b.submitAndClaim(t, newJob("j1"))
		if err := b.engine.Report(report(held, "w1", records.StatusCompleted))(b.ctx); err != nil {
			t.Fatal(err)
		}
		b.messages.waitEvents(t, "job.j1.status", "j1", "submitted", "started", "completed")
		b.messages.waitEvents(t, "queue.q.events", "j1", "submitted", "started", "completed")

		var started engine.StatusEvent
		for _, p := range b.messages.on("job.j1.status") {
			var ev engine.StatusEvent
			if err := json.Unmarshal([]byte(p), &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Event == "started" {
				started = ev
			}
		}
		if started.Queue != "q" || started.Status != records.StatusRunning || started.Attempt != 1 || started.WorkerID != "w1" {
			t.Fatalf("started event: %+v", started)
		}
	})

	t.Run("AJobHandedOverIsAnnouncedSubmittedThenStarted", func(t *testing.T) {
		t.Parallel()
		b := setupSubscribed(t)
		popped := b.startPop(t, b.worker, newWait(deadline))
		if res := b.submit(t, newJob("j1")); res.Delivered == nil {
			t.Fatal("the submission was not handed over")
		}
		receive(t, "the pop's job", popped)
		b.messages.waitEvents(t, "job.j1.status", "j1", "submitted", "started")
	})

	t.Run("AFailureRetriedIsAnnouncedRetrying", func(t *testing.T) {
		t.Parallel()
		b := setupSubscribed(t)
		held := b.submitAndClaim(t, newJob("j1"))
		r := report(held, "w1", records.StatusFailed)
		r.Error, r.Retryable = "boom", true
		if err := b.engine.Report(r)(b.ctx); err != nil {
			t.Fatal(err)
		}
		b.messages.waitEvents(t, "job.j1.status", "j1", "submitted", "started", "retrying")
	})

	t.Run("CancellingARunningJobIsAnnouncedAndToldOnJobCancel", func(t *testing.T) {
		t.Parallel()
		b := setupSubscribed(t)
		b.submitAndClaim(t, newJob("j1"))
		if err := b.engine.CancelJob(b.ctx, "j1"); err != nil {
			t.Fatal(err)
		}
		b.messages.waitEvents(t, "job.j1.status", "j1", "submitted", "started", "cancel_requested")
		eventually(t, "job.cancel naming j1", func() bool {
			return slices.Equal(b.messages.on("job.cancel"), []string{"j1"})
		})
	})

	t.Run("RetryingAFailedJobIsAnnouncedRetried", func(t *testing.T) {
		t.Parallel()
		b := setupSubscribed(t)
		held := b.submitAndClaim(t, newJob("j1"))
		r := report(held, "w1", records.StatusFailed)
		r.Error = "boom"
		if err := b.engine.Report(r)(b.ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.engine.RetryJob(b.ctx, "j1"); err != nil {
			t.Fatal(err)
		}
		b.messages.waitEvents(t, "job.j1.status", "j1", "submitted", "started", "failed", "retried")
	})

	// A transition sent again changes nothing, and is not announced again;
	// the job submitted last fences what the repeats would have published.
	repeats := []struct {
		name   string
		repeat func(b *testBundle, held records.Job) error
		events []string
	}{
		{"TheSameCompletedReport", func(b *testBundle, held records.Job) error {
			return b.engine.Report(report(held, "w1", records.StatusCompleted))(b.ctx)
		}, []string{"submitted", "started", "completed"}},
		{"TheSameFailedReport", func(b *testBundle, held records.Job) error {
			r := report(held, "w1", records.StatusFailed)
			r.Error = "boom"
			return b.engine.Report(r)(b.ctx)
		}, []string{"submitted", "started", "failed"}},
		{"TheSameCancellation", func(b *testBundle, _ records.Job) error {
			return b.engine.CancelJob(b.ctx, "j1")
		}, []string{"submitted", "started", "cancel_requested"}},
	}
	for _, tc := range repeats {
		t.Run(tc.name+"SentTwiceIsAnnouncedOnce", func(t *testing.T) {
			t.Parallel()
			b := setupSubscribed(t)
			held := b.submitAndClaim(t, newJob("j1"))
			for range 2 {
				if err := tc.repeat(b, held); err != nil {
					t.Fatal(err)
				}
			}
			b.submit(t, newJob("fence"))
			b.messages.waitEvents(t, "queue.q.events", "fence", "submitted")
			b.messages.waitEvents(t, "job.j1.status", "j1", tc.events...)
		})
	}

	t.Run("RetryingAJobThatIsWaitingAnnouncesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupSubscribed(t)
		b.submit(t, newJob("j1"))
		if err := b.engine.RetryJob(b.ctx, "j1"); err != nil {
			t.Fatal(err)
		}
		b.submit(t, newJob("fence"))
		b.messages.waitEvents(t, "queue.q.events", "fence", "submitted")
		b.messages.waitEvents(t, "job.j1.status", "j1", "submitted")
	})

	t.Run("NothingIsAnnouncedWhileNobodySubscribes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		held := b.submitAndClaim(t, newJob("j1"))
		if err := b.engine.Report(report(held, "w1", records.StatusCompleted))(b.ctx); err != nil {
			t.Fatal(err)
		}
		if got := b.messages.on("job.j1.status"); len(got) != 0 {
			t.Fatalf("published %q with no subscriber", got)
		}
	})

	t.Run("SubscribersOfJobCancelAloneGetItButNoStatusEvents", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		receive(t, "the hub's notice of interest", b.hub.SetSubscribed(wakeup.SomeInterest))
		held := b.submitAndClaim(t, newJob("j1"))
		if err := b.engine.Report(report(held, "w1", records.StatusCompleted))(b.ctx); err != nil {
			t.Fatal(err)
		}
		b.submitAndClaim(t, newJob("j2"))
		if err := b.engine.CancelJob(b.ctx, "j2"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "job.cancel naming j2", func() bool {
			return slices.Equal(b.messages.on("job.cancel"), []string{"j2"})
		})
		for _, ch := range []string{"job.j1.status", "job.j2.status", "queue.q.events"} {
			if got := b.messages.on(ch); len(got) != 0 {
				t.Errorf("published %q on %s with nobody following it", got, ch)
			}
		}
	})
}
