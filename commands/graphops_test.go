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
	rows, err := db.Query(ctx, `SELECT status, count(*) FROM jobs_all WHERE queue = $1 GROUP BY status`, queue)
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

// JOB.CANCEL … CASCADE of a job that completed: its running child is asked
// to stop (its holder hears it on its heartbeat), and the jobs after that
// child, one of which runs whatever its parents' ends, are cancelled.
func TestCancelCascadeReachesRunningAndRunChildren(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w := registerWorker(t, a, "casc-w", "t")
	submitGraph(t, a, []graphJob{{ID: "cp", Queue: "casc", Type: "t"}})
	w.finish(t, "casc", "cp", "completed")
	submitGraph(t, a, []graphJob{
		{ID: "cc", Queue: "casc", Type: "t", After: []string{"cp"}},
		{ID: "cg", Queue: "casc", Type: "t", After: []string{"cc"}},
		{ID: "cr", Queue: "casc", Type: "t", After: []string{"cc"}, OnParentFailure: "run"},
		{ID: "cl", Queue: "casc", Type: "t", After: []string{"cg", "cr"}, OnParentFailure: "run"},
	})
	_, d, ok := w.pop(t, "2", "casc")
	if !ok || d.JobID != "cc" {
		t.Fatalf("popped %+v", d)
	}
	if err := admin.Do(ctx, "JOB.CANCEL", "cp", "CASCADE").Err(); err != nil {
		t.Fatalf("JOB.CANCEL of a completed job, CASCADE: %v", err)
	}
	for _, id := range []string{"cg", "cr", "cl"} {
		waitStatus(t, admin, id, "cancelled")
	}
	if got := getChild(t, admin, "cp").Status; got != "completed" {
		t.Fatalf("the completed job: %s", got)
	}
	hb, err := w.c.Do(ctx, "WORKER.HEARTBEAT", "casc-w").Text()
	if err != nil || hb != "OK cancel=cc" {
		t.Fatalf("the holder's heartbeat: %q, %v", hb, err)
	}
	err = w.update(ctx, "cc", map[string]any{"status": "completed", "delivery": d.Delivery})
	if err == nil || err.Error() != "CANCELLED job cc was cancelled" {
		t.Fatalf("the holder's report: %v", err)
	}
	waitStatus(t, admin, "cc", "cancelled")
	// Sent again: nothing left to cancel, +OK all the same.
	if err := admin.Do(ctx, "JOB.CANCEL", "cp", "cascade").Err(); err != nil {
		t.Fatalf("JOB.CANCEL … CASCADE again: %v", err)
	}
	for _, c := range []struct {
		args []any
		want string
	}{
		{[]any{"JOB.CANCEL", "nope", "CASCADE"}, "ERR no such job nope"},
		{[]any{"JOB.CANCEL", "cp", "CASCADES"}, "ERR syntax error"},
		{[]any{"JOB.CANCEL", "cp", "CASCADE", "now"}, "ERR syntax error"},
	} {
		if err := admin.Do(ctx, c.args...).Err(); err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %s", c.args, err, c.want)
		}
	}
}

// A job's children that run whatever their parents did are cancelled by
// JOB.CANCEL … CASCADE of the job before anything can release them: a
// worker blocked on their queue meanwhile gets none of them.
func TestCancelCascadeReleasesNoChildFirst(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w := registerWorker(t, a, "cascr-w", "t")
	const n = 200
	jobs := []graphJob{{ID: "cr-root", Queue: "cr-root", Type: "t", DelaySeconds: 3600}}
	for i := range n {
		jobs = append(jobs, graphJob{ID: fmt.Sprintf("cr-%d", i), Queue: "cr", Type: "t",
			After: []string{"cr-root"}, OnParentFailure: "run"})
	}
	submitGraph(t, a, jobs)
	popped := make(chan string, 1)
	go func() {
		res, err := w.c.Do(ctx, "BRPOP", "queue:cr", "2").StringSlice()
		if err != nil {
			popped <- err.Error()
			return
		}
		popped <- res[1]
	}()
	time.Sleep(200 * time.Millisecond) // the worker is blocked
	if err := admin.Do(ctx, "JOB.CANCEL", "cr-root", "CASCADE").Err(); err != nil {
		t.Fatalf("JOB.CANCEL … CASCADE: %v", err)
	}
	if got := <-popped; got != redis.Nil.Error() {
		t.Fatalf("the blocked worker got %s", got)
	}
	if got := statusesOf(t, a, "cr"); got["cancelled"] != n {
		t.Fatalf("the children: %v", got)
	}
}

