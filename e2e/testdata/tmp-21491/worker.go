// client-worker.go: an agq worker with the client package. It runs jobs of
// type "reverse": {"type":"reverse","payload":{"text":"hello"}} completes
// with output "olleh".
package main

import (
	"cmp"
	"context"
	"errors"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/agq/agq/client"
)

func main() {
	w, err := client.NewWorker(client.WorkerOptions{
		Addr:        cmp.Or(os.Getenv("AGQ_ADDR"), "127.0.0.1:6380"),
		WorkerID:    os.Getenv("AGQ_WORKER_ID"),
		Key:         os.Getenv("AGQ_KEY"), // minted with KEY.CREATE worker <id>
		Queues:      []string{"ready"},
		Concurrency: 16,
		Logger:      slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	w.Handle("reverse", func(ctx context.Context, j *client.Job) (any, error) {
		p, err := client.Decode[struct{ Text string }](j)
		if err != nil {
			return nil, client.Permanent(err)
		}
		if p.Text == "" {
			return nil, client.Permanent(errors.New("nothing to reverse")) // not retried
		}
		text := []rune(p.Text)
		slices.Reverse(text)
		return string(text), nil // the job's output
	})
	// SIGTERM drains: no new jobs, the running ones finish, then unregister.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
