package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// TestHotStatementsUseTheirIndexes plans the statements agq runs on every
// pop, push, heartbeat and watchdog sweep against a million jobs laid out
// as a month of steady work leaves them, and checks that each is served by
// the index its comment in store names, never scans jobs sequentially, and
// visits rows in proportion to its work rather than to the table.
//
// The statements are not copied here: each store function runs once
// against an empty scratch database through a pool that records what it
// sends, and the recorded text and arguments are explained against the
// full database inside a transaction that is rolled back. pgx prepares and
// caches statements, and after five executions PostgreSQL may run one
// generic plan instead of planning for each execution's arguments, so a
// cached statement is checked in all three forms (see planMode); one sent
// as an unnamed statement (QueryExecModeExec and the like) is always
// planned for its arguments, and only that plan is checked.
func TestHotStatementsUseTheirIndexes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	full := connect(ctx, t, agqtest.NewDatabase(t))
	start := time.Now()
	for _, sql := range []string{fillMonthOfJobs, `ANALYZE`, sinceLastAnalyze} {
		if _, err := full.Exec(ctx, sql); err != nil {
			t.Fatalf("preparing the data: %v\n%s", err, sql)
		}
	}
	t.Logf("filled and analyzed a million jobs in %v", time.Since(start).Round(time.Millisecond))
	rec := newRecordingStore(ctx, t)

	everything := []string{"sort", "grep", "echo"}
	tests := []explainCase{
		{
			name: "ClaimUsesJobsWaiting",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "ready", Workers: []string{"worker-1", "worker-3"},
					Capabilities: everything, AckTimeout: 30 * time.Second, Lease: 90 * time.Second})
				return err
			},
			// No limits: the claim reads the queue's row twice (its limits,
			// its pause), six queues read whole while the table is that
			// small, and job_types once.
			match: "free AS (", index: "jobs_waiting", maxScanned: 45,
		},
		{
			// Before each claim, the due jobs without a place get one,
			// found in jobs_unplaced without reading the scheduled jobs
			// not yet due: here the retries and scheduled jobs that came
			// due since the fill (hundreds), each placed after its key's.
			name: "PlacingDueJobsUsesJobsUnplaced",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "ready", Workers: []string{"worker-1"},
					Capabilities: everything, AckTimeout: 30 * time.Second, Lease: 90 * time.Second})
				return err
			},
			match: "WITH due AS", index: "jobs_unplaced", maxScanned: 3000,
		},
		{
			// Two jobs in three need a tool this worker lacks: the scan
			// filters them out on its way down the index.
			name: "ClaimByANarrowWorkerUsesJobsWaiting",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "email", Workers: []string{"worker-2"},
					Capabilities: []string{"echo"}, AckTimeout: 30 * time.Second, Lease: 90 * time.Second})
				return err
			},
			match: "free AS (", index: "jobs_waiting", maxScanned: 50,
		},
		{
			// LLEN and every LPUSH count the claimable jobs: the work grows
			// with the queue's backlog (about 7,000 jobs here).
			name: "QueueDepthUsesAWaitingIndex",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.QueueDepth(ctx, "ready")
				return err
			},
			// Both partial-or-composite indexes give the waiting rows of one
			// queue; the planner picks by statistics.
			match: "SELECT count(*) FROM jobs", index: "jobs_waiting|jobs_queue_status", maxScanned: 10000,
		},
		{
			// 2,000 overdue deliveries, a batch of 500: found among the
			// 10,000 running jobs of jobs_running, then each updated
			// through its key.
			name: "UnackedSweepUsesJobsRunning",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.JobsRequeueUnacked(ctx, 500)
				return err
			},
			match: "ack_deadline < now()", index: "jobs_running", maxScanned: 12000,
		},
		{
			// About 2,000 expired leases among 10,000 running jobs, a
			// batch of 500.
			name: "LeaseRecoveryUsesJobsRunning",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.JobsRecoverExpiredLeases(ctx, 500)
				return err
			},
			match: "lease_expires_at < now()", index: "jobs_running", maxScanned: 12000,
		},
		{
			name: "TimeoutSweepUsesJobsRunning",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.JobsFailTimedOut(ctx, 0, 500)
				return err
			},
			match: "deadline_at < now()", index: "jobs_running", maxScanned: 12000,
		},
		{
			// A group holding a failure locks the failing jobs for the
			// retry policy's decision, through their key.
			name: "AFailedReportLocksItsJobThroughThePrimaryKey",
			run: func(ctx context.Context, st *store.Store) error {
				// The job is on the full database only: the report is
				// refused on the scratch one, after its statements ran.
				st.JobsFinish(ctx, []records.Report{{ID: "j00999999", WorkerID: "worker-1",
					Status: records.StatusFailed, Error: "boom", Retryable: true}})
				return nil
			},
			match: "j.namespace = f.ns AND j.id = f.id", index: "jobs_pkey", maxScanned: 10,
		},
		{
			// A group of completions updates each job through its key,
			// never through its worker's running jobs (jobs_running).
			name: "ACompletionGroupUpdatesThroughThePrimaryKey",
			run: func(ctx context.Context, st *store.Store) error {
				st.JobsFinish(ctx, []records.Report{
					{ID: "j00999999", WorkerID: "worker-1", Status: records.StatusCompleted},
					{ID: "j00999998", WorkerID: "worker-2", Status: records.StatusCompleted}})
				return nil
			},
			match: "DISTINCT ON (ns, id)", index: "jobs_pkey", maxScanned: 10,
		},
		{
			// A group of acknowledgements and progress updates each job
			// through its key.
			name: "AnAcknowledgementGroupUpdatesThroughThePrimaryKey",
			run: func(ctx context.Context, st *store.Store) error {
				st.JobsAck(ctx, []records.Report{
					{ID: "j00999999", WorkerID: "worker-1", Raw: []byte(`{"progress_percent":40}`)},
					{ID: "j00999999", WorkerID: "worker-1", Status: records.StatusRunning},
					{ID: "j00999998", WorkerID: "worker-2", Status: records.StatusRunning}})
				return nil
			},
			match: "PARTITION BY ns, id, worker", index: "jobs_pkey", maxScanned: 10,
		},
		{
			// A group of step completions locks each job through its key
			// and finds each step through job_steps' key.
			name: "AStepCompletionGroupUsesThePrimaryKeys",
			run: func(ctx context.Context, st *store.Store) error {
				st.StepsComplete(ctx, []store.StepCompletion{
					{StepParams: records.StepParams{JobID: "j00999999", StepID: "s1", WorkerID: "worker-1"}, Output: []byte(`1`)},
					{StepParams: records.StepParams{JobID: "j00999998", StepID: "s1", WorkerID: "worker-2"}}})
				return nil
			},
			match: "ORDER BY namespace, job_id, step_id, ord", index: "jobs_pkey", maxScanned: 10,
		},
		{
			// A group of step begins locks each job through its key and
			// finds each step, and its job's last, through job_steps'
			// keys.
			name: "AStepBeginGroupUsesThePrimaryKeys",
			run: func(ctx context.Context, st *store.Store) error {
				st.StepsBegin(ctx, []records.StepBeginParams{
					{StepParams: records.StepParams{JobID: "j00999999", StepID: "s1", WorkerID: "worker-1"}, Input: []byte(`1`)},
					{StepParams: records.StepParams{JobID: "j00999998", StepID: "s1", WorkerID: "worker-2"}}})
				return nil
			},
			match: "AS u(namespace, job_id, step_id, worker, delivery, input, max_attempts", index: "jobs_pkey", maxScanned: 10,
		},
		{
			// Found by its key, or among the worker's running jobs (about
			// 33 here): either way, no more than one worker holds.
			name: "AReleaseUsesThePrimaryKeyOrJobsRunning",
			run: func(ctx context.Context, st *store.Store) error {
				token := "00000000-0000-4000-8000-000000000000"
				_, err := st.JobRelease(ctx, records.Job{ID: "j00999999", Delivery: &token}, "worker-1")
				return err
			},
			match: "ELSE 'queued' END", index: "jobs_pkey|jobs_running", maxScanned: 100,
		},
		{
			name: "HeartbeatLeaseExtensionUsesJobsRunning",
			run: func(ctx context.Context, st *store.Store) error {
				w := records.Worker{ID: "worker-17", Principal: "w", Hostname: "h", AgwVersion: "1",
					Capabilities: everything, Metadata: json.RawMessage(`{}`), MaxConcurrentJobs: 1}
				if _, err := st.WorkerRegister(ctx, w, 90*time.Second, nil); err != nil {
					return err
				}
				_, err := st.WorkerHeartbeat(ctx, w.ID, json.RawMessage(`{"load":0.5}`), 90*time.Second)
				return err
			},
			// Each held job read twice: locked through jobs_running
			// (skipping those another transaction holds), then updated
			// through its key.
			match: "RETURNING j.id, j.cancel_requested", index: "jobs_running", maxScanned: 120,
		},
		{
			// Every second on the leader: the principals gone long enough
			// through worker_connections_gone (80 rows); their other rows
			// and their workers are read by key or, as here, the few pages
			// of a row per live worker and node (900) read whole.
			name: "GoneWorkersUseWorkerConnectionsGone",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.WorkersMarkGone(ctx, store.GoneParams{After: 10 * time.Second, Grace: 10 * time.Second,
					NodeSilence: 5 * time.Second, Limit: 500})
				return err
			},
			match: "lost AS (", index: "worker_connections_gone", maxScanned: 3000,
		},
		{
			// A queue holding one job in seven: walking the primary key in
			// id order and filtering fills a page soonest.
			name: "JobListOfABusyQueueWalksThePrimaryKey",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.JobList(ctx, records.JobListParams{Queue: "etl", Limit: 100})
				return err
			},
			match: "ORDER BY id LIMIT", index: "jobs_pkey", maxScanned: 2000,
		},
		{
			// A queue holding one job in a thousand.
			name: "JobListOfARareQueueUsesJobsQueueStatus",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.JobList(ctx, records.JobListParams{Queue: "audit", Limit: 100})
				return err
			},
			match: "ORDER BY id LIMIT", index: "jobs_queue_status", maxScanned: 2000,
		},
		{
			name: "JobListByQueueAndStatusUsesJobsQueueStatus",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.JobList(ctx, records.JobListParams{Queue: "etl", Status: "failed", Cursor: "j00100000", Limit: 100})
				return err
			},
			match: "ORDER BY id LIMIT", index: "jobs_queue_status", maxScanned: 200,
		},
		{
			// The id exists: the COPY fails, and the statement answers
			// the existing job. (The store records on a scratch database,
			// where the first submission makes the id exist.) Whether
			// the job's queue is fair reads the six queues whole twice
			// while the table is that small.
			name: "ResubmittingAnIdUsesThePrimaryKey",
			run: func(ctx context.Context, st *store.Store) error {
				return submitTwice(ctx, st, submission("j00500000", ""), submission("j00500000", ""))
			},
			match: "INSERT INTO jobs", index: "jobs_pkey", maxScanned: 26,
		},
		{
			// An unfinished job holds the unique key (the six queues
			// read whole twice, as above).
			name: "SubmittingAHeldUniqueKeyUsesJobsUniqueKey",
			run: func(ctx context.Context, st *store.Store) error {
				return submitTwice(ctx, st, submission("old-job-1", "uk-999993"), submission("new-job-1", "uk-999993"))
			},
			match: "INSERT INTO jobs", index: "jobs_unique_key", maxScanned: 26,
		},
		{
			// A namespace with MAXUNFINISHED counts its unfinished jobs
			// (31,000 here, under a quota of 100,000) on each submission:
			// its waiting, running, and pending or awaiting jobs, each
			// through the partial index that holds them, never its
			// finished ones.
			name: "CountingUnfinishedJobsUsesTheirPartialIndexes",
			run: func(ctx context.Context, st *store.Store) error {
				most := int64(100000)
				ns, err := st.NamespaceConfigure(ctx, records.DefaultNamespace, records.NamespaceChange{MaxUnfinished: &most})
				if err != nil {
					return err
				}
				_, _, err = st.JobsSubmitCounted(ctx, ns, []records.NewJob{submission("counted-1", "")}, false)
				return err
			},
			match: "UNION ALL", index: "jobs_running", maxScanned: 31000,
		},
		{
			// A job offered to a waiting worker: the worker's row by its
			// key, and a bounded look at the queue's first waiting jobs
			// (ready holds thousands: 64 are read), and whether its
			// queue is fair (the six queues read whole twice).
			name: "HandOffUsesJobsWaiting",
			run: func(ctx context.Context, st *store.Store) error {
				j := submission("handed-1", "")
				j.Hand = &records.Handoff{Worker: "worker-1", AckTimeout: 30 * time.Second, Lease: 90 * time.Second}
				_, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{j})
				return errs[0]
			},
			match: "h AS (", index: "jobs_waiting", maxScanned: 102,
		},
		// The cases below limit type-1 (a quarter of the jobs): they come
		// after every other claim.
		{
			// Under a type limit, the claim's locking statement reads the
			// queue's next jobs for their types, and counts the type's
			// running jobs among all running ones (10,000 here).
			name: "ClaimLocksUnderATypeLimitUseJobsWaiting",
			run: func(ctx context.Context, st *store.Store) error {
				// The statement is explained on the full database.
				if _, err := full.Exec(ctx, `INSERT INTO job_types (name, max_running) VALUES ('type-1', 5000)`); err != nil {
					return err
				}
				max := 5000
				if _, err := st.TypeConfigure(ctx, "type-1", records.LimitsChange{MaxRunning: &max}); err != nil {
					return err
				}
				_, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "ready", Workers: []string{"worker-1", "worker-3"},
					Capabilities: everything, AckTimeout: 30 * time.Second, Lease: 90 * time.Second})
				return err
			},
			match: "WITH q AS", index: "jobs_waiting", maxScanned: 11000,
		},
		{
			// Explained alone, the claim holds no type's lock: it skips
			// type-1's jobs on its way down the index.
			name: "ClaimUnderATypeLimitUsesJobsWaiting",
			run: func(ctx context.Context, st *store.Store) error {
				_, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "ready", Workers: []string{"worker-1", "worker-3"},
					Capabilities: everything, AckTimeout: 30 * time.Second, Lease: 90 * time.Second})
				return err
			},
			match: "qlocked AS (", index: "jobs_waiting", maxScanned: 100,
		},
		{
			// Under the namespace's MAXRUNNING, the claim counts the
			// namespace's running jobs among all running ones (10,000
			// here, through jobs_running), never through its finished
			// ones. The cap is set last: the claims above run without it.
			name: "ClaimUnderANamespaceCapCountsThroughJobsRunning",
			run: func(ctx context.Context, st *store.Store) error {
				// As claimLocks leaves it having locked the namespace's
				// row, for the statements explained after this one too.
				if _, err := full.Exec(ctx, `UPDATE namespaces SET max_running = 50000 WHERE name = 'default';
					SELECT set_config('agq.claim_namespace', '1', false)`); err != nil {
					return err
				}
				most := 50000
				if _, err := st.NamespaceConfigure(ctx, records.DefaultNamespace, records.NamespaceChange{MaxRunning: &most}); err != nil {
					return err
				}
				_, err := st.JobsClaim(ctx, store.JobsClaimParams{Queue: "ready", Workers: []string{"worker-1", "worker-3"},
					Capabilities: everything, AckTimeout: 30 * time.Second, Lease: 90 * time.Second})
				return err
			},
			match: "nsroom AS (", index: "jobs_running", maxScanned: 11000,
		},
	}
	tests = append(tests, dependencyStatements()...)
	tests = append(tests, dashboardStatements()...)
	checkPlans(ctx, t, full, rec, tests)
}

