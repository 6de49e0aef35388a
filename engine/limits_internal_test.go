package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/agq/agq/records"
)

// A job that left running wakes the pops that a queue's or a type's limits
// held back, for an hour after a claim last saw those limits.
func TestRoomIsForQueuesWhoseLimitsHeldPops(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var l limitedPops
	l.sawQueue("", "capped", start)
	l.sawType("", "slow", "mixed", start)
	freed := records.Room{Queues: map[string]int{"capped": 2, "free": 5}, Types: map[string]int{"slow": 1, "fast": 3}}

	notes := l.room(freed, start.Add(time.Minute))
	want := map[string]int{"capped": 2, "mixed": 1}
	if len(notes) != len(want) {
		t.Fatalf("notes %+v, want one for each of %v", notes, want)
	}
	for _, n := range notes {
		if want[n.Queue] != n.N {
			t.Errorf("note %+v, want N %d", n, want[n.Queue])
		}
	}
	if notes := l.room(freed, start.Add(limitedMemory+time.Second)); len(notes) != 0 {
		t.Errorf("an hour after the limits were last seen: %+v", notes)
	}
}

// Limits seen in one namespace wake that namespace's pops only: room made
// by another namespace's queue of the same name wakes nobody.
func TestRoomIsForTheNamespaceWhoseLimitsHeldPops(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var l limitedPops
	l.sawQueue("a", "capped", start)
	l.sawType("a", "slow", "mixed", start)
	var freed records.Room
	freed.AddIn("b", "capped", "slow", 1)
	if notes := l.room(freed, start.Add(time.Minute)); len(notes) != 0 {
		t.Fatalf("room in namespace b woke %+v", notes)
	}
	freed = records.Room{}
	freed.AddIn("a", "capped", "slow", 1)
	notes := l.room(freed, start.Add(time.Minute))
	if len(notes) != 2 {
		t.Fatalf("room in namespace a woke %+v, want capped and mixed", notes)
	}
	for _, n := range notes {
		if n.Namespace != "a" {
			t.Errorf("note %+v, want namespace a", n)
		}
	}
}

// A namespace's cap wakes the pops it held when a job of any of its queues
// leaves running, and only then.
func TestRoomInANamespaceWakesThePopsItsCapHeld(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var l limitedPops
	l.sawNamespace("a", "held", start)
	var other records.Room
	other.AddIn("b", "held", "", 1)
	if notes := l.room(other, start.Add(time.Minute)); len(notes) != 0 {
		t.Fatalf("room in namespace b woke %+v", notes)
	}
	var freed records.Room
	freed.AddIn("a", "elsewhere", "", 2)
	notes := l.room(freed, start.Add(time.Minute))
	if len(notes) != 1 || notes[0].Namespace != "a" || notes[0].Queue != "held" || notes[0].N != 2 {
		t.Fatalf("room in a's queue elsewhere woke %+v, want 2 of a's queue held", notes)
	}
}

// Entries are forgotten once many are old, so that the memory of limits
// stays bounded.
func TestOldLimitsAreForgottenOnceMany(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var l limitedPops
	for i := range 1001 {
		l.sawQueue("", fmt.Sprint("q", i), start)
	}
	l.sawQueue("", "new", start.Add(2*limitedMemory))
	if _, ok := l.queues["q0"]; ok || len(l.queues) != 1 {
		t.Fatalf("%d queues remembered", len(l.queues))
	}
}
