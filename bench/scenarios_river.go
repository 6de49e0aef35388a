package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River runs as its own benchmark does: MaxWorkers 2000, FetchCooldown
// 2ms, FetchPollInterval 20ms, a no-op worker.

type noopArgs struct {
	SentAt int64 `json:"sent_at"`
}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	r *riverSide
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[noopArgs]) error {
	if job.Args.SentAt != 0 {
		select {
		case w.r.latency <- time.Since(time.Unix(0, job.Args.SentAt)):
		default:
		}
	}
	w.r.worked.Add(1)
	return nil
}

type riverSide struct {
	pool    *pgxpool.Pool
	client  *river.Client[pgx.Tx]
	worked  atomic.Int64
	latency chan time.Duration
}

func newRiver(ctx context.Context, url string) (*riverSide, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	driver := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(driver, nil)
	if err != nil {
		return nil, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, err
	}
	r := &riverSide{pool: pool, latency: make(chan time.Duration, 1024)}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{r: r})
	r.client, err = river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2000}},
		Workers:           workers,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
	})
	return r, err
}

func (r *riverSide) close() { r.pool.Close() }

func (r *riverSide) start(ctx context.Context) error { return r.client.Start(ctx) }

func (r *riverSide) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.client.Stop(ctx)
}

func (r *riverSide) insertMany(ctx context.Context, n, batch int, sentAt int64) error {
	for done := 0; done < n; {
		k := min(batch, n-done)
		params := make([]river.InsertManyParams, k)
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{SentAt: sentAt}}
		}
		if _, err := r.client.InsertMany(ctx, params); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// completedInDB waits until n jobs are completed in the table: River's
// completer commits after Work returns.
func (r *riverSide) completedInDB(ctx context.Context, n int) error {
	for {
		var got int
		if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&got); err != nil {
			return err
		}
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// riverBurnDown works off n inserted jobs.
func riverBurnDown(ctx context.Context, cl *cluster, r *riverSide, n int, statements bool) (measure, error) {
	if _, err := r.pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return measure{}, err
	}
	if err := r.insertMany(ctx, n, 5000, 0); err != nil {
		return measure{}, err
	}
	if statements {
		if err := cl.statementsReset(ctx, "river"); err != nil {
			return measure{}, err
		}
	}
	r.worked.Store(0)
	// The measure ends when the table holds the last completion, as
	// agq's ends with the last report; the client stops unmeasured.
	started := false
	m, err := cl.measure(ctx, "river", 0, n, func() error {
		if err := r.start(ctx); err != nil {
			return err
		}
		started = true
		return r.completedInDB(ctx, n)
	})
	if started {
		r.stop()
	}
	return m, err
}

// riverContinuous inserts single jobs from producers while River works, for d.
func riverContinuous(ctx context.Context, r *riverSide, producers int, d time.Duration) (continuous, error) {
	if _, err := r.pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return continuous{}, err
	}
	r.worked.Store(0)
	if err := r.start(ctx); err != nil {
		return continuous{}, err
	}
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var submitted atomic.Int64
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for runCtx.Err() == nil {
				if _, err := r.client.Insert(runCtx, noopArgs{}, nil); err == nil {
					submitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	c := continuous{submitted: submitted.Load(), completed: r.worked.Load(), d: d}
	r.stop()
	return c, nil
}

// riverSubmit inserts n jobs one at a time from producers goroutines, or in
// batches of batch from one.
func riverSubmit(ctx context.Context, r *riverSide, n, producers, batch int) (float64, error) {
	if _, err := r.pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return 0, err
	}
	start := time.Now()
	if batch > 1 {
		if err := r.insertMany(ctx, n, batch, 0); err != nil {
			return 0, err
		}
		return float64(n) / time.Since(start).Seconds(), nil
	}
	err := spread(n, producers, func() struct{} { return struct{}{} },
		func(struct{}) error { _, err := r.client.Insert(ctx, noopArgs{}, nil); return err },
		func(struct{}) {})
	return float64(n) / time.Since(start).Seconds(), err
}

// riverPickup inserts one job at a time into an idle client.
func riverPickup(ctx context.Context, r *riverSide, samples int) ([]time.Duration, error) {
	if _, err := r.pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return nil, err
	}
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	defer r.stop()
	time.Sleep(500 * time.Millisecond)
	for len(r.latency) > 0 {
		<-r.latency
	}
	var out []time.Duration
	for range samples {
		if _, err := r.client.Insert(ctx, noopArgs{SentAt: time.Now().UnixNano()}, nil); err != nil {
			return nil, err
		}
		select {
		case d := <-r.latency:
			out = append(out, d)
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("river did not work a job within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return out, nil
}