// checkPlans captures each case's statement through rec and explains it
// against full, in every plan mode it may run in.
func checkPlans(ctx context.Context, t *testing.T, full *pgx.Conn, rec *recordingStore, tests []explainCase) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stmt := rec.capture(ctx, t, tt.run, tt.match)
			modes := []planMode{customPlan, cachedPlan, genericPlan}
			if stmt.unnamed {
				modes = modes[:1]
			}
			for _, mode := range modes {
				p := explain(ctx, t, full, stmt, mode)
				scanned := p.Plan.scanned()
				t.Logf("%s plan: planning %.3f ms, execution %.3f ms, %.0f rows scanned\n%s",
					mode, p.PlanningTime, p.ExecutionTime, scanned, p.Plan.render())
				if !p.Plan.usesIndex(tt.index) {
					t.Errorf("%s plan does not use %s", mode, tt.index)
				}
				if p.Plan.seqScans("jobs") {
					t.Errorf("%s plan scans jobs sequentially", mode)
				}
				if scanned > tt.maxScanned {
					t.Errorf("%s plan scans %.0f rows, more than %.0f", mode, scanned, tt.maxScanned)
				}
			}
		})
	}
}

// explainCase is one statement TestHotStatementsUseTheirIndexes plans.
type explainCase struct {
	name  string
	run   func(context.Context, *store.Store) error
	match string // a fragment naming the statement among those run issues
	index string // the index its plan must use
	// maxScanned bounds the rows the plan's scans produce or filter
	// out, over all loops: the work it should do, with some slack.
	maxScanned float64
}

