// Command agqbench measures agq: submission throughput (single and
// batched), worker throughput (pop + complete), and add-to-start latency
// (a job submitted while workers are blocked in BRPOP, until one holds
// it). It prints numbers; it asserts nothing.
//
//	go run ./cmd/agqbench                       # against a throw-away agq on a managed PostgreSQL
//	go run ./cmd/agqbench --addr 127.0.0.1:6380 --key "$(cat agq-data/admin.key)"
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/config"
	"github.com/agq/agq/internal/node"
)

type options struct {
	addr, key         string
	jobs, workers     int
	submitters, batch int
	latencySamples    int
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "", "agq address; empty starts a throw-away agq on a managed PostgreSQL")
	flag.StringVar(&o.key, "key", "", "admin key (with --addr)")
	flag.IntVar(&o.jobs, "jobs", 20000, "jobs per throughput phase")
	flag.IntVar(&o.workers, "workers", 8, "concurrent workers")
	flag.IntVar(&o.submitters, "submitters", 4, "concurrent submitters")
	flag.IntVar(&o.batch, "batch", 100, "jobs per JOB.SUBMIT array in the batched phase")
	flag.IntVar(&o.latencySamples, "latency-samples", 300, "jobs submitted one at a time for add-to-start latency")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "agqbench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx := context.Background()
	if o.addr == "" {
		n, stop, err := startLocal(ctx)
		if err != nil {
			return err
		}
		defer stop()
		o.addr, o.key = n.RESPAddr(), n.adminKey
	}
	admin := redis.NewClient(&redis.Options{Addr: o.addr, Password: o.key, PoolSize: o.submitters * 2})
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	workerKey, err := admin.Do(ctx, "KEY.CREATE", "worker", "bench-workers").Text()
	if err != nil {
		return err
	}
	fmt.Printf("agqbench: %d jobs per phase, %d workers, %d submitters\n\n", o.jobs, o.workers, o.submitters)

	single := measureSubmit(ctx, admin, o, "bench-single", 1)
	report("submit, one job per JOB.SUBMIT", o.jobs, single)
	batched := measureSubmit(ctx, admin, o, "bench-batch", o.batch)
	report(fmt.Sprintf("submit, %d jobs per JOB.SUBMIT", o.batch), o.jobs, batched)

	work, err := measureWork(ctx, o, workerKey, "bench-single")
	if err != nil {
		return err
	}
	report("work: BRPOP + JOB.UPDATE running + completed", o.jobs, work)

	lat, err := measureLatency(ctx, admin, o, workerKey)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	fmt.Printf("%-48s p50 %v  p90 %v  p99 %v  max %v\n", "add-to-start latency (submit → worker holds it)",
		pct(lat, 50), pct(lat, 90), pct(lat, 99), lat[len(lat)-1])
	return nil
}

func report(what string, n int, d time.Duration) {
	fmt.Printf("%-48s %8.0f jobs/s  (%d in %v)\n", what, float64(n)/d.Seconds(), n, d.Round(time.Millisecond))
}

func pct(sorted []time.Duration, p int) time.Duration {
	return sorted[(len(sorted)-1)*p/100].Round(10 * time.Microsecond)
}

