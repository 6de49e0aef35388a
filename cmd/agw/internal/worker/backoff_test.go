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
