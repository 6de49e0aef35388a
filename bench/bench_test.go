package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// The benchmark runs at a tiny size so that it cannot rot: every scenario
// must finish, every job be worked, and every figure be printed.
func TestBenchmarkRunsAtASmallSize(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	r, err := run(ctx, options{jobs: 300, workers: 8, batch: 20, submitJobs: 300, pipeJobs: 300, producers: 4, continuous: time.Second,
		latency: 10, idle: 50, dashboardJobs: 3000, dashboardSamples: 1, fanIn: 200, fairFlood: 3000}, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	r.print(&out)
	t.Logf("\n%s", out.String())
	for _, row := range r.rows {
		for i, cell := range row[1:3] {
			if strings.Contains(cell, "jobs/s") && strings.HasPrefix(cell, "0 ") {
				t.Errorf("%s: %s measured nothing: %q", row[0], []string{"agq", "River"}[i], cell)
			}
		}
	}
	for _, want := range []string{"burn-down, 300 jobs", "with JOB.UPDATE running", "write transactions per job",
		"BLMPOP COUNT 20 + pipelined JOB.UPDATE completed", "burn-down batched: CPU per job",
		"JOB.UPDATE completed + the next RPOP in one pipeline", "burn-down, client package worker", "burn-down, agw",
		"burn-down, Python package worker", "hand-written redis-py loop",
		"continuous: completed", "single jobs, 4 producers", "submit: redis-cli --pipe", "one connection, pipeline of 100", "batches of 1,000", "pickup latency, idle worker p99",
		"50 idle blocked BRPOPs: agq RSS", "50 idle blocked BRPOPs: pickup p99",
		"dashboard over 3000 jobs: overview", "fan-in of 200: last parent's completion to the child's pickup",
		"burn-down of three-step jobs, 300 jobs", "1000 fair keys", "fair share: shares served for weights 1:2:4",
		"fair share: quiet key pickup p99", "three-step jobs: CPU per job", "dashboard over 3000 jobs: failed, half-way down",
		"wake: JOB.SIGNAL +OK on node B to the awaiting job's re-delivery (BLMPOP on node A) p99",
		"wake: awaited job's completion +OK on node B to the parent's re-delivery (BLMPOP on node A) p99"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report has no %q row", want)
		}
	}
}

// With -pgbouncer, agq's pool goes through PgBouncer in transaction mode and
// every burn-down still works each job.
func TestBenchmarkRunsThroughPgBouncer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	r, err := run(ctx, options{jobs: 300, workers: 8, batch: 20, producers: 4, only: "burn", pgbouncer: true}, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	r.print(&out)
	t.Logf("\n%s", out.String())
	for _, want := range []string{"through PgBouncer, transaction mode", "burn-down, 300 jobs", "BLMPOP COUNT 20 + pipelined JOB.UPDATE completed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report has no %q row", want)
		}
	}
}
