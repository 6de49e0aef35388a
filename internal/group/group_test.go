package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunner(t *testing.T) {
	t.Run("ALoneRequestRunsAtOnce", func(t *testing.T) {
		r := New(Config[int, int]{Run: func(_ context.Context, reqs []int) []int {
			out := make([]int, len(reqs))
			for i, v := range reqs {
				out[i] = v * 2
			}
			return out
		}})
		start := time.Now()
		got, err := r.Do(context.Background(), 21)
		if err != nil || got != 42 {
			t.Fatalf("Do = %d, %v", got, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("a lone request waited %v", d)
		}
	})

	t.Run("RequestsArrivingDuringAGroupFormTheNext", func(t *testing.T) {
		release := make(chan struct{})
		var sizes []int
		var mu sync.Mutex
		r := New(Config[int, int]{MaxSize: 5, Run: func(_ context.Context, reqs []int) []int {
			mu.Lock()
			sizes = append(sizes, len(reqs))
			first := len(sizes) == 1
			mu.Unlock()
			if first {
				<-release // the first group is in flight while the others arrive
			}
			return append([]int(nil), reqs...)
		}})
		var wg sync.WaitGroup
		wg.Go(func() { r.Do(context.Background(), 0) })
		for {
			mu.Lock()
			n := len(sizes)
			mu.Unlock()
			if n == 1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		var wrong atomic.Int32
		for i := 1; i <= 12; i++ {
			wg.Go(func() {
				if got, err := r.Do(context.Background(), i); err != nil || got != i {
					wrong.Add(1)
				}
			})
		}
		for {
			r.mu.Lock()
			n := len(r.pending)
			r.mu.Unlock()
			if n == 12 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(release)
		wg.Wait()
		if wrong.Load() > 0 {
			t.Fatalf("%d requests got another's result", wrong.Load())
		}
		if want := []int{1, 5, 5, 2}; !slices.Equal(sizes, want) {
			t.Fatalf("group sizes %v, want %v (bounded by MaxSize)", sizes, want)
		}
	})

	t.Run("AnAbandonedRequestIsHandedBack", func(t *testing.T) {
		release := make(chan struct{})
		abandoned := make(chan int, 1)
		r := New(Config[int, int]{
			Run:       func(_ context.Context, reqs []int) []int { <-release; return reqs },
			Abandoned: func(req, res int) { abandoned <- res },
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := r.Do(ctx, 7); done <- err }()
		time.Sleep(20 * time.Millisecond)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Do after cancel = %v", err)
		}
		close(release)
		select {
		case got := <-abandoned:
			if got != 7 {
				t.Fatalf("abandoned result %d", got)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the abandoned result was not handed back")
		}
		r.Wait()
	})

	t.Run("RequestsAddedTogetherShareGroupsAndAnswerInOrder", func(t *testing.T) {
		var mu sync.Mutex
		var sizes []int
		r := New(Config[int, int]{MaxSize: 4, Run: func(_ context.Context, reqs []int) []int {
			mu.Lock()
			sizes = append(sizes, len(reqs))
			mu.Unlock()
			out := make([]int, len(reqs))
			for i, v := range reqs {
				out[i] = -v
			}
			return out
		}})
		// One goroutine adds ten, then waits for each: no goroutine per
		// request, and the groups are full but for the first and last.
		var pending []Pending[int, int]
		for i := 1; i <= 10; i++ {
			pending = append(pending, r.Add(i))
		}
		for i, p := range pending {
			if got, err := p.Wait(context.Background()); err != nil || got != -(i+1) {
				t.Fatalf("request %d answered %d, %v", i+1, got, err)
			}
		}
		r.Wait()
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for _, n := range sizes {
			total += n
			if n > 4 {
				t.Fatalf("a group of %d (at most 4): %v", n, sizes)
			}
		}
		if total != 10 || len(sizes) > 4 {
			t.Fatalf("groups %v for ten requests added together", sizes)
		}
	})

	t.Run("APanicFailsItsGroupAndTheRunnerGoesOn", func(t *testing.T) {
		r := New(Config[int, int]{Run: func(_ context.Context, reqs []int) []int {
			if reqs[0] < 0 {
				panic("negative")
			}
			return reqs
		}})
		if _, err := r.Do(context.Background(), -1); !errors.Is(err, ErrPanicked) {
			t.Fatalf("Do of a panicking group = %v", err)
		}
		if got, err := r.Do(context.Background(), 3); err != nil || got != 3 {
			t.Fatalf("Do after a panic = %d, %v", got, err)
		}
	})
}

// A group is bounded by the weight of its requests, not their number.
func TestGroupsAreBoundedByWeight(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var groups [][]int
	r := New(Config[int, int]{MaxSize: 10, Weight: func(v int) int { return v }, Run: func(_ context.Context, reqs []int) []int {
		mu.Lock()
		groups = append(groups, slices.Clone(reqs))
		first := len(groups) == 1
		mu.Unlock()
		if first {
			<-release
		}
		return reqs
	}})
	var wg sync.WaitGroup
	wg.Go(func() { r.Do(context.Background(), 1) })
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(groups) == 1 })
	// Behind the group in flight: 4+4 fit in 10, the next 4 does not; a
	// request heavier than a whole group still goes, alone.
	for i, v := range []int{4, 4, 4, 12} {
		wg.Go(func() { r.Do(context.Background(), v) })
		waitFor(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.pending) == i+1 })
	}
	close(release)
	wg.Wait()
	var weights []int
	for _, g := range groups[1:] {
		sum := 0
		for _, v := range g {
			sum += v
		}
		weights = append(weights, sum)
	}
	if !slices.Equal(weights, []int{8, 4, 12}) {
		t.Fatalf("groups %v weigh %v, want 8, 4, 12 after the first", groups, weights)
	}
}

