package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agq/agq/client"
	"github.com/agq/agq/internal/agqtest"
)

// ExampleWorker runs jobs of type "reverse" until its ctx ends.
func ExampleWorker() {
	addr, key, producerKey := exampleAgq("reverser-1")

	w, err := client.NewWorker(client.WorkerOptions{
		Addr:        addr,
		WorkerID:    "reverser-1",
		Key:         key, // KEY.CREATE worker reverser-1
		Queues:      []string{"ready"},
		Concurrency: 8,
	})
	if err != nil {
		panic(err)
	}
	w.Handle("reverse", func(ctx context.Context, j *client.Job) (any, error) {
		p, err := client.Decode[struct{ Text string }](j)
		if err != nil || p.Text == "" {
			return nil, client.Permanent(fmt.Errorf("nothing to reverse"))
		}
		text := []rune(p.Text)
		slices.Reverse(text)
		return string(text), nil
	})
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		defer stop() // drains and unregisters the worker
		p, _ := client.NewProducer(client.ProducerOptions{Addr: addr, Key: producerKey})
		defer p.Close()
		id, _ := p.Submit(ctx, client.JobSpec{Type: "reverse", Payload: map[string]string{"text": "hello"}})
		j, err := p.Wait(ctx, id, 10*time.Second)
		if err == nil {
			var result struct{ Output string } // the report: {"status":"completed","output":…}
			json.Unmarshal(j.Result, &result)
			fmt.Println(j.Status, result.Output)
		}
	}()
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	// Output: completed olleh
}

// ExampleStep charges an order once, however often its job is delivered.
func ExampleStep() {
	addr, key, producerKey := exampleAgq("shop-1")
	w, _ := client.NewWorker(client.WorkerOptions{Addr: addr, WorkerID: "shop-1", Key: key})
	w.Handle("order", func(ctx context.Context, j *client.Job) (any, error) {
		charge, err := client.Step(ctx, j, "charge", j.Payload(), func(ctx context.Context) (string, error) {
			return "ch_1", nil // the side effect, run once
		})
		if err != nil {
			return nil, err
		}
		if err := j.Sleep(ctx, "cool-off", time.Second); err != nil {
			return nil, err // asleep: agq delivers the job again in a second
		}
		return charge, nil
	})
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		defer stop()
		p, _ := client.NewProducer(client.ProducerOptions{Addr: addr, Key: producerKey})
		defer p.Close()
		id, _ := p.Submit(ctx, client.JobSpec{Type: "order", Payload: map[string]int{"amount": 10}})
		p.Wait(ctx, id, 10*time.Second)
		j, _ := p.Get(ctx, id)
		var result struct{ Output string }
		json.Unmarshal(j.Result, &result)
		fmt.Println(j.Status, "with", j.Steps, "steps:", result.Output)
	}()
	w.Run(ctx)
	// Output: completed with 2 steps: ch_1
}

// ExampleProducer_Follow prints a job's events as they happen.
func ExampleProducer_Follow() {
	addr, key, producerKey := exampleAgq("follow-ex")
	p, _ := client.NewProducer(client.ProducerOptions{Addr: addr, Key: producerKey})
	defer p.Close()
	ctx := context.Background()
	id, _ := p.Submit(ctx, client.JobSpec{Type: "noop"})
	events, _ := p.Follow(ctx, id)

	w, _ := client.NewWorker(client.WorkerOptions{Addr: addr, WorkerID: "follow-ex", Key: key})
	w.Handle("noop", func(context.Context, *client.Job) (any, error) { return nil, nil })
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go w.Run(wctx)

	for e := range events {
		fmt.Println(e.Event, e.Status)
	}
	// Output:
	// started running
	// completed completed
}

// exampleAgq is an agq for the examples, started once, and keys for a
// worker id and a producer.
func exampleAgq(workerID string) (addr, workerKey, producerKey string) {
	exampleOnce.Do(func() {
		exampleNode = agqtest.Start(exampleTB{})
		exampleProducerKey = exampleNode.CreateKey(exampleTB{}, "producer", "examples")
	})
	return exampleNode.Addr, exampleNode.CreateKey(exampleTB{}, "worker", workerID), exampleProducerKey
}

var (
	exampleOnce        sync.Once
	exampleNode        *agqtest.Agq
	exampleProducerKey string
)

// exampleTB lets the examples, which have no *testing.T, start an agq:
// it lives until the test binary exits.
type exampleTB struct{ testing.TB }

func (exampleTB) Helper()                   {}
func (exampleTB) Cleanup(func())            {}
func (exampleTB) Log(...any)                {}
func (exampleTB) Logf(string, ...any)       {}
func (exampleTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (exampleTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (exampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "agq-example")
	if err != nil {
		panic(err)
	}
	return dir
}