// fillMonthOfJobs writes a million jobs as a month of steady work leaves
// them: ids in time order (like UUIDv7), 97% finished with finished_at
// spread over 30 days (5% of those failed, 2% cancelled), and the newest 3%
// still in flight: 2% waiting (queued, scheduled, retrying with half due)
// and 1% running on 300 workers, a tenth of them not yet acknowledged. 2,000 workers registered over the
// month (below about a thousand, PostgreSQL rightly reads the whole table once rather than probe its
// index for each named worker). Queues are uneven: ready carries three
// jobs in seven. A third of the jobs need nothing, a third sort, a third
// sort and grep.
const fillMonthOfJobs = `
INSERT INTO queues (name) VALUES ('ready'), ('email'), ('reports'), ('video'), ('etl'), ('audit');

INSERT INTO workers (worker_id, principal, state, hostname, agw_version, capabilities, metadata, last_heartbeat_at)
SELECT 'worker-' || g, 'w', CASE WHEN g <= 300 THEN 'ACTIVE' WHEN g % 2 = 0 THEN 'DEAD' ELSE 'UNREGISTERED' END,
       'host-' || g, '1.0.0', CASE WHEN g = 2 THEN ARRAY['echo'] ELSE ARRAY['sort', 'grep', 'echo'] END, '{}',
       now() - (g % 30) * interval '1 second'
FROM generate_series(1, 2000) g;

INSERT INTO jobs (id, queue, type, requires, payload, priority, status, attempt, max_attempts, timeout_seconds,
                  run_at, unique_key, worker_id, ack_deadline, lease_expires_at, deadline_at, result, errors,
                  created_at, started_at, finished_at, updated_at, fair_key, fair_pass)
SELECT 'j' || lpad(g::text, 8, '0'),
       CASE WHEN g % 1000 = 17 THEN 'audit'
            ELSE (ARRAY['ready', 'ready', 'ready', 'email', 'reports', 'video', 'etl'])[1 + (g / 3) % 7] END,
       'type-' || g % 4,
       CASE (g / 5) % 3 WHEN 0 THEN '{}'::text[] WHEN 1 THEN ARRAY['sort'] ELSE ARRAY['grep', 'sort'] END,
       jsonb_build_object('n', g, 'input', '/data/in/' || g || '.csv'),
       CASE WHEN g % 13 = 0 THEN 10 WHEN g % 5 = 0 THEN 5 ELSE 0 END,
       status,
       CASE status WHEN 'failed' THEN 3 WHEN 'running' THEN 1 WHEN 'retrying' THEN 1 ELSE 0 END,
       3, 3600,
       CASE status WHEN 'scheduled' THEN now() + (g % 3600) * interval '1 second'
                   WHEN 'retrying' THEN now() + (g % 600 - 300) * interval '1 second'
                   ELSE created END,
       CASE WHEN g % 10 = 3 THEN 'uk-' || g END,
       CASE status WHEN 'running' THEN 'worker-' || (1 + (g / 3) % 300) END,
       CASE WHEN status = 'running' AND (g / 3) % 10 = 0 THEN now() + interval '10 minutes' END,
       CASE status WHEN 'running' THEN now() + interval '10 minutes' + (g % 90) * interval '1 second' END,
       CASE status WHEN 'running' THEN now() + interval '1 hour' - (g % 600) * interval '1 second' END,
       CASE status WHEN 'completed' THEN '{"status": "completed", "task_results": [{"exit_code": 0}]}'::jsonb END,
       CASE status WHEN 'failed' THEN '[{"attempt": 3, "error": "exit status 1"}]'::jsonb ELSE '[]' END,
       created,
       CASE WHEN status IN ('running', 'completed', 'failed') THEN created + interval '1 second' END,
       CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN created + (1 + g % 120) * interval '1 second' END,
       created,
       -- A quarter of the jobs name one of a thousand tenants.
       CASE WHEN g % 4 = 0 THEN 'tenant-' || g % 1000 ELSE '' END,
       -- Waiting jobs due now are placed, in submission order.
       CASE WHEN status = 'queued' OR status = 'retrying' AND g % 600 < 300 THEN g::bigint * 1000 END
FROM (
    SELECT g,
           now() - interval '30 days' + g * interval '2.592 seconds' AS created,
           CASE WHEN g <= 970000 THEN
                    CASE WHEN g % 100 = 7 THEN 'failed' WHEN g % 50 = 11 THEN 'cancelled' ELSE 'completed' END
                WHEN g % 3 = 0 THEN 'running'
                ELSE (ARRAY['queued', 'queued', 'queued', 'queued', 'queued', 'queued', 'queued',
                            'scheduled', 'retrying', 'retrying'])[1 + g % 10]
           END AS status
    FROM generate_series(1, 1000000) g
) s;

-- Graphs among the jobs in flight: a thousand pending children, each after
-- twenty of them, and marks of children not yet looked at.
INSERT INTO job_waits (parent_id, child_id)
SELECT 'j' || lpad((970001 + (c * 20 + k) % 30000)::text, 8, '0'), 'child-' || c
FROM generate_series(1, 1000) c, generate_series(0, 19) k;
INSERT INTO dependency_checks (job_id) SELECT 'child-' || (1 + g % 1000) FROM generate_series(1, 20000) g;
INSERT INTO jobs (id, queue, status, max_attempts, timeout_seconds, after)
SELECT 'child-' || c, 'ready', 'pending', 3, 3600,
       array_agg('j' || lpad((970001 + (c * 20 + k) % 30000)::text, 8, '0') ORDER BY k)
FROM generate_series(1, 1000) c, generate_series(0, 19) k GROUP BY c;
-- Three nodes up, holding the connections of the 300 live workers: the
-- first 20 lost them all 30 s ago, the next 20 on one node only.
INSERT INTO agq_nodes (node_id, started_at, seen_at)
SELECT 'node-' || n, now() - interval '1 day', now() + interval '1 day' FROM generate_series(1, 3) n;
INSERT INTO worker_connections (principal, node_id, gone_at)
SELECT 'w' || g, 'node-' || n, CASE WHEN g <= 20 OR (g <= 40 AND n = 1) THEN now() - interval '30 seconds' END
FROM generate_series(1, 300) g, generate_series(1, 3) n;
UPDATE workers SET principal = 'w' || substr(worker_id, 8) WHERE state = 'ACTIVE';
-- A fan-out that ran a week ago: one parent, 10,000 children. The parent
-- is the oldest finished job, the first retention looks at.
UPDATE jobs SET has_children = true, finished_at = now() - interval '31 days' WHERE id = 'j00800000';
INSERT INTO jobs (id, queue, status, max_attempts, timeout_seconds, after, created_at, finished_at, updated_at)
SELECT 'j00800000-' || lpad(g::text, 5, '0'), 'etl', 'completed', 3, 3600, '{j00800000}',
       now() - interval '7 days', now() - interval '7 days', now() - interval '7 days'
FROM generate_series(1, 10000) g;
`

