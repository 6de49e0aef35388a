package commands_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// Failures caused by the database's availability are TRYAGAIN, never ERR,
// and a command whose pooled connection was broken before it was sent runs
// again on a fresh one instead of failing.
func TestBrokenDatabaseConnections(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	// go-redis re-sends a command answered TRYAGAIN; this client shows
	// what agq answered.
	admin := a.Client(t, redis.Options{Password: a.AdminKey, MaxRetries: -1})
	db, err := pgx.Connect(ctx, a.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	terminateAgq := func(filter string) int {
		t.Helper()
		var n int
		err := db.QueryRow(ctx, `
			SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'agq' `+filter).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("ConnectionsBrokenBetweenCommandsAreReplaced", func(t *testing.T) {
		for range 20 { // fill the pools
			if err := admin.Do(ctx, "JOB.SUBMIT", `{"type":"t","queue":"warm"}`).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if n := terminateAgq(""); n == 0 {
			t.Fatal("no agq connection to break")
		}
		time.Sleep(100 * time.Millisecond)
		for _, cmd := range [][]any{
			{"JOB.SUBMIT", `{"job_id":"after-break","type":"t"}`},
			{"JOB.GET", "after-break"},
			{"QUEUE.STATS", "ready"},
			{"KEY.LIST"},
		} {
			if err := admin.Do(ctx, cmd...).Err(); err != nil {
				t.Errorf("%v after agq's connections were broken: %v", cmd[0], err)
			}
		}
	})

	t.Run("AConnectionKilledMidCommandAnswersTryAgain", func(t *testing.T) {
		if err := admin.Do(ctx, "JOB.SUBMIT", `{"job_id":"locked","type":"t"}`).Err(); err != nil {
			t.Fatal(err)
		}
		// Hold the job's row, so that JOB.CANCEL waits in the database.
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = 'locked' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- admin.Do(ctx, "JOB.CANCEL", "locked").Err() }()
		agqtest.Eventually(t, 10*time.Second, func() error {
			var waiting int
			db2, err := pgx.Connect(ctx, a.DatabaseURL)
			if err != nil {
				return err
			}
			defer db2.Close(context.Background())
			db2.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = 'agq'`).Scan(&waiting)
			if waiting == 0 {
				return context.DeadlineExceeded
			}
			return nil
		})
		if _, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = 'agq'`); err != nil {
			t.Fatal(err)
		}
		err = <-done
		tx.Rollback(ctx)
		if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN ") {
			t.Fatalf("JOB.CANCEL whose connection was killed under it: %v, want a TRYAGAIN error", err)
		}
		// The client does as TRYAGAIN says.
		if err := admin.Do(ctx, "JOB.CANCEL", "locked").Err(); err != nil {
			t.Fatalf("JOB.CANCEL again: %v", err)
		}
		if raw, _ := admin.Do(ctx, "JOB.GET", "locked").Text(); !strings.Contains(raw, `"status":"cancelled"`) {
			t.Fatalf("the job after the retry: %s", raw)
		}
	})
}
