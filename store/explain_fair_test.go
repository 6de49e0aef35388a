package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// A million jobs queued over 10,000 fair keys, placed as their submissions
// would place them (each key's n-th job at pass n × 1,000,000): a claim is
// one scan of jobs_waiting that stops after the jobs it takes, never a
// sort of the backlog; a submission finds its key's place with a probe of
// jobs_fair_tail; a claim's placement of due jobs is a probe of
// jobs_unplaced.
func TestFairShareStatementsStayIndexScansOverAMillionJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	full := connect(ctx, t, agqtest.NewDatabase(t))
	start := time.Now()
	for _, sql := range []string{fillFairBacklog, `ANALYZE`} {
		if _, err := full.Exec(ctx, sql); err != nil {
			t.Fatalf("preparing the data: %v\n%s", err, sql)
		}
	}
	t.Logf("filled and analyzed a million jobs over 10,000 keys in %v", time.Since(start).Round(time.Millisecond))
	rec := newRecordingStore(ctx, t)
	claim := func(ctx context.Context, st *store.Store) error {
		_, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "tenants", Workers: []string{"worker-1", "worker-2"},
			Capabilities: []string{}, AckTimeout: 30 * time.Second, Lease: 90 * time.Second})
		return err
	}
	checkPlans(ctx, t, full, rec, []explainCase{
		{name: "ClaimScansJobsWaitingInPassOrder", run: claim, match: "free AS (", index: "jobs_waiting", maxScanned: 45},
		{name: "PlacingDueJobsProbesJobsUnplaced", run: claim, match: "WITH due AS", index: "jobs_unplaced", maxScanned: 10},
		{
			name: "ASubmissionFindsItsKeysPlaceInJobsFairTail",
			run: func(ctx context.Context, st *store.Store) error {
				j := records.NewJob{ID: "new-1", Queue: "tenants", FairKey: "customer-42", FairWeight: 2, MaxAttempts: 3, TimeoutSeconds: 60}
				_, _, err := st.JobsSubmit(ctx, []records.NewJob{j})
				return err
			},
			match: "fair_key, namespace, n)", index: "jobs_fair_tail", maxScanned: 10,
		},
		{
			name: "AnIdleKeyStartsAtTheHeadOfJobsWaiting",
			run: func(ctx context.Context, st *store.Store) error {
				j := records.NewJob{ID: "new-2", Queue: "tenants", FairKey: "newcomer", MaxAttempts: 3, TimeoutSeconds: 60}
				_, _, err := st.JobsSubmit(ctx, []records.NewJob{j})
				return err
			},
			match: "fair_key, namespace, n)", index: "jobs_waiting", maxScanned: 10,
		},
	})
}

const fillFairBacklog = `
INSERT INTO queues (name, fair) VALUES ('tenants', true);
INSERT INTO workers (worker_id, principal, state, hostname, agw_version, capabilities, metadata)
SELECT 'worker-' || g, 'w', 'ACTIVE', 'host', '1.0.0', '{}', '{}' FROM generate_series(1, 2) g;
INSERT INTO jobs (id, queue, type, status, max_attempts, timeout_seconds, run_at, created_at, updated_at,
                  fair_key, fair_pass)
SELECT 'j' || lpad(g::text, 8, '0'), 'tenants', 'bench', 'queued', 3, 60,
       now() - interval '1 hour' + g * interval '3 milliseconds', now() - interval '1 hour', now(),
       'customer-' || g % 10000, (g / 10000 + 1)::bigint * 1000000
FROM generate_series(1, 1000000) g;
`