// sinceLastAnalyze is what happened after ANALYZE, as it does between two
// autovacuum passes: a node died holding the last 2,000 deliveries, now
// unacknowledged and overdue; 60 workers stopped heartbeating, their
// leases expired; one worker's jobs ran past their timeout. Statistics
// never see such rows: they appear and are swept between two ANALYZEs.
const sinceLastAnalyze = `
UPDATE jobs SET ack_deadline = now() - interval '5 seconds', started_at = now() - interval '35 seconds'
WHERE id IN (SELECT id FROM jobs WHERE status = 'running' AND ack_deadline IS NULL ORDER BY id DESC LIMIT 2000);

UPDATE jobs SET lease_expires_at = now() - interval '10 seconds'
WHERE status = 'running' AND worker_id IN (SELECT 'worker-' || g FROM generate_series(101, 160) g);

UPDATE jobs SET deadline_at = now() - interval '1 minute'
WHERE status = 'running' AND worker_id = 'worker-200';
`

func submission(id, uniqueKey string) records.NewJob {
	return records.NewJob{ID: id, Queue: "ready", Type: "type-1", Requires: []string{"sort"},
		Payload: json.RawMessage(`{"input":"/data/in/new.csv"}`), MaxAttempts: 3, RetryBackoffSeconds: 1,
		TimeoutSeconds: 3600, UniqueKey: uniqueKey}
}