// A second group runs beside the first only while a whole group waits,
// and never more than Parallel at once.
func TestGroupsRunBesideEachOtherOnlyForABacklog(t *testing.T) {
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	r := New(Config[int, int]{MaxSize: 4, Parallel: 2, Run: func(_ context.Context, reqs []int) []int {
		n := inFlight.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		inFlight.Add(-1)
		return reqs
	}})
	var wg sync.WaitGroup
	wg.Go(func() { r.Do(context.Background(), 0) })
	waitFor(t, func() bool { return inFlight.Load() == 1 })
	// Three waiting: less than a group, no second one.
	for i := range 3 {
		wg.Go(func() { r.Do(context.Background(), i) })
	}
	waitFor(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.pending) == 3 })
	time.Sleep(20 * time.Millisecond)
	if n := inFlight.Load(); n != 1 {
		t.Fatalf("%d groups in flight for a backlog of 3 (a group is 4)", n)
	}
	// A whole group waits: a second starts; more never start a third.
	for i := range 9 {
		wg.Go(func() { r.Do(context.Background(), i) })
	}
	waitFor(t, func() bool { return inFlight.Load() == 2 })
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if m := most.Load(); m != 2 {
		t.Fatalf("at most %d groups were in flight, want 2", m)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("condition not reached within 5s")
		}
	}
}

// Each calls f once for every index, no more than parallel at once, and
// raises a panic of any in the caller after all returned.
func TestEach(t *testing.T) {
	var mu sync.Mutex
	var running, most int
	seen := make([]int, 50)
	Each(len(seen), 4, func(i int) {
		mu.Lock()
		running++
		most = max(most, running)
		seen[i]++
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
	})
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("index %d called %d times", i, n)
		}
	}
	if most > 4 || most < 2 {
		t.Fatalf("%d ran at once, want 2 to 4", most)
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "boom") {
			t.Fatalf("recovered %v, want the panic of index 7", p)
		}
	}()
	Each(10, 3, func(i int) {
		if i == 7 {
			panic("boom")
		}
	})
	t.Fatal("Each returned after a panic")
}
