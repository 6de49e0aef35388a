package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agq/agq/client"
)

func TestProducer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	t.Run("SubmitsABatchInOneCall", func(t *testing.T) {
		ids, err := b.producer.SubmitMany(ctx, []client.JobSpec{
			{JobID: "batch-a", Type: "nobody", Queue: "q", Priority: 2, MaxAttempts: 5, RetryBackoff: 2 * time.Second,
				Timeout: time.Minute, UniqueKey: "u-a", Requires: []string{"x"}},
			{JobID: "batch-b", Type: "nobody", RunAt: time.Now().Add(time.Hour), FairKey: "acme", FairWeight: 3},
		})
		if err != nil || len(ids) != 2 || ids[1] != "batch-b" {
			t.Fatalf("%v, %v", ids, err)
		}
		if j, err := b.producer.Get(ctx, "batch-b"); err != nil || j.FairKey != "acme" || j.FairWeight != 3 {
			t.Fatalf("the fair key and weight did not pass through: %+v, %v", j, err)
		}
		j, err := b.producer.Get(ctx, "batch-b")
		if err != nil || j.Status != "scheduled" {
			t.Fatalf("%+v, %v", j, err)
		}
		if _, err := b.producer.SubmitMany(ctx, []client.JobSpec{{JobID: "batch-c"}, {JobID: "batch-a", Type: "other"}}); err == nil {
			t.Fatal("a batch with a conflicting job was accepted")
		}
		if _, err := b.producer.Get(ctx, "batch-c"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("a refused batch stored batch-c: %v", err)
		}
	})
	t.Run("WaitsCancelsAndRetries", func(t *testing.T) {
		id, err := b.producer.Submit(ctx, client.JobSpec{Type: "nobody", Payload: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.producer.Wait(ctx, id, 100*time.Millisecond); !errors.Is(err, client.ErrNotFinished) {
			t.Fatalf("Wait: %v", err)
		}
		if err := b.producer.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		if j, err := b.producer.Wait(ctx, id, time.Second); err != nil || j.Status != "cancelled" {
			t.Fatalf("%+v, %v", j, err)
		}
		if err := b.producer.Retry(ctx, id); err != nil {
			t.Fatal(err)
		}
		if j, err := b.producer.Get(ctx, id); err != nil || j.Status != "queued" || string(j.Payload) != `{"k":"v"}` {
			t.Fatalf("%+v, %v", j, err)
		}
		if _, err := b.producer.Get(ctx, "no-such-job"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("Get: %v", err)
		}
	})
	t.Run("FollowsAJobToItsEnd", func(t *testing.T) {
		id, err := b.producer.Submit(ctx, client.JobSpec{Type: "followed"})
		if err != nil {
			t.Fatal(err)
		}
		events, err := b.producer.Follow(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		b.startWorker(t, "follow-1", map[string]client.HandlerFunc{"followed": func(context.Context, *client.Job) (any, error) { return 1, nil }}, nil)
		var seen []string
		for e := range events {
			seen = append(seen, e.Event)
		}
		if len(seen) < 2 || seen[len(seen)-1] != "completed" {
			t.Fatalf("events %v", seen)
		}
		// A job that ended already gives its status at once.
		events, err = b.producer.Follow(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if e := <-events; e.Status != "completed" {
			t.Fatalf("event %+v", e)
		}
	})
}
