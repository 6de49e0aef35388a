package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/store"
)

// The step statements find their rows through job_steps' indexes now
// that a job may hold replaced rows of a step: a step call its live row
// through job_steps_live, JOB.STEPS its page through the key by order, a
// signal its job's open wait through job_steps_awaiting, the deadline
// sweep its waits through job_steps_deadline — never a scan of job_steps,
// planned over 20,000 jobs of 10 steps each, a tenth of them retried from
// a step and waiting, a twentieth still.
func TestStepStatementsUseTheirIndexes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn := connect(ctx, t, agqtest.NewDatabase(t))
	for _, sql := range []string{`
		INSERT INTO jobs (id, queue, type, status, attempt, max_attempts, timeout_seconds, worker_id, delivery)
		SELECT 's' || g, 'ready', 't', 'running', 1, 3, 3600, 'worker-1', gen_random_uuid()
		FROM generate_series(1, 20000) g`, `
		INSERT INTO job_steps (job_id, step_id, ord, kind, status, attempts, max_attempts, retry_backoff_seconds, delivery)
		SELECT 's' || g, 'step-' || o, o, 'step', CASE WHEN o < 10 THEN 'completed' ELSE 'running' END, 1, 3, 1, NULL
		FROM generate_series(1, 20000) g, generate_series(1, 10) o`, `
		INSERT INTO job_steps (job_id, step_id, ord, kind, status, attempts, max_attempts, retry_backoff_seconds)
		SELECT 's' || g, 'step-' || o, 10 + o, 'step', 'replaced', 1, 3, 1
		FROM generate_series(1, 20000, 10) g, generate_series(1, 5) o`, `
		INSERT INTO job_steps (job_id, step_id, ord, kind, status, attempts, max_attempts, retry_backoff_seconds, wake_at, wait_signal)
		SELECT 's' || g, 'approval', 16, 'wait', CASE WHEN g % 20 = 1 THEN 'awaiting' ELSE 'completed' END, 1, 3, 1,
			now() + (g % 100) * interval '1 minute', 'approved'
		FROM generate_series(1, 20000, 10) g`,
		`ANALYZE`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("preparing the data: %v\n%s", err, sql)
		}
	}
	nss := []string{"default", "default"}
	ids, steps, workers, deliveries := []string{"s11", "s12"}, []string{"step-3", "step-10"}, []string{"", ""}, []*string{nil, nil}
	ords := []int32{0, 1}
	for _, c := range []struct {
		name, sql string
		args      []any
		indexes   []string // each one of a|b

	}{
		{"AStepCallReadsItsLiveStep", store.ReadStepSQL, []any{"default", "s11", "step-3", nil}, []string{"job_steps_live"}},
		{"JobStepsPagesByOrder", store.JobStepsSQL, []any{"default", "s11", 2, 100}, []string{"job_steps_order"}},
		{"AGroupOfBeginsFindsItsStepsAndTheirJobsLast", store.BeginStepsGroupedSQL,
			[]any{nss, ids, steps, workers, deliveries, []*string{nil, nil}, []*int32{nil, nil}, []*float64{nil, nil}, ords},
			[]string{"job_steps_live", "job_steps_order"}},
		{"AGroupOfCompletionsFindsItsSteps", store.CompleteStepsGroupedSQL,
			[]any{nss, ids, steps, workers, deliveries, []*string{nil, nil}, ords}, []string{"job_steps_live"}},
		{"ASignalFindsItsWaitThroughItsJob", store.SignalWaitSQL, []any{"default", "s11", "approved"},
			[]string{"job_steps_awaiting"}},
		{"TheDeadlineSweepReadsWaitsByDeadline", store.WaitsExpireSQL, []any{100}, []string{"job_steps_deadline"}},
		{"ARecoveryFindsTheStepsLeftOpenThroughTheirJobs", store.EndOpenStepsSQL,
			[]any{ids, "interrupted", nss}, []string{"job_steps_order|job_steps_live"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, err := conn.Query(ctx, "EXPLAIN "+c.sql, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			var plan []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, line)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			for _, index := range c.indexes {
				if !slices.ContainsFunc(strings.Split(index, "|"), func(i string) bool { return strings.Contains(text, i) }) {
					t.Errorf("the plan does not use %s:\n%s", index, text)
				}
			}
			if strings.Contains(text, "Seq Scan on job_steps") {
				t.Errorf("the plan scans job_steps:\n%s", text)
			}
		})
	}
}
