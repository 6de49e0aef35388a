package keyspace

import "testing"

func TestKeyQueryNarrowsTheTables(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, typ string
		region       keyRegion
		wants        bool
		prefix       string
		runningOnly  bool
	}{
		{"worker:*:alive", "", regionJobs, false, "", false},
		{"worker:*:alive", "", regionWorkers, true, "", false},
		{"worker:w-1*", "", regionWorkers, true, "w-1", false},
		{"worker:w-1:stats", "", regionWorkers, true, "w-1", false},
		{"job:*", "", regionJobs, true, "", false},
		{"job:01J*", "", regionJobs, true, "01J", false},
		{"job:*:worker", "", regionJobs, true, "", true},
		{"job:*", "", regionQueues, false, "", false},
		{"*:alive", "", regionJobs, true, "alive", false},
		{"*:alive", "", regionQueues, true, "alive", false},
		{"*", "", regionJobs, true, "", false},
		{"*", "set", regionJobs, false, "", false},
		{"*", "set", regionCapabilities, true, "", false},
		{"*", "list", regionQueues, true, "", false},
		{"queue:em*", "", regionQueues, true, "em", false},
	}
	for _, tc := range tests {
		q, err := newKeyQuery(tc.pattern, tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		if got := q.wants(tc.region); got != tc.wants {
			t.Errorf("%q TYPE %q wants region %d: %v, want %v", tc.pattern, tc.typ, tc.region, got, tc.wants)
			continue
		}
		if !tc.wants {
			continue
		}
		if got := q.namePrefix(tc.region); got != tc.prefix {
			t.Errorf("%q: name prefix in region %d = %q, want %q", tc.pattern, tc.region, got, tc.prefix)
		}
		if tc.region == regionJobs && !q.possible[kindJob] != tc.runningOnly {
			t.Errorf("%q: running only = %v, want %v", tc.pattern, !q.possible[kindJob], tc.runningOnly)
		}
	}
}
