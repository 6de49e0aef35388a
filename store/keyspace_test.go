package store_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

func TestKeyspaceJobsPages(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, store.Config{URL: agqtest.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	// '_' and '%' are LIKE wildcards: a prefix holding them must not
	// widen the listing.
	ids := []string{"a_1", "a_2", "ab1", "ab2", "b%1", "bx1", "c1"}
	var jobs []records.NewJob
	for _, id := range ids {
		jobs = append(jobs, records.NewJob{ID: id, Queue: "ready", Requires: []string{"sort"}, MaxAttempts: 3,
			RetryBackoffSeconds: 1, TimeoutSeconds: 60})
	}
	if _, _, err := st.JobsSubmit(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	w := records.Worker{ID: "w-1", Principal: "w", Hostname: "h", AgwVersion: "1", Capabilities: []string{"sort"},
		Metadata: json.RawMessage(`{}`), MaxConcurrentJobs: 2}
	if _, err := st.WorkerRegister(ctx, w, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	out, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "ready", Workers: []string{"w-1", "w-1"},
		Capabilities: []string{"sort"}, AckTimeout: time.Minute, Lease: time.Minute})
	claimed := out.Claimed
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claimed %d jobs: %v", len(claimed), err)
	}
	running := []string{claimed[0].Job.ID, claimed[1].Job.ID}
	slices.Sort(running)

	list := func(p records.KeyspaceJobsParams) []string {
		t.Helper()
		got, err := st.KeyspaceJobs(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range got {
			out = append(out, j.ID)
		}
		return out
	}
	tests := []struct {
		name string
		p    records.KeyspaceJobsParams
		want []string
	}{
		{"All", records.KeyspaceJobsParams{Limit: 100}, ids},
		{"PrefixWithUnderscore", records.KeyspaceJobsParams{IDPrefix: "a_", Limit: 100}, []string{"a_1", "a_2"}},
		{"PrefixWithPercent", records.KeyspaceJobsParams{IDPrefix: "b%", Limit: 100}, []string{"b%1"}},
		{"Offset", records.KeyspaceJobsParams{Offset: 2, Limit: 3}, []string{"ab1", "ab2", "b%1"}},
		{"After", records.KeyspaceJobsParams{After: "ab2", Offset: 99, Limit: 3}, []string{"b%1", "bx1", "c1"}},
		{"PrefixAfter", records.KeyspaceJobsParams{IDPrefix: "a", After: "a_2", Limit: 100}, []string{"ab1", "ab2"}},
		{"RunningOnly", records.KeyspaceJobsParams{RunningOnly: true, Limit: 100}, running},
		{"RunningOnlyOffset", records.KeyspaceJobsParams{RunningOnly: true, Offset: 1, Limit: 100}, running[1:]},
	}
	for _, tc := range tests {
		if got := list(tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}

	held, err := st.KeyspaceJobProbe(ctx, claimed[0].Job.ID)
	if err != nil || held.Holder != "w-1" || held.UntilDeadline == nil ||
		*held.UntilDeadline <= 50*time.Second || *held.UntilDeadline > time.Minute {
		t.Fatalf("probe of a running job: %+v, %v", held, err)
	}
	if _, err := st.KeyspaceJobProbe(ctx, "nope"); err != records.ErrNotFound {
		t.Fatalf("probe of a missing job: %v", err)
	}
	n, nHeld, err := st.KeyspaceJobCounts(ctx)
	if err != nil || n != int64(len(ids)) || nHeld != 2 {
		t.Fatalf("counts: %d jobs, %d held, %v", n, nHeld, err)
	}
	queues, err := st.KeyspaceQueues(ctx, "")
	if err != nil || !slices.Equal(queues, []string{"ready"}) {
		t.Fatalf("queues: %q, %v", queues, err)
	}
	if queues, _ := st.KeyspaceQueues(ctx, "r_"); len(queues) != 0 {
		t.Fatalf("queues with prefix r_: %q", queues)
	}
}
