package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agq/agq/client"
	"github.com/agq/agq/internal/agqtest"
)

func TestWorkerRecovers(t *testing.T) {
	t.Parallel()

	// Without job.cancel (a proxy without pub/sub, or a message missed
	// while reconnecting), the heartbeat reply's cancel=<id> still ends
	// the handler's ctx within a heartbeat, and the job ends cancelled.
	t.Run("HearsACancellationInTheHeartbeatReplyAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, heartbeatEvery(time.Second))
		started := make(chan struct{})
		stopped := make(chan error, 1)
		b.startWorker(t, "hb-cancel-1", map[string]client.HandlerFunc{"long": func(ctx context.Context, j *client.Job) (any, error) {
			close(started)
			<-ctx.Done()
			stopped <- context.Cause(ctx)
			return nil, ctx.Err()
		}}, func(o *client.WorkerOptions) { o.IgnoreCancelChannel = true })
		ids := b.submit(t, 1, client.JobSpec{Type: "long"})
		<-started
		asked := time.Now()
		if err := b.producer.Cancel(context.Background(), ids[0]); err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-stopped:
			t.Logf("the handler's ctx ended %v after JOB.CANCEL: %v", time.Since(asked), cause)
		case <-time.After(2 * time.Second):
			t.Fatal("the handler's ctx did not end within a heartbeat (1s) and its round trip of JOB.CANCEL")
		}
		if j := b.waitAll(t, ids)[0]; j.Status != "cancelled" {
			t.Fatalf("job is %s", j.Status)
		}
	})

	// agq forgets the worker (an operator's WORKER.UNREGISTER here; a
	// watchdog's verdict after an outage alike): the next heartbeat is
	// answered "Worker not registered", the worker registers again and
	// goes on taking jobs.
	t.Run("RegistersAgainWhenAgqSaysItIsUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, heartbeatEvery(500*time.Millisecond))
		b.startWorker(t, "rereg-1", map[string]client.HandlerFunc{"quick": func(context.Context, *client.Job) (any, error) {
			return "ok", nil
		}}, nil)
		first := b.registeredAt(t, "rereg-1")
		if err := b.admin.Do(context.Background(), "WORKER.UNREGISTER", "rereg-1").Err(); err != nil {
			t.Fatal(err)
		}
		agqtest.Eventually(t, 10*time.Second, func() error {
			if at := b.registeredAt(t, "rereg-1"); !at.After(first) {
				return fmt.Errorf("registered at %v, as before", at)
			}
			return nil
		})
		b.waitWorkerState(t, "rereg-1", "ACTIVE")
		if j := b.waitAll(t, b.submit(t, 1, client.JobSpec{Type: "quick"}))[0]; j.Status != "completed" {
			t.Fatalf("after registering again, a job is %s", j.Status)
		}
	})

	// A report the handler gave up on (its ctx ended first) says nothing
	// about the connection: the worker does not register again.
	t.Run("KeepsItsRegistrationWhenAHandlerGivesUpAReport", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWorker(t, "giveup-1", map[string]client.HandlerFunc{"quick": func(ctx context.Context, j *client.Job) (any, error) {
			gone, cancel := context.WithCancel(ctx)
			cancel()
			if err := j.Progress(gone, 1, 50); err == nil {
				return nil, errors.New("a progress report with an ended ctx succeeded")
			}
			return "ok", nil
		}}, nil)
		first := b.registeredAt(t, "giveup-1")
		// The second job is popped after the first's report: a pop
		// registers again first when the registration was marked lost.
		for range 2 {
			if j := b.waitAll(t, b.submit(t, 1, client.JobSpec{Type: "quick"}))[0]; j.Status != "completed" {
				t.Fatalf("job is %s: %s", j.Status, j.Result)
			}
		}
		if at := b.registeredAt(t, "giveup-1"); !at.Equal(first) {
			t.Fatalf("registered again at %v (first at %v)", at, first)
		}
	})
}

// registeredAt is when agq last registered the worker.
func (b *testBundle) registeredAt(t *testing.T, id string) time.Time {
	t.Helper()
	raw, err := b.admin.Do(context.Background(), "WORKER.GET", id).Text()
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		RegisteredAt time.Time `json:"registered_at"`
	}
	if err := json.Unmarshal([]byte(raw), &w); err != nil {
		t.Fatal(err)
	}
	return w.RegisteredAt
}
