package wakeup

import "testing"

func TestCarriesStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		pattern bool
		want    bool
	}{
		{"job.cancel", false, false},
		{"worker.w1.events", false, false},
		{"job.j1.logs", false, false},
		{"job.j1.status", false, true},
		{"queue.q.events", false, true},
		{"job.cancel", true, false}, // a pattern without a glob is one channel
		{"job.*.status", true, true},
		{"*", true, true},
		{"worker.*", true, true}, // a glob is not read for what it cannot match
		{"queue.q.events", true, true},
	}
	for _, tc := range tests {
		if got := CarriesStatus(tc.name, tc.pattern); got != tc.want {
			t.Errorf("CarriesStatus(%q, pattern %v) = %v, want %v", tc.name, tc.pattern, got, tc.want)
		}
	}
}

func TestInterestGrowsAndShrinks(t *testing.T) {
	t.Parallel()
	h := &Hub{}
	for _, step := range []struct {
		set                Interest
		wanted, wantStatus bool
	}{
		{NoInterest, false, false},
		{SomeInterest, true, false},
		{StatusInterest, true, true},
		{SomeInterest, true, false},
		{NoInterest, false, false},
	} {
		<-h.SetSubscribed(step.set)
		if h.Wanted() != step.wanted || h.WantedStatus() != step.wantStatus {
			t.Errorf("after %d: Wanted %v WantedStatus %v", step.set, h.Wanted(), h.WantedStatus())
		}
	}
	h.heardInterest(interestOf(event{Interest: true, Narrow: true}))
	if !h.Wanted() || h.WantedStatus() {
		t.Errorf("another node with job.cancel subscribers alone: Wanted %v WantedStatus %v", h.Wanted(), h.WantedStatus())
	}
	// A node that does not say Narrow is taken to follow everything.
	h.heardInterest(interestOf(event{Interest: true}))
	if !h.WantedStatus() {
		t.Error("another node's plain interest did not ask for status events")
	}
}