// submitTwice submits first, then again: the second's COPY fails on what
// the first holds, and the statement that sorts it out runs.
func submitTwice(ctx context.Context, st *store.Store, first, again records.NewJob) error {
	if _, _, err := st.JobsSubmit(ctx, []records.NewJob{first}); err != nil {
		return err
	}
	_, _, err := st.JobsSubmit(ctx, []records.NewJob{again})
	return err
}

func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// statement is one statement as the store sent it.
type statement struct {
	sql  string
	args []any
	// unnamed is set when it was sent as an unnamed statement, which
	// PostgreSQL plans for its arguments every time.
	unnamed bool
}

// recordingStore is a Store on a scratch database whose pool records every
// statement it sends, batched or not.
type recordingStore struct {
	st   *store.Store
	mu   sync.Mutex
	sent []statement
}

func newRecordingStore(ctx context.Context, t *testing.T) *recordingStore {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(agqtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingStore{}
	cfg.ConnConfig.Tracer = r
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r.st = store.ForPool(pool)
	return r
}

// record keeps a statement, with the query options pgx takes among the
// arguments set apart.
func (r *recordingStore) record(sql string, args []any) {
	st := statement{sql: sql}
	for ; len(args) > 0; args = args[1:] {
		if mode, ok := args[0].(pgx.QueryExecMode); ok {
			st.unnamed = mode == pgx.QueryExecModeExec || mode == pgx.QueryExecModeDescribeExec ||
				mode == pgx.QueryExecModeSimpleProtocol
			continue
		}
		_, formats := args[0].(pgx.QueryResultFormats)
		_, formatsByOID := args[0].(pgx.QueryResultFormatsByOID)
		if !formats && !formatsByOID {
			break
		}
	}
	st.args = args
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, st)
}

