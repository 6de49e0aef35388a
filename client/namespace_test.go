package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/agq/agq/client"
)

// A cluster admin's producer given a namespace submits there; a worker
// whose key belongs to that namespace runs the job; the default
// namespace never sees it.
func TestAProducerInANamespace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := b.admin.Do(ctx, "NAMESPACE.CREATE", "team-x").Err(); err != nil {
		t.Fatal(err)
	}
	p, err := client.NewProducer(client.ProducerOptions{Addr: b.agq.Addr, Key: b.agq.AdminKey, Namespace: "team-x"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	id, err := p.Submit(ctx, client.JobSpec{JobID: "nx-1", Type: "echo", Payload: map[string]int{"n": 7}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.producer.Get(ctx, id); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the default namespace's producer reads team-x's job: %v", err)
	}

	key, err := b.admin.Do(ctx, "KEY.CREATE", "worker", "wx-1", "NAMESPACE", "team-x").Text()
	if err != nil {
		t.Fatal(err)
	}
	w, err := client.NewWorker(client.WorkerOptions{
		Addr: b.agq.Addr, WorkerID: "wx-1", Key: key, Queues: []string{"ready"}, Concurrency: 2,
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PopTimeout: time.Second, ShutdownGrace: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("echo", func(ctx context.Context, j *client.Job) (any, error) { return j.Payload(), nil })
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()

	j, err := p.Wait(ctx, id, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var result struct {
		Output map[string]int `json:"output"`
	}
	_ = json.Unmarshal(j.Result, &result)
	if j.Status != "completed" || j.Namespace != "team-x" || result.Output["n"] != 7 {
		t.Fatalf("the job in team-x: %+v", j)
	}
	if other, err := client.NewProducer(client.ProducerOptions{Addr: b.agq.Addr, Key: b.agq.AdminKey, Namespace: "nowhere"}); err == nil {
		defer other.Close()
		if _, err := other.Submit(ctx, client.JobSpec{Type: "echo"}); err == nil {
			t.Fatal("a producer in a namespace that does not exist submitted")
		}
	}
}
