package main

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

// agq killed (SIGKILL) half way through walking a chain of 20,000 jobs —
// a cancellation settling down it, a retry restoring it, a cascade — each
// time leaves nothing stuck: agq restarted finishes the walk, every job
// ends as the command meant, and no mark of a walk is left.
func TestKillDuringGraphWalksLeavesNothingStuck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srv := newAgqProcess(t, buildAgq(t), agqtest.NewDatabase(t))
	srv.start(ctx)
	opts := srv.clientOptions("", srv.adminKey)
	opts.ReadTimeout = 30 * time.Second
	admin := redis.NewClient(opts)
	defer admin.Close()
	db, err := pgx.Connect(ctx, srv.databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)

	const n = 20000
	for from := 0; from < n; from += 5000 {
		jobs := make([]map[string]any, 0, 5000)
		for i := from; i < from+5000; i++ {
			j := map[string]any{"job_id": fmt.Sprintf("k-%d", i), "queue": "walk", "type": "t"}
			if i == 0 {
				j["delay_seconds"] = 3600
			} else {
				j["after"] = []string{fmt.Sprintf("k-%d", i-1)}
			}
			jobs = append(jobs, j)
		}
		doc, _ := json.Marshal(jobs)
		if err := admin.Do(ctx, "JOB.SUBMIT", string(doc)).Err(); err != nil {
			t.Fatalf("JOB.SUBMIT of jobs %d on: %v", from, err)
		}
	}

	count := func(status string) int {
		var c int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM jobs_all WHERE queue = 'walk' AND status = $1`, status).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// killMidway sends the command and kills agq once its walk has
	// begun (counted by status), then restarts it.
	killMidway := func(status string, before int, args ...any) {
		t.Helper()
		go func() {
			// Its answer is mostly lost with agq; an error before the
			// kill says why nothing was walked.
			if err := admin.Do(ctx, args...).Err(); err != nil {
				t.Logf("%v answered %v", args, err)
			}
		}()
		deadline := time.Now().Add(30 * time.Second)
		for count(status) <= before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		srv.kill()
		t.Logf("%v: %d of %d jobs %s when agq was killed", args, count(status)-before, n, status)
		srv.start(ctx)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > time.Minute {
				t.Fatalf("%s: not after a minute (cancelled %d, pending %d, queued %d)", what, count("cancelled"), count("pending"), count("queued"))
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s: finished %v after the restart", what, time.Since(start))
	}
	noMarks := func() bool {
		var walks, checks int
		if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM graph_walks), (SELECT count(*) FROM dependency_checks)`).Scan(&walks, &checks); err != nil {
			t.Fatal(err)
		}
		return walks == 0 && checks == 0
	}

	killMidway("cancelled", 0, "JOB.CANCEL", "k-0")
	waitFor("the cancellation", func() bool { return count("cancelled") == n && noMarks() })

	killMidway("pending", 0, "JOB.RETRY", "k-0")
	waitFor("the restore", func() bool { return count("pending") == n-1 && count("queued") == 1 && noMarks() })

	killMidway("cancelled", 1, "JOB.CANCEL", "k-0", "CASCADE")
	waitFor("the cascade", func() bool { return count("cancelled") == n && noMarks() })
}
