package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/client"
	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// The tests run the package against real agq nodes on a managed
// PostgreSQL; the package itself imports none of the server.
func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }

// testBundle is an agq node with an admin and a producer.
type testBundle struct {
	agq      *agqtest.Agq
	admin    *redis.Client
	producer *client.Producer
}

func setup(t *testing.T, opts ...agqtest.Option) *testBundle {
	t.Helper()
	a := agqtest.Start(t, opts...)
	p, err := client.NewProducer(client.ProducerOptions{Addr: a.Addr, Key: a.CreateKey(t, "producer", "tests")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &testBundle{agq: a, admin: a.Admin(t), producer: p}
}

func heartbeatEvery(d time.Duration) agqtest.Option {
	return func(c *config.Config) { c.HeartbeatInterval = d }
}

func ackTimeout(d time.Duration) agqtest.Option {
	return func(c *config.Config) { c.AckTimeout = d }
}

// runningWorker is a Worker whose Run goes on in the background.
type runningWorker struct {
	w    *client.Worker
	stop context.CancelFunc
	done chan error
	once sync.Once
	err  error
}

// wait stops the worker and returns Run's error.
func (r *runningWorker) wait(t *testing.T) error {
	t.Helper()
	r.once.Do(func() {
		r.stop()
		select {
		case r.err = <-r.done:
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return within 30s of its ctx's end")
		}
	})
	return r.err
}

// startWorker mints a key for id and runs a worker with it; handlers maps
// job types to handlers, adjust changes the options first.
func (b *testBundle) startWorker(t *testing.T, id string, handlers map[string]client.HandlerFunc, adjust func(*client.WorkerOptions)) *runningWorker {
	t.Helper()
	opts := client.WorkerOptions{
		Addr:          b.agq.Addr,
		WorkerID:      id,
		Key:           b.agq.CreateKey(t, "worker", id),
		Queues:        []string{"ready"},
		Concurrency:   4,
		Logger:        slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PopTimeout:    time.Second,
		ShutdownGrace: 10 * time.Second,
		BackoffMin:    20 * time.Millisecond,
		BackoffMax:    200 * time.Millisecond,
	}
	if adjust != nil {
		adjust(&opts)
	}
	w, err := client.NewWorker(opts)
	if err != nil {
		t.Fatal(err)
	}
	for typ, h := range handlers {
		w.Handle(typ, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningWorker{w: w, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.wait(t) })
	b.waitWorkerState(t, id, "ACTIVE")
	return r
}

func (b *testBundle) waitWorkerState(t *testing.T, id, state string) {
	t.Helper()
	agqtest.Eventually(t, 10*time.Second, func() error {
		raw, err := b.admin.Do(context.Background(), "WORKER.GET", id).Text()
		if err != nil {
			return err
		}
		var w struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal([]byte(raw), &w); err != nil {
			return err
		}
		if w.State != state {
			return fmt.Errorf("worker %s is %s, not %s", id, w.State, state)
		}
		return nil
	})
}

// submit submits n jobs of type typ and returns their ids.
func (b *testBundle) submit(t *testing.T, n int, spec client.JobSpec) []string {
	t.Helper()
	specs := make([]client.JobSpec, n)
	for i := range specs {
		specs[i] = spec
	}
	ids, err := b.producer.SubmitMany(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// waitAll waits for each job to end and returns them.
func (b *testBundle) waitAll(t *testing.T, ids []string) []*client.JobInfo {
	t.Helper()
	out := make([]*client.JobInfo, len(ids))
	for i, id := range ids {
		j, err := b.producer.Wait(context.Background(), id, 30*time.Second)
		if err != nil {
			t.Fatalf("waiting for job %s: %v", id, err)
		}
		out[i] = j
	}
	return out
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
