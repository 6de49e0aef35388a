package service

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// recorder notes the starts and stops of the fake services of a test.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) note(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// fakeService runs one goroutine until stopped, unless told to fail.
type fakeService struct {
	name    string
	rec     *recorder
	failErr error
	base    BaseStartStop
}

func (s *fakeService) Start(ctx context.Context) error {
	if s.failErr != nil {
		s.rec.note("fail " + s.name)
		return s.failErr
	}
	s.rec.note("start " + s.name)
	s.base.StartFuncs(ctx, func(ctx context.Context) { <-ctx.Done() })
	return nil
}

func (s *fakeService) Stop() {
	s.base.Stop()
	s.rec.note("stop " + s.name)
}

func services(rec *recorder, names ...string) []Service {
	var list []Service
	for _, n := range names {
		list = append(list, &fakeService{name: n, rec: rec})
	}
	return list
}

func TestStartAllStartsInOrderAndStopAllStopsInReverse(t *testing.T) {
	defer goleak.VerifyNone(t)
	rec := &recorder{}
	list := services(rec, "a", "b", "c")
	if err := StartAll(context.Background(), list...); err != nil {
		t.Fatal(err)
	}
	StopAll(list...)
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if got := rec.got(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestStartAllStopsWhatItStartedWhenOneFails(t *testing.T) {
	defer goleak.VerifyNone(t)
	rec := &recorder{}
	boom := errors.New("boom")
	list := services(rec, "a", "b")
	list = append(list, &fakeService{name: "c", rec: rec, failErr: boom}, &fakeService{name: "d", rec: rec})
	if err := StartAll(context.Background(), list...); !errors.Is(err, boom) {
		t.Fatalf("StartAll returned %v, want %v", err, boom)
	}
	want := []string{"start a", "start b", "fail c", "stop b", "stop a"}
	if got := rec.got(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestStopAllParallelStopsEveryServiceAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	// Each stop waits for all to have begun: stopped one after the
	// other, they would never finish.
	const n = 3
	var begun sync.WaitGroup
	begun.Add(n)
	var list []Service
	var stopped []*blockingStop
	for range n {
		s := &blockingStop{begun: &begun}
		list = append(list, s)
		stopped = append(stopped, s)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StopAllParallel(list...)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("StopAllParallel stopped the services one at a time")
	}
	for i, s := range stopped {
		if !s.stopped {
			t.Errorf("service %d was not stopped", i)
		}
	}
}

type blockingStop struct {
	begun   *sync.WaitGroup
	stopped bool
}

func (s *blockingStop) Start(context.Context) error { return nil }

func (s *blockingStop) Stop() {
	s.begun.Done()
	s.begun.Wait()
	s.stopped = true
}

func TestBaseStartStopWaitsForItsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	var b BaseStartStop
	b.Stop() // before any start: nothing to do
	ended := make(chan string, 4)
	for range 2 { // started twice: the first run ends before the second begins
		b.StartFuncs(context.Background(),
			func(ctx context.Context) { <-ctx.Done(); ended <- "one" },
			func(ctx context.Context) { <-ctx.Done(); ended <- "two" })
	}
	if len(ended) != 2 {
		t.Fatalf("a second start left %d goroutines of the first running", 2-len(ended))
	}
	b.Stop()
	b.Stop()
	if len(ended) != 4 {
		t.Fatalf("Stop returned with %d goroutines running", 4-len(ended))
	}
}

func TestBaseStartStopEndsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	var b BaseStartStop
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.StartFuncs(ctx, func(ctx context.Context) { <-ctx.Done(); close(done) })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the run outlived its context")
	}
	b.Stop()
}
