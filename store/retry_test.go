package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// fixedPolicy retries every retryable failure after delay, and records
// what it was asked; reports are decided by agq's rules.
type fixedPolicy struct {
	engine.Decisions
	delay time.Duration
	mu    sync.Mutex
	asked []records.Failure
}

func (p *fixedPolicy) NextRetry(f records.Failure) (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, f)
	return f.Retryable, p.delay
}

func (p *fixedPolicy) failures() []records.Failure {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]records.Failure(nil), p.asked...)
}

// retryDelay is how long after its failure a job is due again, on the
// database's clock.
func retryDelay(ctx context.Context, t *testing.T, st *store.Store, id string) time.Duration {
	t.Helper()
	var d time.Duration
	if err := st.Pool.QueryRow(ctx, `SELECT run_at - updated_at FROM jobs WHERE id = $1`, id).Scan(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestFailedReportsFollowTheRetryPolicy(t *testing.T) {
	const delay = 90*time.Minute + 1500*time.Millisecond
	failed := func(j records.Job, retryable bool) records.Report {
		return records.Report{ID: j.ID, WorkerID: "w-a", Status: records.StatusFailed, Error: "boom",
			Retryable: retryable, Attempt: j.Attempt, Delivery: *j.Delivery}
	}
	want := records.Failure{Attempt: 1, MaxAttempts: 2, BackoffSeconds: 1, Retryable: true}

	t.Run("GroupedReportsAreDueAfterThePolicysDelay", func(t *testing.T) {
		policy := &fixedPolicy{delay: delay}
		ctx, st := storeWithPolicy(t, policy, "w-a")
		jobs := submitAndClaim(ctx, t, st, "g", 3, "w-a")
		done := records.Report{ID: jobs[2].ID, WorkerID: "w-a", Status: records.StatusCompleted,
			Attempt: jobs[2].Attempt, Delivery: *jobs[2].Delivery}
		errs, fx := st.JobsFinish(ctx, []records.Report{failed(jobs[0], true), failed(jobs[1], false), done})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("report %d: %v", i, err)
			}
		}
		if got := status(ctx, t, st, jobs[0].ID); got != records.StatusRetrying {
			t.Fatalf("the retried job is %s", got)
		}
		if got := retryDelay(ctx, t, st, jobs[0].ID); got != delay {
			t.Fatalf("the retried job is due %v after its failure, want %v", got, delay)
		}
		if got := status(ctx, t, st, jobs[1].ID); got != records.StatusFailed {
			t.Fatalf("the job failed for good is %s", got)
		}
		if len(fx.Ready) != 1 || fx.Ready[0].At == 0 || len(fx.Done) != 2 {
			t.Fatalf("effects: ready %+v, done %v", fx.Ready, fx.Done)
		}
		// Only the failures were decided, each once, on the locked rows.
		asked := policy.failures()
		notRetryable := want
		notRetryable.Retryable = false
		if len(asked) != 2 || asked[0] != want || asked[1] != notRetryable {
			t.Fatalf("the policy was asked %+v", asked)
		}
	})

	t.Run("ACarefulReportIsDueAfterThePolicysDelay", func(t *testing.T) {
		policy := &fixedPolicy{delay: delay}
		ctx, st := storeWithPolicy(t, policy, "w-a")
		jobs := submitAndClaim(ctx, t, st, "c", 1, "w-a")
		if _, err := st.JobUpdate(ctx, failed(jobs[0], true)); err != nil {
			t.Fatal(err)
		}
		if got := status(ctx, t, st, jobs[0].ID); got != records.StatusRetrying {
			t.Fatalf("the retried job is %s", got)
		}
		if got := retryDelay(ctx, t, st, jobs[0].ID); got != delay {
			t.Fatalf("the retried job is due %v after its failure, want %v", got, delay)
		}
		if asked := policy.failures(); len(asked) != 1 || asked[0] != want {
			t.Fatalf("the policy was asked %+v", asked)
		}
	})

	t.Run("ATimedOutJobIsDueAfterThePolicysDelay", func(t *testing.T) {
		policy := &fixedPolicy{delay: delay}
		ctx, st := storeWithPolicy(t, policy, "w-a")
		jobs := submitAndClaim(ctx, t, st, "t", 1, "w-a")
		if _, err := st.Pool.Exec(ctx, `UPDATE jobs SET deadline_at = now() - interval '1 minute' WHERE id = $1`, jobs[0].ID); err != nil {
			t.Fatal(err)
		}
		if n, err := st.JobsFailTimedOut(ctx, 0, 10); err != nil || n != 1 {
			t.Fatalf("timed out %d: %v", n, err)
		}
		if got := retryDelay(ctx, t, st, jobs[0].ID); got != delay {
			t.Fatalf("the timed-out job is due %v after its failure, want %v", got, delay)
		}
		if asked := policy.failures(); len(asked) != 1 || asked[0] != want {
			t.Fatalf("the policy was asked %+v", asked)
		}
	})

	t.Run("AJobWhoseLeaseRanOutIsDecidedAsLost", func(t *testing.T) {
		policy := &fixedPolicy{}
		ctx, st := storeWithPolicy(t, policy, "w-a")
		jobs := submitAndClaim(ctx, t, st, "l", 1, "w-a")
		if _, err := st.Pool.Exec(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, jobs[0].ID); err != nil {
			t.Fatal(err)
		}
		if n, err := st.JobsRecoverExpiredLeases(ctx, 10); err != nil || n != 1 {
			t.Fatalf("recovered %d: %v", n, err)
		}
		lost := want
		lost.Lost = true
		if asked := policy.failures(); len(asked) != 1 || asked[0] != lost {
			t.Fatalf("the policy was asked %+v", asked)
		}
		if got := status(ctx, t, st, jobs[0].ID); got != records.StatusQueued {
			t.Fatalf("the recovered job is %s", got)
		}
	})

	t.Run("WithoutRulesWhatMustBeDecidedIsRefused", func(t *testing.T) {
		ctx, st := storeWithPolicy(t, nil, "w-a")
		jobs := submitAndClaim(ctx, t, st, "n", 2, "w-a")
		done := records.Report{ID: jobs[1].ID, WorkerID: "w-a", Status: records.StatusCompleted,
			Attempt: jobs[1].Attempt, Delivery: *jobs[1].Delivery}
		errs, _ := st.JobsFinish(ctx, []records.Report{failed(jobs[0], true), done})
		// The failure cannot be decided, and the group it sank takes the
		// locked path, where each report is the rules' to decide.
		if !errors.Is(errs[0], store.ErrNoRules) || !errors.Is(errs[1], store.ErrNoRules) {
			t.Fatalf("reports: %v, %v; want ErrNoRules for both", errs[0], errs[1])
		}
		for _, j := range jobs {
			if got := status(ctx, t, st, j.ID); got != records.StatusRunning {
				t.Fatalf("a refused report moved its job to %s", got)
			}
		}
		// A group of completions alone is the guard's to apply.
		if errs, _ := st.JobsFinish(ctx, []records.Report{done}); errs[0] != nil {
			t.Fatalf("a completion alone: %v", errs[0])
		}
		if got := status(ctx, t, st, jobs[1].ID); got != records.StatusCompleted {
			t.Fatalf("the completion left its job %s", got)
		}
	})
}
