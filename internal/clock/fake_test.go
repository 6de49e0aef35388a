package clock

import (
	"testing"
	"time"
)

var epoch = time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)

// received returns what c holds now, if anything.
func received(c <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-c:
		return t, true
	default:
		return time.Time{}, false
	}
}

func TestFakeNowMovesOnlyWithAdvance(t *testing.T) {
	f := NewFake(epoch)
	if got := f.Now(); !got.Equal(epoch) {
		t.Fatalf("Now %v, want %v", got, epoch)
	}
	f.Advance(90 * time.Second)
	if got, want := f.Now(), epoch.Add(90*time.Second); !got.Equal(want) {
		t.Fatalf("Now %v, want %v", got, want)
	}
}

func TestFakeAfterFiresOnceWhenDue(t *testing.T) {
	f := NewFake(epoch)
	c := f.After(time.Minute)
	f.Advance(59 * time.Second)
	if _, ok := received(c); ok {
		t.Fatal("fired a second early")
	}
	f.Advance(time.Second)
	if at, ok := received(c); !ok || !at.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("got %v %v, want a send of %v", at, ok, epoch.Add(time.Minute))
	}
	f.Advance(time.Hour)
	if _, ok := received(c); ok {
		t.Fatal("fired twice")
	}
	if n := f.Waiters(); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
	if _, ok := received(f.After(0)); !ok {
		t.Fatal("After(0) did not fire at once")
	}
}

func TestFakeTickerTicksAndDropsWhatIsNotRead(t *testing.T) {
	f := NewFake(epoch)
	tk := f.NewTicker(10 * time.Second)
	f.Advance(9 * time.Second)
	if _, ok := received(tk.C()); ok {
		t.Fatal("ticked early")
	}
	f.Advance(time.Second)
	if at, ok := received(tk.C()); !ok || !at.Equal(epoch.Add(10*time.Second)) {
		t.Fatalf("got %v %v, want a tick at +10s", at, ok)
	}
	// Three periods unread: one tick waits, the others are dropped.
	f.Advance(30 * time.Second)
	if at, ok := received(tk.C()); !ok || !at.Equal(epoch.Add(20*time.Second)) {
		t.Fatalf("got %v %v, want the tick at +20s", at, ok)
	}
	if _, ok := received(tk.C()); ok {
		t.Fatal("a missed tick was kept")
	}
	// The next tick keeps the phase.
	f.Advance(10 * time.Second)
	if at, ok := received(tk.C()); !ok || !at.Equal(epoch.Add(50*time.Second)) {
		t.Fatalf("got %v %v, want a tick at +50s", at, ok)
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := received(tk.C()); ok {
		t.Fatal("ticked after Stop")
	}
	if n := f.Waiters(); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
}

func TestFakeFiresInOrderOfDueTimes(t *testing.T) {
	f := NewFake(epoch)
	late, early := f.After(2*time.Second), f.After(time.Second)
	f.Advance(5 * time.Second)
	a, _ := received(early)
	b, _ := received(late)
	if !a.Equal(epoch.Add(time.Second)) || !b.Equal(epoch.Add(2*time.Second)) {
		t.Fatalf("fired at %v and %v", a, b)
	}
	if !f.Now().Equal(epoch.Add(5 * time.Second)) {
		t.Fatalf("Now %v after the advance", f.Now())
	}
}

func TestOrDefaultsToReal(t *testing.T) {
	if _, ok := Or(nil).(Real); !ok {
		t.Fatal("Or(nil) is not the real clock")
	}
	f := NewFake(epoch)
	if Or(f) != Clock(f) {
		t.Fatal("Or replaced a clock it was given")
	}
}
