package watchdog_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/store"
	"github.com/agq/agq/watchdog"
)

func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }

func TestRetentionDeletesOnlyOldFinishedJobs(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{URL: agqtest.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// Each job: its final status (or a waiting/running one) and how long
	// ago it finished (or was created).
	jobs := []struct {
		id, status string
		age        time.Duration
		kept       bool
	}{
		{"completed-8d", "completed", 8 * 24 * time.Hour, false},
		{"completed-6d", "completed", 6 * 24 * time.Hour, true},
		{"failed-31d", "failed", 31 * 24 * time.Hour, false},
		{"failed-20d", "failed", 20 * 24 * time.Hour, true},
		{"cancelled-31d", "cancelled", 31 * 24 * time.Hour, false},
		{"queued-90d", "queued", 90 * 24 * time.Hour, true},
		{"running-90d", "running", 90 * 24 * time.Hour, true},
		{"retrying-90d", "retrying", 90 * 24 * time.Hour, true},
	}
	var batch []store.NewJob
	for _, j := range jobs {
		batch = append(batch, store.NewJob{ID: j.id, Queue: "q", MaxAttempts: 3, RetryBackoffSeconds: 1, TimeoutSeconds: 3600})
	}
	if _, _, err := st.JobsSubmit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		// Arrange the job's history directly: the ages are what is tested.
		_, err := st.Pool.Exec(ctx, `
			UPDATE jobs SET status = $2, created_at = now() - $3::interval,
				finished_at = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN now() - $3::interval END,
				worker_id = CASE WHEN $2 = 'running' THEN 'w' END,
				lease_expires_at = CASE WHEN $2 = 'running' THEN now() + interval '1 hour' END,
				deadline_at = CASE WHEN $2 = 'running' THEN now() + interval '1 hour' END,
				run_at = CASE WHEN $2 = 'retrying' THEN now() + interval '1 hour' ELSE run_at END
			WHERE id = $1`, j.id, j.status, j.age)
		if err != nil {
			t.Fatal(err)
		}
	}
	w := watchdog.New(watchdog.Config{Store: st, Batch: 2}) // small batches: several statements
	if err := w.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		_, err := st.JobGet(ctx, j.id)
		switch {
		case j.kept && err != nil:
			t.Errorf("%s was deleted (%v)", j.id, err)
		case !j.kept && err == nil:
			t.Errorf("%s was kept", j.id)
		}
	}
}
