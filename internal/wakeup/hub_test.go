package wakeup

import (
	"context"
	"testing"
	"time"

	"github.com/agq/agq/store"
)

func received(w *Waiter) (store.ReadyNote, bool) {
	select {
	case n := <-w.C():
		return n, true
	case <-time.After(100 * time.Millisecond):
		return store.ReadyNote{}, false
	}
}

func TestWakeUps(t *testing.T) {
	t.Run("ANoteTheWaiterDidNotUseGoesToTheNext", func(t *testing.T) {
		h := New(Config{})
		w1 := h.NewWaiter([]string{"q"}, nil, nil)
		w2 := h.NewWaiter([]string{"q"}, nil, nil)
		h.deliver(store.ReadyNote{Queue: "q", N: 1}) // job A
		if _, ok := received(w1); !ok {
			t.Fatal("the oldest waiter was not woken")
		}
		h.deliver(store.ReadyNote{Queue: "q", N: 1}) // job B, while w1 claims A
		w1.Close()                                   // w1 took A and leaves
		if _, ok := received(w2); !ok {
			t.Fatal("job B's wake-up was lost with the waiter that took job A")
		}
		w2.Close()
	})
	t.Run("ANoteForAnotherQueueIsPassedOn", func(t *testing.T) {
		h := New(Config{})
		both := h.NewWaiter([]string{"a", "b"}, nil, nil)
		onlyB := h.NewWaiter([]string{"b"}, nil, nil)
		h.deliver(store.ReadyNote{Queue: "b", N: 1})
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
		cannot := h.NewWaiter([]string{"q"}, []string{"grep"}, nil)
		can1 := h.NewWaiter([]string{"q"}, []string{"sort", "uniq"}, nil)
		can2 := h.NewWaiter([]string{"q"}, []string{"sort"}, nil)
		can3 := h.NewWaiter([]string{"q"}, []string{"sort"}, nil)
		h.deliver(store.ReadyNote{Queue: "q", N: 2, Requires: []string{"sort"}})
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
		w := h.NewWaiter([]string{"q"}, nil, nil)
		defer w.Close()
		at := time.Now().Add(150 * time.Millisecond)
		h.deliver(store.ReadyNote{Queue: "q", N: 1, At: at.UnixMilli() + 1})
		select {
		case n := <-w.C():
			if time.Now().Before(at) || !n.Timed {
				t.Fatalf("woken early or untimed: %+v", n)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the due note never woke the waiter")
		}
	})
}