func measureSubmit(ctx context.Context, c *redis.Client, o options, queue string, batch int) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range o.submitters {
		wg.Go(func() {
			for {
				first := int(next.Add(int64(batch))) - batch
				if first >= o.jobs {
					return
				}
				jobs := make([]map[string]any, 0, batch)
				for i := first; i < min(first+batch, o.jobs); i++ {
					jobs = append(jobs, map[string]any{"queue": queue, "type": "bench", "payload": map[string]int{"i": i}})
				}
				var doc []byte
				if batch == 1 {
					doc, _ = json.Marshal(jobs[0])
				} else {
					doc, _ = json.Marshal(jobs)
				}
				if err := c.Do(ctx, "JOB.SUBMIT", string(doc)).Err(); err != nil {
					fmt.Fprintln(os.Stderr, "submit:", err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

func newWorker(ctx context.Context, addr, key, id string) (*redis.Client, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, Username: id, Password: key, PoolSize: 2})
	doc, _ := json.Marshal(map[string]any{"worker_id": id, "hostname": "bench", "agw_version": "bench",
		"capabilities": map[string]any{"tools": []string{}, "types": []string{"bench"}}})
	if err := c.Do(ctx, "WORKER.REGISTER", string(doc)).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func measureWork(ctx context.Context, o options, key, queue string) (time.Duration, error) {
	var done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range o.workers {
		c, err := newWorker(ctx, o.addr, key, fmt.Sprintf("bench-%d", w))
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			defer c.Close()
			for done.Load() < int64(o.jobs) {
				res, err := c.Do(ctx, "BRPOP", "queue:"+queue, "0.5").StringSlice()
				if err != nil {
					continue
				}
				var j struct {
					ID string `json:"job_id"`
				}
				json.Unmarshal([]byte(res[1]), &j)
				c.Do(ctx, "JOB.UPDATE", j.ID, `{"status":"running"}`)
				c.Do(ctx, "JOB.UPDATE", j.ID, `{"status":"completed","output":"ok"}`)
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return time.Since(start), nil
}

func measureLatency(ctx context.Context, admin *redis.Client, o options, key string) ([]time.Duration, error) {
	sent := sync.Map{}
	got := make(chan time.Duration, o.latencySamples)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range o.workers {
		c, err := newWorker(ctx, o.addr, key, fmt.Sprintf("bench-lat-%d", w))
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := c.Do(ctx, "BRPOP", "queue:bench-latency", "0.5").StringSlice()
				if err != nil {
					continue
				}
				at := time.Now()
				var j struct {
					ID string `json:"job_id"`
				}
				json.Unmarshal([]byte(res[1]), &j)
				if t0, ok := sent.Load(j.ID); ok {
					got <- at.Sub(t0.(time.Time))
				}
				c.Do(ctx, "JOB.UPDATE", j.ID, `{"status":"completed"}`)
			}
		})
	}
	time.Sleep(time.Second) // let the workers block
	var out []time.Duration
	for i := range o.latencySamples {
		id := fmt.Sprintf("lat-%d-%d", time.Now().UnixNano(), i)
		sent.Store(id, time.Now())
		if err := admin.Do(ctx, "JOB.SUBMIT", fmt.Sprintf(`{"job_id":%q,"queue":"bench-latency","type":"bench"}`, id)).Err(); err != nil {
			return nil, err
		}
		select {
		case d := <-got:
			out = append(out, d)
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("job %s was not delivered within 10s", id)
		}
	}
	close(stop)
	wg.Wait()
	return out, nil
}

type localAgq struct {
	*node.Node
	adminKey string
}

// startLocal starts agq on a managed PostgreSQL in a temporary data dir.
func startLocal(ctx context.Context) (*localAgq, func(), error) {
	dir, err := os.MkdirTemp("", "agqbench")
	if err != nil {
		return nil, nil, err
	}
	// As root, PostgreSQL runs as its own user and must be able to enter it.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, nil, err
	}
	cfg, err := config.Load([]string{"--listen", "127.0.0.1:0", "--http-listen", "off", "--data-dir", dir}, func(string) string { return "" }, io.Discard)
	if err != nil {
		return nil, nil, err
	}
	cfg.AdminKey = auth.GenerateKey()
	fmt.Println("agqbench: starting a throw-away agq on a managed PostgreSQL in", dir)
	n, err := node.Start(ctx, cfg, zerolog.New(os.Stderr).Level(zerolog.WarnLevel))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return &localAgq{Node: n, adminKey: cfg.AdminKey}, func() { n.Close(); os.RemoveAll(dir) }, nil
}