func (r *recordingStore) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.record(d.SQL, d.Args)
	return ctx
}

func (r *recordingStore) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recordingStore) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *recordingStore) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.record(d.SQL, d.Args)
}

func (r *recordingStore) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// capture runs fn and returns the one statement it sent that contains match.
func (r *recordingStore) capture(ctx context.Context, t *testing.T, fn func(context.Context, *store.Store) error, match string) statement {
	t.Helper()
	r.mu.Lock()
	r.sent = nil
	r.mu.Unlock()
	// The scratch database is empty: a claim finds no worker and says so
	// after sending its statement, which is all that is needed here.
	var inactive *store.WorkerNotActiveError
	if err := fn(ctx, r.st); err != nil && !errors.As(err, &inactive) {
		t.Fatalf("running the store function: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var found []statement
	for _, s := range r.sent {
		if strings.Contains(s.sql, match) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d statements contain %q, want 1", len(found), match)
	}
	return found[0]
}

// planMode says which plan of a statement to explain. pgx prepares and
// caches every statement, and after five executions PostgreSQL may replace
// the plans it makes for each execution's arguments by one generic plan.
type planMode string

const (
	// customPlan is planned for the arguments: the first five executions.
	customPlan planMode = "custom"
	// cachedPlan is what plan_cache_mode=auto runs from the sixth
	// execution on, after five with the same arguments.
	cachedPlan planMode = "cached"
	// genericPlan is the plan made without looking at the arguments.
	genericPlan planMode = "generic"
)

// explain runs EXPLAIN ANALYZE on s in a transaction it rolls back.
func explain(ctx context.Context, t *testing.T, conn *pgx.Conn, s statement, mode planMode) explained {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// As the hot path runs them (store.hotQuery): without JIT.
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
		t.Fatal(err)
	}
	const options = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
	var raw []byte
	if mode == customPlan {
		err = tx.QueryRow(ctx, options+s.sql, s.args...).Scan(&raw)
	} else {
		const name = "explained"
		if mode == genericPlan {
			if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
				t.Fatal(err)
			}
		}
		desc, err := tx.Prepare(ctx, name, s.sql)
		if err != nil {
			t.Fatalf("PREPARE: %v", err)
		}
		defer func() { _ = conn.Deallocate(ctx, name) }()
		execute := "EXECUTE " + name + "(" + strings.Join(literals(t, conn, desc.ParamOIDs, s.args), ", ") + ")"
		if mode == cachedPlan {
			// The warm-up's writes are undone; the plan cache keeps its count.
			if _, err := tx.Exec(ctx, `SAVEPOINT warm_up`); err != nil {
				t.Fatal(err)
			}
			for range 5 {
				if _, err := tx.Exec(ctx, execute); err != nil {
					t.Fatalf("%s: %v", execute, err)
				}
			}
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT warm_up`); err != nil {
				t.Fatal(err)
			}
		}
		err = tx.QueryRow(ctx, options+execute).Scan(&raw)
	}
	if err != nil {
		t.Fatalf("EXPLAIN: %v\n%s", err, s.sql)
	}
	var out []explained
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", raw, err)
	}
	return out[0]
}

// literals renders arguments as SQL literals for EXECUTE, which takes no
// bind parameters, in the text form pgx sends for each parameter type.
func literals(t *testing.T, conn *pgx.Conn, oids []uint32, args []any) []string {
	t.Helper()
	out := make([]string, len(args))
	for i, arg := range args {
		// A non-nil buffer tells an empty string from NULL (nil).
		text, err := conn.TypeMap().Encode(oids[i], pgtype.TextFormatCode, arg, make([]byte, 0, 64))
		if err != nil {
			t.Fatalf("encoding argument %d (%#v): %v", i+1, arg, err)
		}
		out[i] = "NULL"
		if text != nil {
			out[i] = "'" + strings.ReplaceAll(string(text), "'", "''") + "'"
		}
	}
	return out
}

// explained is EXPLAIN (FORMAT JSON)'s answer for one statement.
type explained struct {
	Plan          planNode `json:"Plan"`
	PlanningTime  float64  `json:"Planning Time"`
	ExecutionTime float64  `json:"Execution Time"`
}

// planNode is one node of a plan, with the fields these checks read.
type planNode struct {
	NodeType         string     `json:"Node Type"`
	Relation         string     `json:"Relation Name"`
	Index            string     `json:"Index Name"`
	Subplan          string     `json:"Subplan Name"`
	IndexCond        string     `json:"Index Cond"`
	Filter           string     `json:"Filter"`
	ActualRows       float64    `json:"Actual Rows"`
	ActualLoops      float64    `json:"Actual Loops"`
	ActualTime       float64    `json:"Actual Total Time"`
	RemovedByFilt    float64    `json:"Rows Removed by Filter"`
	RemovedByRecheck float64    `json:"Rows Removed by Index Recheck"`
	SharedHit        float64    `json:"Shared Hit Blocks"`
	SharedRead       float64    `json:"Shared Read Blocks"`
	Plans            []planNode `json:"Plans"`
}

func (n planNode) walk(depth int, fn func(planNode, int)) {
	fn(n, depth)
	for _, c := range n.Plans {
		c.walk(depth+1, fn)
	}
}

// usesIndex reports whether the plan uses the index, or one of several
// written "a|b" when either serves the statement equally well.
func (n planNode) usesIndex(index string) bool {
	found := false
	n.walk(0, func(p planNode, _ int) { found = found || slices.Contains(strings.Split(index, "|"), p.Index) })
	return found
}

// scanned counts the rows scan nodes produced or filtered out over all
// their loops (EXPLAIN reports both per loop): a node run once per outer
// row counts every time.
func (n planNode) scanned() float64 {
	total := 0.0
	n.walk(0, func(p planNode, _ int) {
		if strings.HasSuffix(p.NodeType, "Scan") && p.NodeType != "Bitmap Index Scan" {
			total += p.ActualLoops * (p.ActualRows + p.RemovedByFilt + p.RemovedByRecheck)
		}
	})
	return total
}

func (n planNode) seqScans(relation string) bool {
	found := false
	n.walk(0, func(p planNode, _ int) { found = found || (p.NodeType == "Seq Scan" && p.Relation == relation) })
	return found
}

// render draws the plan as an indented tree, one node a line.
func (n planNode) render() string {
	var b strings.Builder
	n.walk(0, func(p planNode, depth int) {
		fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), p.NodeType)
		if p.Index != "" {
			fmt.Fprintf(&b, " using %s", p.Index)
		}
		if p.Relation != "" {
			fmt.Fprintf(&b, " on %s", p.Relation)
		}
		if p.Subplan != "" {
			fmt.Fprintf(&b, " (%s)", p.Subplan)
		}
		fmt.Fprintf(&b, "  rows=%.0f loops=%.0f time=%.3fms buffers=%.0f", p.ActualRows, p.ActualLoops, p.ActualTime, p.SharedHit+p.SharedRead)
		if p.RemovedByFilt > 0 {
			fmt.Fprintf(&b, " removed=%.0f", p.RemovedByFilt)
		}
		if p.IndexCond != "" {
			fmt.Fprintf(&b, "\n%s  cond: %s", strings.Repeat("  ", depth), p.IndexCond)
		}
		if p.Filter != "" {
			fmt.Fprintf(&b, "\n%s  filter: %s", strings.Repeat("  ", depth), p.Filter)
		}
		b.WriteByte('\n')
	})
	return strings.TrimRight(b.String(), "\n")
}

// dependencyStatements are the statements that settle a parent's end: each
// reads the few rows of its own parent or child through a key, however
// many graphs wait.
func dependencyStatements() []explainCase {
	// On the scratch database: a completed parent with a pending child,
	// and the parent's mark, as its end leaves them.
	settle := func(ctx context.Context, st *store.Store) error {
		for _, sql := range []string{
			`INSERT INTO jobs (id, queue, status, max_attempts, timeout_seconds, has_children, finished_at)
				VALUES ('j00970021', 'ready', 'completed', 3, 3600, true, now()) ON CONFLICT DO NOTHING`,
			`INSERT INTO jobs (id, queue, status, max_attempts, timeout_seconds, after)
				VALUES ('child-1', 'ready', 'pending', 3, 3600, '{j00970021}') ON CONFLICT DO NOTHING`,
			`UPDATE jobs SET status = 'pending' WHERE id = 'child-1'`,
			`INSERT INTO job_waits VALUES ('j00970021', 'child-1') ON CONFLICT DO NOTHING`,
			`INSERT INTO dependency_checks (job_id) VALUES ('j00970021')`,
		} {
			if _, err := st.Pool.Exec(ctx, sql); err != nil {
				return err
			}
		}
		_, err := st.DependenciesSettle(ctx, []string{"j00970021"}, 1000)
		return err
	}
	return []explainCase{
		{name: "SettlingFindsTheMarksOfItsJobsThroughDependencyChecksJob", run: settle,
			match: "AND c.job_id = ANY", index: "dependency_checks_job", maxScanned: 20},
		{name: "SettlingAParentDeletesItsWaitsThroughTheKey", run: settle,
			match: "DELETE FROM job_waits w USING", index: "job_waits_pkey", maxScanned: 100},
		{name: "ReleasingAChildProbesJobWaitsChild", run: settle,
			match: "WITH d AS (\n\t\t\tDELETE FROM dependency_checks", index: "job_waits_child", maxScanned: 100},
	}
}
