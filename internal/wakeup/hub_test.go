package wakeup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agq/agq/records"
)

func received(w *Waiter) (records.ReadyNote, bool) {
	select {
	case n := <-w.C():
		return n, true
	case <-time.After(100 * time.Millisecond):
		return records.ReadyNote{}, false
	}
}

func TestWakeUps(t *testing.T) {
	t.Run("ANoteTheWaiterDidNotUseGoesToTheNext", func(t *testing.T) {
		h := New(Config{})
		w1 := h.NewWaiter("", []string{"q"}, nil, nil)
		w2 := h.NewWaiter("", []string{"q"}, nil, nil)
		h.deliver(records.ReadyNote{Queue: "q", N: 1}) // job A
		if _, ok := received(w1); !ok {
			t.Fatal("the oldest waiter was not woken")
		}
		h.deliver(records.ReadyNote{Queue: "q", N: 1}) // job B, while w1 claims A
		w1.Close()                                     // w1 took A and leaves
		if _, ok := received(w2); !ok {
			t.Fatal("job B's wake-up was lost with the waiter that took job A")
		}
		w2.Close()
	})
	t.Run("ANoteWakesThePopsOfItsOwnNamespaceOnly", func(t *testing.T) {
		h := New(Config{})
		inA := h.NewWorkerWaiter("a", "wa", []string{"q"}, nil, nil)
		inB := h.NewWaiter("b", []string{"q"}, nil, nil)
		inDefault := h.NewWaiter("", []string{"q"}, nil, nil)
		h.deliver(records.ReadyNote{Namespace: "a", Queue: "q", N: 5})
		if _, ok := received(inA); !ok {
			t.Fatal("a note of namespace a did not wake a's pop")
		}
		if n, ok := received(inB); ok {
			t.Fatalf("a note of namespace a woke b's pop: %+v", n)
		}
		if n, ok := received(inDefault); ok {
			t.Fatalf("a note of namespace a woke the default namespace's pop: %+v", n)
		}
		// A note naming no namespace is the default one's.
		h.deliver(records.ReadyNote{Queue: "q", N: 5})
		if _, ok := received(inDefault); !ok {
			t.Fatal("a note without a namespace did not wake the default namespace's pop")
		}
		if h.TakeWaiter("b", "q", nil) != nil {
			t.Fatal("namespace b's submission took a's waiter for a hand-off")
		}
		if h.TakeWaiter("a", "q", nil) != inA {
			t.Fatal("namespace a's submission did not take a's waiter")
		}
		inA.Untake()
		// A wake-up passed on by a waiter that leaves stays in its namespace.
		inB.Close(records.ReadyNote{Namespace: "b", Queue: "q", N: 1})
		if n, ok := received(inA); ok {
			t.Fatalf("b's unused note woke a's pop: %+v", n)
		}
		inA.Close()
		inDefault.Close()
	})
	t.Run("ANoteForAnotherQueueIsPassedOn", func(t *testing.T) {
		h := New(Config{})
		both := h.NewWaiter("", []string{"a", "b"}, nil, nil)
		onlyB := h.NewWaiter("", []string{"b"}, nil, nil)
		h.deliver(records.ReadyNote{Queue: "b", N: 1})
		note, ok := received(both)
		if !ok {
			t.Fatal("not woken")
		}
		both.Close(note) // it claimed from queue a instead
		if n, ok := received(onlyB); !ok || n.Queue != "b" {
			t.Fatalf("queue b's wake-up was not passed on: %+v %v", n, ok)
		}
		onlyB.Close()
	})
	t.Run("OnlyCapableWaitersAreWokenAndNoMoreThanN", func(t *testing.T) {
		h := New(Config{})
		cannot := h.NewWaiter("", []string{"q"}, []string{"grep"}, nil)
		can1 := h.NewWaiter("", []string{"q"}, []string{"sort", "uniq"}, nil)
		can2 := h.NewWaiter("", []string{"q"}, []string{"sort"}, nil)
		can3 := h.NewWaiter("", []string{"q"}, []string{"sort"}, nil)
		h.deliver(records.ReadyNote{Queue: "q", N: 2, Requires: []string{"sort"}})
		if _, ok := received(cannot); ok {
			t.Fatal("a waiter without the capability was woken")
		}
		_, ok1 := received(can1)
		_, ok2 := received(can2)
		_, ok3 := received(can3)
		if !ok1 || !ok2 || ok3 {
			t.Fatalf("woken: %v %v %v, want the two oldest capable waiters", ok1, ok2, ok3)
		}
	})
	t.Run("AFutureNoteWakesWhenDue", func(t *testing.T) {
		h := New(Config{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); h.timerLoop(ctx) }()
		defer func() { cancel(); <-done }()
		w := h.NewWaiter("", []string{"q"}, nil, nil)
		defer w.Close()
		at := time.Now().Add(150 * time.Millisecond)
		h.deliver(records.ReadyNote{Queue: "q", N: 1, At: at.UnixMilli() + 1})
		select {
		case n := <-w.C():
			if time.Now().Before(at) || !n.Timed {
				t.Fatalf("woken early or untimed: %+v", n)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the due note never woke the waiter")
		}
	})
	t.Run("FreedCountsCrossNodesInPiecesThatFit", func(t *testing.T) {
		// Node a finished jobs of many types; node b holds a pop that
		// type-77's cap held back, and hears of it through a's notices.
		a := New(Config{NodeID: "a"})
		var asked []records.Room
		b := New(Config{NodeID: "b"})
		Listen(b, RoomFreed, func(f records.Room) {
			asked = append(asked, f)
			if n := f.Types["type-77"]; n > 0 {
				b.Wake(records.ReadyNote{Queue: "held", N: n})
			}
		})
		w := b.NewWaiter("", []string{"held"}, nil, nil)
		defer w.Close()
		var freed records.Room
		for i := range 2000 {
			freed.Add("q", fmt.Sprintf("type-%d", i), 1)
		}
		freed.AddNamespace("team-a", 5) // a loosened MAXRUNNING
		payloads := a.eventPayloads(nil, nil, freed, nil, NoInterest)
		if len(payloads) < 2 {
			t.Fatalf("2,000 types went in %d notice(s)", len(payloads))
		}
		total := 0
		for _, p := range payloads {
			if len(p) > 8000 {
				t.Fatalf("a notice of %d bytes", len(p))
			}
			b.receiveEvent(p)
		}
		spaces := 0
		for _, f := range asked {
			for _, n := range f.Types {
				total += n
			}
			spaces += f.Namespaces["team-a"]
		}
		if total != 2000 || spaces != 5 {
			t.Fatalf("node b heard of %d of 2,000 jobs and room for %d of 5 in team-a", total, spaces)
		}
		if n, ok := received(w); !ok || n.Queue != "held" {
			t.Fatalf("the held pop was not woken: %+v %v", n, ok)
		}
	})
}

// A waiter taken for a hand-off hears no wake-up until it is handed its
// job or put back; a waiter that closed meanwhile is handed nothing, and a
// job handed before it closed stays for it to give back.
func TestHandOffs(t *testing.T) {
	t.Run("TakesTheLongestWaitingCapableIdleWorkerWaiter", func(t *testing.T) {
		h := New(Config{})
		plain := h.NewWaiter("", []string{"q"}, []string{"sort"}, nil)
		cannot := h.NewWorkerWaiter("", "w1", []string{"q"}, []string{"grep"}, nil)
		woken := h.NewWorkerWaiter("", "w2", []string{"q"}, []string{"sort"}, nil)
		idle := h.NewWorkerWaiter("", "w3", []string{"q"}, []string{"sort"}, nil)
		h.deliver(records.ReadyNote{Queue: "q", N: 2, Requires: []string{"sort"}}) // plain and woken
		if got := h.TakeWaiter("", "q", []string{"sort"}); got != idle {
			t.Fatalf("took %+v, want the idle worker's waiter", got)
		}
		if got := h.TakeWaiter("", "q", []string{"sort"}); got != nil {
			t.Fatalf("took %+v as well", got)
		}
		for _, w := range []*Waiter{plain, cannot, woken, idle} {
			w.Close()
		}
	})
	t.Run("ATakenWaiterIsHandedItsJob", func(t *testing.T) {
		h := New(Config{})
		w := h.NewWorkerWaiter("", "w", []string{"q"}, nil, nil)
		if h.TakeWaiter("", "q", nil) != w {
			t.Fatal("not taken")
		}
		h.deliver(records.ReadyNote{Queue: "q", N: 1})
		if n, ok := received(w); ok {
			t.Fatalf("a taken waiter heard %+v", n)
		}
		if !w.Hand(testJob) {
			t.Fatal("an open waiter refused its job")
		}
		if n, ok := received(w); !ok || n.N != 0 {
			t.Fatalf("the hand-off did not wake the waiter: %+v %v", n, ok)
		}
		if job, ok := w.Handed(); !ok || job != testJob {
			t.Fatalf("handed %v %v", job, ok)
		}
		if _, ok := w.Handed(); ok {
			t.Fatal("one job picked up twice")
		}
		w.Close()
	})
	t.Run("AWaiterPutBackGetsTheWakeUpThatPassedItBy", func(t *testing.T) {
		h := New(Config{})
		w := h.NewWorkerWaiter("", "w", []string{"a", "b"}, nil, nil)
		h.TakeWaiter("", "b", nil)
		h.deliver(records.ReadyNote{Queue: "a", N: 1})
		w.Untake()
		if n, ok := received(w); !ok || n.Queue != "a" || n.N != 1 {
			t.Fatalf("put back without the wake-up it missed: %+v %v", n, ok)
		}
		h.deliver(records.ReadyNote{Queue: "b", N: 1})
		if _, ok := received(w); !ok {
			t.Fatal("a waiter put back no longer hears its queues")
		}
		w.Close()
	})
	t.Run("AWakeUpAnotherTookIsNotKept", func(t *testing.T) {
		h := New(Config{})
		taken := h.NewWorkerWaiter("", "w1", []string{"q"}, nil, nil)
		idle := h.NewWorkerWaiter("", "w2", []string{"q"}, nil, nil)
		h.TakeWaiter("", "q", nil)
		h.deliver(records.ReadyNote{Queue: "q", N: 1})
		if _, ok := received(idle); !ok {
			t.Fatal("the idle waiter was not woken")
		}
		taken.Untake()
		if n, ok := received(taken); ok {
			t.Fatalf("put back with a wake-up another took: %+v", n)
		}
		taken.Close()
		idle.Close()
	})
	t.Run("AWakeUpMissedByAWaiterThatLeavesIsPassedOn", func(t *testing.T) {
		h := New(Config{})
		w := h.NewWorkerWaiter("", "w", []string{"q"}, nil, nil)
		h.TakeWaiter("", "q", nil)
		h.deliver(records.ReadyNote{Queue: "q", N: 1})
		next := h.NewWaiter("", []string{"q"}, nil, nil)
		w.Close()
		if _, ok := received(next); !ok {
			t.Fatal("the wake-up a leaving waiter missed was lost")
		}
		next.Close()
	})
	t.Run("AWakeUpMissedByAWaiterHandedAJobIsPassedOn", func(t *testing.T) {
		h := New(Config{})
		w := h.NewWorkerWaiter("", "w", []string{"q"}, nil, nil)
		h.TakeWaiter("", "q", nil)
		h.deliver(records.ReadyNote{Queue: "q", N: 1})
		next := h.NewWaiter("", []string{"q"}, nil, nil)
		w.Hand(testJob)
		if _, ok := received(next); !ok {
			t.Fatal("the wake-up a waiter handed a job missed was lost")
		}
		if len(h.byQueue[keyOf("", "q")]) != 1 {
			t.Fatal("a waiter handed a job still waits in its queue")
		}
		w.Close()
		next.Close()
	})
	t.Run("AClosedWaiterIsHandedNothing", func(t *testing.T) {
		h := New(Config{})
		w := h.NewWorkerWaiter("", "w", []string{"q"}, nil, nil)
		h.TakeWaiter("", "q", nil)
		w.Close()
		if w.Hand(testJob) {
			t.Fatal("a closed waiter took a job")
		}
		w.Untake()
		if len(h.byQueue[keyOf("", "q")]) != 0 {
			t.Fatal("a closed waiter was put back")
		}
	})
	t.Run("AJobHandedAsTheWaiterClosesStaysToBeGivenBack", func(t *testing.T) {
		h := New(Config{})
		w := h.NewWorkerWaiter("", "w", []string{"q"}, nil, nil)
		h.TakeWaiter("", "q", nil)
		w.Hand(testJob)
		next := h.NewWaiter("", []string{"q"}, nil, nil)
		w.Close() // the hand-off's signal is not a wake-up to pass on
		if n, ok := received(next); ok {
			t.Fatalf("the hand-off's signal was passed on: %+v", n)
		}
		if job, ok := w.Handed(); !ok || job != testJob {
			t.Fatalf("handed %v %v", job, ok)
		}
		next.Close()
	})
}

// testJob is the job tests hand to waiters.
var testJob = &records.Job{ID: "job"}
