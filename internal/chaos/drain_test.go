package chaos

import (
	"testing"
	"time"
)

func TestDrainWatch(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type step struct {
		at            float64
		left          int
		digest        string
		over, stalled bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"NothingLeftEndsAtOnce", []step{{0, 0, "", true, false}}},
		{"ALongQueueBeingWorkedOffIsWaitedForPastTheStuckTime", []step{
			{0, 900, "a", false, false},
			{20, 600, "b", false, false},
			{40, 300, "c", false, false},
			{60, 100, "d", false, false},
			{80, 0, "", true, false},
		}},
		{"JobsThatOnlyChangeStateStillMove", []step{
			{0, 3, "queued", false, false},
			{25, 3, "running", false, false},
			{50, 3, "retrying", false, false},
			{74, 3, "retrying", false, false},
		}},
		{"ADatabaseThatCannotBeReadMovesNothing", []step{
			{0, 5, "x", false, false},
			{10, -1, "", false, false},
			{29, -1, "", false, false},
			{30, -1, "", true, true},
		}},
		{"ADatabaseBackAfterAnOutageWithJobsMovedGoesOn", []step{
			{0, 5, "x", false, false},
			{10, -1, "", false, false},
			{35, 4, "y", false, false},
			{60, 4, "y", false, false},
		}},
		{"UnreadableFromTheStartEndsAfterTheStuckTime", []step{
			{0, -1, "", false, false},
			{30, -1, "", true, true},
		}},
		{"NothingMovingForTheStuckTimeEndsIt", []step{
			{0, 5, "x", false, false},
			{10, 2, "y", false, false},
			{39, 2, "y", false, false},
			{40, 2, "y", true, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newDrainWatch(t0, 30*time.Second)
			for _, s := range tc.steps {
				b := backlog{unfinished: s.left, digest: s.digest}
				if s.left < 0 {
					b = unknown
				}
				over, stalled := w.observe(at(s.at), b)
				if over != s.over || stalled != s.stalled {
					t.Fatalf("at %.0fs with %d left (%s): over=%v stalled=%v, want %v %v",
						s.at, s.left, s.digest, over, stalled, s.over, s.stalled)
				}
			}
		})
	}
}
