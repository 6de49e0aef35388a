package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// graphJob is one job of a graph submitted in one JOB.SUBMIT.
type graphJob struct {
	ID              string   `json:"job_id"`
	Queue           string   `json:"queue"`
	Type            string   `json:"type"`
	After           []string `json:"after,omitempty"`
	OnParentFailure string   `json:"on_parent_failure,omitempty"`
	DelaySeconds    int      `json:"delay_seconds,omitempty"`
}

func submitGraph(t *testing.T, a *agqtest.Agq, jobs []graphJob) {
	t.Helper()
	doc, _ := json.Marshal(jobs)
	if err := a.Admin(t).Do(context.Background(), "JOB.SUBMIT", string(doc)).Err(); err != nil {
		t.Fatalf("JOB.SUBMIT of %d jobs: %v", len(jobs), err)
	}
}

// chain is n jobs named prefix-0… each after the one before, the first
// held back an hour so that nothing runs.
func chain(prefix, queue string, n int) []graphJob {
	jobs := make([]graphJob, n)
	for i := range jobs {
		jobs[i] = graphJob{ID: fmt.Sprintf("%s-%d", prefix, i), Queue: queue, Type: "t"}
		if i == 0 {
			jobs[i].DelaySeconds = 3600
		} else {
			jobs[i].After = []string{jobs[i-1].ID}
		}
	}
	return jobs
}

// statusesOf counts the statuses of the jobs of queue, read from the
// database.
func statusesOf(t *testing.T, a *agqtest.Agq, queue string) map[string]int {
	t.Helper()
	ctx := context.Background()
	db, err := pgx.Connect(ctx, a.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	rows, err := db.Query(ctx, `SELECT status, count(*) FROM jobs WHERE queue = $1 GROUP BY status`, queue)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			t.Fatal(err)
		}
		out[st] = n
	}
	return out
}

// waitStatuses polls until queue's jobs are counted as want.
func waitStatuses(t *testing.T, a *agqtest.Agq, queue string, want map[string]int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	agqtest.Eventually(t, within, func() error {
		got := statusesOf(t, a, queue)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("queue %s: %v, want %v", queue, got, want)
		}
		return nil
	})
	return time.Since(start)
}

// A chain of 5,000 jobs, each after the one before: cancelling its first
// job cancels them all, and retrying it restores them all, each in a few
// bounded transactions rather than one a level.
func TestAChainOfFiveThousandIsCancelledAndRestoredQuickly(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	const n = 5000
	submitGraph(t, a, chain("ch", "chain", n))
	start := time.Now()
	if err := admin.Do(ctx, "JOB.CANCEL", "ch-0").Err(); err != nil {
		t.Fatalf("JOB.CANCEL: %v", err)
	}
	answered := time.Since(start)
	waitStatuses(t, a, "chain", map[string]int{"cancelled": n}, 30*time.Second)
	t.Logf("cancel of a %d-deep chain: answered in %v, all cancelled in %v", n, answered, time.Since(start))
	if v := getChild(t, admin, "ch-4999"); len(v.Errors) != 1 {
		t.Fatalf("the last job's errors: %s", v.Errors)
	}

	start = time.Now()
	if err := admin.Do(ctx, "JOB.RETRY", "ch-0").Err(); err != nil {
		t.Fatalf("JOB.RETRY: %v", err)
	}
	answered = time.Since(start)
	waitStatuses(t, a, "chain", map[string]int{"queued": 1, "pending": n - 1}, 30*time.Second)
	t.Logf("restore of a %d-deep chain: answered in %v, all restored in %v", n, answered, time.Since(start))
	for _, id := range []string{"ch-1", "ch-2500", "ch-4999"} {
		if v := getChild(t, admin, id); v.PendingParents != 1 {
			t.Fatalf("%s after the retry: %+v", id, v)
		}
	}
}

// A command that runs past its deadline says so; it is not blamed on the
// database, which is fine. Here a transaction holds the job's row.
func TestACommandPastItsDeadlineSaysItTimedOut(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Client(t, redis.Options{Password: a.AdminKey, ReadTimeout: time.Minute})
	submitGraph(t, a, []graphJob{{ID: "held", Queue: "held", Type: "t"}})
	db, err := pgx.Connect(ctx, a.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	err = admin.Do(ctx, "JOB.CANCEL", "held").Err()
	if err == nil || err.Error() != "ERR JOB.CANCEL timed out after 10s" {
		t.Fatalf("JOB.CANCEL of a job whose row is held: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "JOB.CANCEL", "held").Err(); err != nil {
		t.Fatalf("JOB.CANCEL once the row is free: %v", err)
	}
}
