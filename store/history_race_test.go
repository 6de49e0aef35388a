package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/agq/agq/records"
)

// A job that moves into history while its id is submitted again (after the
// submission looked in history, before its insert) is not created twice:
// the submission answers the job in history. A trigger stands in for the
// mover's commit at that moment: as a job named race-… is inserted, it
// puts an ended copy of it into history.
func TestHistoryResubmissionRacingTheMove(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	lo := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	if err := b.st.PeriodCreate(b.ctx, lo, lo.Add(time.Hour), "race"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.Pool.Exec(b.ctx, fmt.Sprintf(`
		CREATE FUNCTION moved_meanwhile() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE r jobs;
		BEGIN
			r := NEW;
			r.status := 'completed';
			r.finished_at := now() - interval '1 minute';
			INSERT INTO jobs_history SELECT '%s'::timestamptz, (r).*;
			RETURN NEW;
		END $$;
		CREATE TRIGGER moved_meanwhile AFTER INSERT ON jobs FOR EACH ROW
			WHEN (NEW.id LIKE 'race-%%') EXECUTE FUNCTION moved_meanwhile()`,
		lo.Add(time.Minute).Format(time.RFC3339))); err != nil {
		t.Fatal(err)
	}
	inJobs := func(id string) int { return b.count(t, "jobs", id) }

	// A batch: the raced job answers the job in history, the other is
	// created.
	res, _, err := b.st.JobsSubmit(b.ctx, []records.NewJob{trJob("race-batch", 1, 1), trJob("plain-batch", 1, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Created || !res[0].Same || res[0].ID != "race-batch" || inJobs("race-batch") != 0 {
		t.Errorf("the raced job of a batch: %+v, %d in jobs; want the job in history, none in jobs", res[0], inJobs("race-batch"))
	}
	if !res[1].Created || inJobs("plain-batch") != 1 {
		t.Errorf("the other job of the batch: %+v, %d in jobs; want it created", res[1], inJobs("plain-batch"))
	}

	// Single submissions grouped: each on its own.
	res, errs, _ := b.st.JobsSubmitEach(b.ctx, []records.NewJob{trJob("race-each", 1, 1), trJob("plain-each", 1, 1)})
	if errs[0] != nil || res[0].Created || !res[0].Same || inJobs("race-each") != 0 {
		t.Errorf("the raced job of a group: %+v, %v, %d in jobs; want the job in history", res[0], errs[0], inJobs("race-each"))
	}
	if errs[1] != nil || !res[1].Created || inJobs("plain-each") != 1 {
		t.Errorf("the other job of the group: %+v, %v; want it created", res[1], errs[1])
	}

	// Sent again later, the raced job is found in history before the
	// insert, as any moved job is.
	if _, err := b.st.Pool.Exec(b.ctx, `DROP TRIGGER moved_meanwhile ON jobs`); err != nil {
		t.Fatal(err)
	}
	res, _, err = b.st.JobsSubmit(b.ctx, []records.NewJob{trJob("race-batch", 1, 1)})
	if err != nil || res[0].Created || inJobs("race-batch") != 0 {
		t.Errorf("sent again: %+v, %v, %d in jobs; want the job in history", res, err, inJobs("race-batch"))
	}
	if got := b.get(t, "race-batch"); got.Status != records.StatusCompleted {
		t.Errorf("JOB.GET of the raced job: %s, want completed (the job in history)", got.Status)
	}
}

// A retry that waits for the job's row while the mover moves it into
// history finds it there once the move commits: it is retried, never
// answered as unknown. A transaction doing what the mover does, held open
// until the retry waits for its lock, stands in for the mover.
func TestHistoryRetryRacingTheMove(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	lo := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	if err := b.st.PeriodCreate(b.ctx, lo, lo.Add(time.Hour), "retryrace"); err != nil {
		t.Fatal(err)
	}
	b.submit(t, trJob("moving", 1, 1))
	if _, err := b.st.JobCancel(b.ctx, "moving"); err != nil {
		t.Fatal(err)
	}
	mover, err := b.st.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mover.Rollback(b.ctx)
	if _, err := mover.Exec(b.ctx, `
		WITH moved AS (DELETE FROM jobs WHERE id = 'moving' RETURNING $1::timestamptz, jobs.*)
		INSERT INTO jobs_history SELECT * FROM moved`, lo.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	retried := make(chan error, 1)
	go func() {
		_, err := b.st.JobRetry(b.ctx, "moving")
		retried <- err
	}()
	for waiting := 0; waiting == 0; time.Sleep(5 * time.Millisecond) {
		if err := b.st.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := mover.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-retried; err != nil {
		t.Fatalf("the retry: %v, want the job retried", err)
	}
	if got := b.get(t, "moving"); got.Status != records.StatusQueued || b.count(t, "jobs_history", "moving") != 0 {
		t.Errorf("after the retry: %s, %d in history; want queued, back in jobs", got.Status, b.count(t, "jobs_history", "moving"))
	}
}
