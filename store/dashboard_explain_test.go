package store_test

import (
	"context"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// dashboardStatements are the dashboard's reads, planned on the same
// million jobs as the hot path's. The caps and page sizes are the
// dashboard's own (internal/dashboard).
func dashboardStatements() []explainCase {
	const countCap, page = 10000, 50
	return []explainCase{
		{
			// Six queues × five statuses, each count an index-only walk
			// stopping at the cap: about 40,000 entries here (failed jobs
			// are the largest set), whatever the number of completed jobs.
			name: "DashboardQueueCountsAreCappedWalksOfJobsQueueStatus",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.QueueSummaries(ctx, 500, countCap)
				return err
			},
			match: "CROSS JOIN unnest($2::text[]) AS st(status)", index: "jobs_queue_status", maxScanned: 60000,
		},
		{
			// A job page's children, and JOB.CHILDREN: the one job naming
			// it, not a walk of every job with an after, nor of jobs_pkey
			// in id order. (On the scratch database the job does not
			// exist.)
			name: "JobChildrenOfAJobWithFewUseJobsChildren",
			run: func(ctx context.Context, st *store.Store) error {
				st.JobChildren(ctx, "j00970021", "", 101)
				return nil
			},
			match: "WHERE after @> ARRAY[$2::text]", index: "jobs_children", maxScanned: 200,
		},
		{
			// A page of a parent of 10,000 children reads them all through
			// jobs_children and sorts them: the work of a page grows with
			// the children, not with the table. (Counted: the 10,000
			// children, half of them before the cursor, and the other half
			// read again from the fence to be sorted.)
			name: "JobChildrenOfAWideFanOutUseJobsChildren",
			run: func(ctx context.Context, st *store.Store) error {
				st.JobChildren(ctx, "j00800000", "j00800000-05000", 100)
				return nil
			},
			match: "WHERE after @> ARRAY[$2::text]", index: "jobs_children", maxScanned: 15500,
		},
		{
			name: "DashboardChartCountsTheLastHourFromJobsFinished",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.FinishedPerMinute(ctx, time.Now().Add(-time.Hour), countCap)
				return err
			},
			match: "generate_series(date_trunc", index: "jobs_finished", maxScanned: 2 * 61 * countCap,
		},
		{
			// Six weeks deep into a queue's failed jobs, a page costs a page.
			name: "DashboardQueuePageWalksJobsQueueStatusBackwards",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.QueueJobs(ctx, records.QueueJobsParams{Queue: "etl", Status: "failed", Before: "j00400000", Limit: page})
				return err
			},
			match: "ORDER BY id DESC LIMIT", index: "jobs_queue_status", maxScanned: 2 * page,
		},
		{
			name: "DashboardFailedPageUsesJobsFinished",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.FailedJobs(ctx, records.FailedJobsParams{BeforeFinished: time.Now().Add(-15 * 24 * time.Hour), BeforeID: "j00500000", Limit: page})
				return err
			},
			match: "ORDER BY finished_at DESC, id DESC", index: "jobs_finished", maxScanned: 2 * page,
		},
		{
			// All 10,000 running jobs are read and the newest kept: running
			// jobs are bounded by what the workers run at once.
			name: "DashboardRunningListUsesJobsRunning",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.RunningJobs(ctx, 20)
				return err
			},
			match: "ORDER BY started_at DESC", index: "jobs_running", maxScanned: 12000,
		},
		{
			name: "DashboardWorkersHeldJobsUseJobsRunning",
			run: func(ctx context.Context, st *store.Store) error {
				ids := make([]string, page)
				for i := range ids {
					ids[i] = "worker-" + string(rune('1'+i%9)) + "0"
				}
				_, err := st.WorkersHeldJobs(ctx, ids, 10)
				return err
			},
			match: "ORDER BY id LIMIT $2", index: "jobs_running", maxScanned: page * 40,
		},
	}
}
