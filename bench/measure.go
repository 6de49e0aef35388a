package main

import (
	"cmp"
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// measure is a timed run of n jobs with what it cost.
type measure struct {
	jobs  int
	d     time.Duration
	cost  perJob
	waits string // the database's commonest wait events while it ran
}

func (m measure) rate() float64 { return float64(m.jobs) / m.d.Seconds() }

// median is the run of median rate, with its costs.
func median(ms []measure) measure {
	sorted := slices.Clone(ms)
	slices.SortFunc(sorted, func(a, b measure) int { return cmp.Compare(a.rate(), b.rate()) })
	return sorted[len(sorted)/2]
}

// continuous is a run of steady submissions and work.
type continuous struct {
	submitted, completed int64
	d                    time.Duration
}

// measure runs fn, timing it and sampling what it cost the database db
// (and the agq process pid, when not 0).
func (c *cluster) measure(ctx context.Context, db string, pid, n int, fn func() error) (measure, error) {
	before, err := c.sample(ctx, db, pid)
	if err != nil {
		return measure{}, err
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	waits := make(chan map[string]int, 1)
	go func() { waits <- c.waitEvents(sampleCtx, db) }()
	start := time.Now()
	err = fn()
	d := time.Since(start)
	stopSampling()
	after, serr := c.sample(ctx, db, pid)
	if err == nil {
		err = serr
	}
	return measure{jobs: n, d: d, cost: c.perJob(ctx, before, after, n), waits: topWaits(<-waits, 4)}, err
}

// topWaits formats the commonest wait events with their share of samples.
func topWaits(counts map[string]int, k int) string {
	type kv struct {
		k string
		n int
	}
	var all []kv
	total := 0
	for w, n := range counts {
		all = append(all, kv{w, n})
		total += n
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].k < all[j].k })
	var parts []string
	for i, e := range all {
		if i == k {
			break
		}
		parts = append(parts, e.k+" "+percent(e.n, total))
	}
	return strings.Join(parts, ", ")
}

// spread runs n calls of each over producers goroutines, each with its own
// state from newProducer, and returns the first error.
func spread[P any](n, producers int, newProducer func() P, each func(P) error, done func(P)) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range producers {
		p := newProducer()
		wg.Go(func() {
			defer done(p)
			for next.Add(1) <= int64(n) {
				if err := each(p); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