// A fan-out of 10,000 children of one job: cancelling the parent cancels
// them all, retrying it restores them all.
func TestAFanOutOfTenThousandIsCancelledAndRestoredQuickly(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	const n = 10000
	submitGraph(t, a, []graphJob{{ID: "fan", Queue: "fan", Type: "t", DelaySeconds: 3600}})
	// In calls of 2,000, each well within a client's read timeout on a
	// busy machine.
	for from := 0; from < n; from += 2000 {
		var jobs []graphJob
		for i := from; i < from+2000; i++ {
			jobs = append(jobs, graphJob{ID: fmt.Sprintf("fan-%d", i), Queue: "fan", Type: "t", After: []string{"fan"}})
		}
		submitGraph(t, a, jobs)
	}
	start := time.Now()
	if err := admin.Do(ctx, "JOB.CANCEL", "fan").Err(); err != nil {
		t.Fatal(err)
	}
	waitStatuses(t, a, "fan", map[string]int{"cancelled": n + 1}, 30*time.Second)
	t.Logf("cancel of a fan-out of %d: all cancelled in %v", n, time.Since(start))
	start = time.Now()
	if err := admin.Do(ctx, "JOB.RETRY", "fan").Err(); err != nil {
		t.Fatal(err)
	}
	waitStatuses(t, a, "fan", map[string]int{"queued": 1, "pending": n}, 30*time.Second)
	t.Logf("restore of a fan-out of %d: all restored in %v", n, time.Since(start))
	start = time.Now()
	if err := admin.Do(ctx, "JOB.CANCEL", "fan", "CASCADE").Err(); err != nil {
		t.Fatal(err)
	}
	waitStatuses(t, a, "fan", map[string]int{"cancelled": n + 1}, 30*time.Second)
	t.Logf("cascade over a fan-out of %d: all cancelled in %v", n, time.Since(start))
}

// A lattice, 100 levels of 50 jobs, each after the two jobs above it
// (wrapping around): a job reached from two parents is cancelled and
// restored once, and waits again for both.
func TestALatticeIsCancelledAndRestored(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	const levels, width = 100, 50
	jobs := []graphJob{{ID: "lat", Queue: "lat", Type: "t", DelaySeconds: 3600}}
	name := func(l, i int) string { return fmt.Sprintf("lat-%d-%d", l, i) }
	for l := range levels {
		for i := range width {
			j := graphJob{ID: name(l, i), Queue: "lat", Type: "t", After: []string{"lat"}}
			if l > 0 {
				j.After = []string{name(l-1, i), name(l-1, (i+1)%width)}
			}
			jobs = append(jobs, j)
		}
	}
	submitGraph(t, a, jobs)
	const n = levels*width + 1
	start := time.Now()
	if err := admin.Do(ctx, "JOB.CANCEL", "lat").Err(); err != nil {
		t.Fatal(err)
	}
	waitStatuses(t, a, "lat", map[string]int{"cancelled": n}, 30*time.Second)
	t.Logf("cancel of a lattice of %d: all cancelled in %v", n, time.Since(start))
	start = time.Now()
	if err := admin.Do(ctx, "JOB.RETRY", "lat").Err(); err != nil {
		t.Fatal(err)
	}
	waitStatuses(t, a, "lat", map[string]int{"queued": 1, "pending": n - 1}, 30*time.Second)
	t.Logf("restore of a lattice of %d: all restored in %v", n, time.Since(start))
	if v := getChild(t, admin, name(levels-1, 7)); v.PendingParents != 2 {
		t.Fatalf("a job of the last level after the retry: %+v", v)
	}
	start = time.Now()
	if err := admin.Do(ctx, "JOB.CANCEL", "lat", "CASCADE").Err(); err != nil {
		t.Fatal(err)
	}
	waitStatuses(t, a, "lat", map[string]int{"cancelled": n}, 30*time.Second)
	t.Logf("cascade over a lattice of %d: all cancelled in %v", n, time.Since(start))
}
