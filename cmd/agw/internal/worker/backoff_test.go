package worker

import (
	"testing"
	"time"
)

func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	b := newBackoff(time.Second, time.Minute)
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i, w := range want {
		if got := b.Next(); got != w*time.Second {
			t.Fatalf("attempt %d: %v, want %v", i+1, got, w*time.Second)
		}
	}
	b.Reset()
	if got := b.Next(); got != time.Second {
		t.Fatalf("after a reset: %v", got)
	}
}

// The schedule never waits longer than the heartbeat interval the server
// named (read at each wait: a registration may change it).
func TestBackoffIsLimitedByTheHeartbeatInterval(t *testing.T) {
	t.Parallel()
	interval := 5 * time.Second
	b := newBackoff(time.Second, time.Minute)
	b.limit = func() time.Duration { return interval }
	want := []time.Duration{1, 2, 4, 5, 5}
	for i, w := range want {
		if got := b.Next(); got != w*time.Second {
			t.Fatalf("attempt %d: %v, want %v", i+1, got, w*time.Second)
		}
	}
	interval = 30 * time.Second
	if got := b.Next(); got != 30*time.Second {
		t.Fatalf("after the interval grew to 30s: %v, want 30s", got)
	}
	interval = 0 // none named: the schedule alone
	if got := b.Next(); got != time.Minute {
		t.Fatalf("without an interval: %v, want 1m", got)
	}
}
