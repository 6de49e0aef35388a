package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agq/agq/client"
	"github.com/agq/agq/internal/agqtest"
)

// A program importing only client builds none of the server and no pgx:
// of agq, only the client and plainjson, which imports nothing of agq
// (internal/layering keeps the list of what clients share).
func TestImportsNoServerPackage(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/agq/agq/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	own := []string{"github.com/agq/agq/client", "github.com/agq/agq/internal/plainjson"}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.Contains(pkg, "jackc/pgx") || strings.HasPrefix(pkg, "github.com/agq/agq/") && !slices.Contains(own, pkg) {
			t.Errorf("client depends on %s", pkg)
		}
	}
}

func TestWorker(t *testing.T) {
	t.Parallel()

	t.Run("KeepsItsSlotsFullAndNeverOverfills", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var cur, most atomic.Int64
		b.startWorker(t, "slots-1", map[string]client.HandlerFunc{"work": func(ctx context.Context, j *client.Job) (any, error) {
			n := cur.Add(1)
			defer cur.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(100 * time.Millisecond)
			return nil, nil
		}}, nil)
		ids := b.submit(t, 32, client.JobSpec{Type: "work"})
		for _, j := range b.waitAll(t, ids) {
			if j.Status != "completed" {
				t.Fatalf("job %s is %s", j.ID, j.Status)
			}
		}
		if most.Load() != 4 {
			t.Fatalf("at most %d jobs ran at once; want all 4 slots busy and never more", most.Load())
		}
	})

	t.Run("FillsManySlotsWithOnePop", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.submit(t, 200, client.JobSpec{Type: "noop"})
		before := pops(t, b.agq)
		b.startWorker(t, "batch-1", map[string]client.HandlerFunc{"noop": func(context.Context, *client.Job) (any, error) { return "ok", nil }},
			func(o *client.WorkerOptions) { o.Concurrency = 50 })
		for _, j := range b.waitAll(t, ids) {
			if j.Status != "completed" || !strings.Contains(string(j.Result), `"output":"ok"`) {
				t.Fatalf("job %s is %s with %s", j.ID, j.Status, j.Result)
			}
		}
		n := pops(t, b.agq).minus(before)
		t.Logf("200 jobs in %d BLMPOPs and %d LMPOPs", n.blmpop, n.lmpop)
		if n.blmpop+n.lmpop > 40 {
			t.Fatalf("200 jobs took %d pops with 50 slots", n.blmpop+n.lmpop)
		}
	})

	t.Run("TakesWithTwoPopsOnlyWhileABacklogLasts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var cur, most atomic.Int64
		before := pops(t, b.agq)
		b.startWorker(t, "two-pops-1", map[string]client.HandlerFunc{"work": func(context.Context, *client.Job) (any, error) {
			n := cur.Add(1)
			defer cur.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(2 * time.Millisecond)
			return nil, nil
		}}, func(o *client.WorkerOptions) { o.Concurrency = 20; o.PopTimeout = time.Second })
		// Idle, the worker waits in BLMPOP; the LMPOP beside it tried once.
		time.Sleep(2500 * time.Millisecond)
		idle := pops(t, b.agq).minus(before)
		if idle.lmpop > 1 || idle.blmpop < 1 {
			t.Fatalf("an idle worker popped %d times with BLMPOP and %d with LMPOP in 2.5s", idle.blmpop, idle.lmpop)
		}
		ids := b.submit(t, 600, client.JobSpec{Type: "work"})
		b.waitAll(t, ids)
		busy := pops(t, b.agq).minus(before)
		t.Logf("idle: %+v; after 600 jobs: %+v; at most %d running", idle, busy, most.Load())
		if busy.lmpop <= idle.lmpop {
			t.Fatalf("the backlog was taken by BLMPOP alone: %+v", busy)
		}
		if most.Load() > 20 {
			t.Fatalf("%d jobs ran at once with 20 slots", most.Load())
		}
		// Idle again: no LMPOP while nothing waits.
		time.Sleep(2500 * time.Millisecond)
		if again := pops(t, b.agq).minus(before); again.lmpop > busy.lmpop+1 {
			t.Fatalf("an idle worker went on with LMPOP: %+v, then %+v", busy, again)
		}
	})

	t.Run("CancellationReachesTheHandlerWithinAHeartbeat", func(t *testing.T) {
		t.Parallel()
		b := setup(t, heartbeatEvery(time.Second))
		started := make(chan struct{})
		stopped := make(chan error, 1)
		b.startWorker(t, "cancel-1", map[string]client.HandlerFunc{"long": func(ctx context.Context, j *client.Job) (any, error) {
			close(started)
			<-ctx.Done()
			stopped <- context.Cause(ctx)
			return nil, ctx.Err()
		}}, nil)
		ids := b.submit(t, 1, client.JobSpec{Type: "long"})
		<-started
		asked := time.Now()
		if err := b.producer.Cancel(context.Background(), ids[0]); err != nil {
			t.Fatal(err)
		}
		select {
		case <-stopped:
			t.Logf("the handler's ctx ended %v after JOB.CANCEL", time.Since(asked))
		case <-time.After(1500 * time.Millisecond):
			t.Fatal("the handler's ctx did not end within a heartbeat of JOB.CANCEL")
		}
		if j := b.waitAll(t, ids)[0]; j.Status != "cancelled" {
			t.Fatalf("job is %s", j.Status)
		}
	})

	t.Run("DrainFinishesRunningJobsAndUnregisters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var running sync.WaitGroup
		running.Add(2)
		rw := b.startWorker(t, "drain-1", map[string]client.HandlerFunc{"slow": func(ctx context.Context, j *client.Job) (any, error) {
			running.Done()
			time.Sleep(500 * time.Millisecond)
			return "done", ctx.Err()
		}}, func(o *client.WorkerOptions) { o.Concurrency = 2 })
		ids := b.submit(t, 2, client.JobSpec{Type: "slow"})
		running.Wait()
		if err := rw.wait(t); err != nil {
			t.Fatal(err)
		}
		later := b.submit(t, 1, client.JobSpec{Type: "slow"})
		for _, j := range b.waitAll(t, ids) {
			if j.Status != "completed" {
				t.Fatalf("job %s is %s after the drain", j.ID, j.Status)
			}
		}
		b.waitWorkerState(t, "drain-1", "UNREGISTERED")
		if j, err := b.producer.Get(context.Background(), later[0]); err != nil || j.Status != "queued" {
			t.Fatalf("a job submitted after the drain: %+v, %v", j, err)
		}
	})

	t.Run("DrainCancelsJobsPastTheGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan struct{})
		rw := b.startWorker(t, "grace-1", map[string]client.HandlerFunc{"stuck": func(ctx context.Context, j *client.Job) (any, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}}, func(o *client.WorkerOptions) { o.ShutdownGrace = 200 * time.Millisecond })
		ids := b.submit(t, 1, client.JobSpec{Type: "stuck", RetryBackoff: time.Hour})
		<-started
		if err := rw.wait(t); err != nil {
			t.Fatal(err)
		}
		j, err := b.producer.Get(context.Background(), ids[0])
		if err != nil || j.Status != "retrying" || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "shutting down") {
			t.Fatalf("job %+v, %v", j, err)
		}
	})

	t.Run("APanicFailsTheAttemptOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWorker(t, "panic-1", map[string]client.HandlerFunc{
			"boom": func(context.Context, *client.Job) (any, error) { panic("kaboom") },
			"fine": func(context.Context, *client.Job) (any, error) { return "fine", nil },
		}, nil)
		boom := b.submit(t, 1, client.JobSpec{Type: "boom", MaxAttempts: 1})
		j := b.waitAll(t, boom)[0]
		if j.Status != "failed" || len(j.Errors) != 1 || j.Errors[0].Error != "panic: kaboom" {
			t.Fatalf("job %+v", j)
		}
		if j := b.waitAll(t, b.submit(t, 1, client.JobSpec{Type: "fine"}))[0]; j.Status != "completed" {
			t.Fatalf("after a panic, a job is %s", j.Status)
		}
	})

	t.Run("PermanentErrorsAndSnoozes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWorker(t, "errors-1", map[string]client.HandlerFunc{
			"bad":   func(context.Context, *client.Job) (any, error) { return nil, client.Permanent(errors.New("bad input")) },
			"later": func(context.Context, *client.Job) (any, error) { return nil, client.Snooze(time.Hour) },
		}, nil)
		bad := b.waitAll(t, b.submit(t, 1, client.JobSpec{Type: "bad", MaxAttempts: 5}))[0]
		if bad.Status != "failed" || bad.Attempt != 1 || bad.Errors[0].Error != "bad input" {
			t.Fatalf("a permanent error: %+v", bad)
		}
		later := b.submit(t, 1, client.JobSpec{Type: "later"})[0]
		agqtest.Eventually(t, 10*time.Second, func() error {
			j, err := b.producer.Get(context.Background(), later)
			if err != nil || j.Status != "scheduled" || !strings.Contains(string(j.Raw), `"snoozes":1`) {
				return fmt.Errorf("%+v, %v", j, err)
			}
			return nil
		})
	})

	t.Run("AcknowledgesLongJobsBeforeTheAckTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ackTimeout(time.Second))
		var runs atomic.Int64
		b.startWorker(t, "ack-1", map[string]client.HandlerFunc{"long": func(ctx context.Context, j *client.Job) (any, error) {
			runs.Add(1)
			time.Sleep(2500 * time.Millisecond)
			return nil, nil
		}}, func(o *client.WorkerOptions) { o.AckAfter = 200 * time.Millisecond })
		j := b.waitAll(t, b.submit(t, 1, client.JobSpec{Type: "long"}))[0]
		if j.Status != "completed" || j.Attempt != 1 || runs.Load() != 1 {
			t.Fatalf("job %+v after %d runs", j, runs.Load())
		}
	})

	t.Run("EndsAHandlerOnTheJobTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWorker(t, "timeout-1", map[string]client.HandlerFunc{"slow": func(ctx context.Context, j *client.Job) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}}, nil)
		j := b.waitAll(t, b.submit(t, 1, client.JobSpec{Type: "slow", Timeout: time.Second, MaxAttempts: 1}))[0]
		if j.Status != "failed" || !strings.Contains(j.Errors[0].Error, "deadline exceeded") {
			t.Fatalf("job %+v", j)
		}
	})

	t.Run("ExitsWhenItsIDBelongsToAnotherKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other := b.agq.CreateKey(t, "worker", "someone-else")
		w, err := client.NewWorker(client.WorkerOptions{Addr: b.agq.Addr, WorkerID: "taken-1", Key: other})
		if err != nil {
			t.Fatal(err)
		}
		b.agq.CreateKey(t, "worker", "taken-1")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Run(ctx); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("Run: %v", err)
		}
	})
}

// popCounts are the pops agq served, from its metrics.
type popCounts struct{ blmpop, lmpop int }

func (c popCounts) minus(o popCounts) popCounts {
	return popCounts{c.blmpop - o.blmpop, c.lmpop - o.lmpop}
}

func pops(t *testing.T, a *agqtest.Agq) popCounts {
	t.Helper()
	n := commandCounts(t, a)
	return popCounts{blmpop: n["blmpop"], lmpop: n["lmpop"]}
}

// commandCounts are the commands a has run, by lower-case name, whatever
// their result (agq_commands_total).
func commandCounts(t *testing.T, a *agqtest.Agq) map[string]int {
	t.Helper()
	res, err := http.Get("http://" + a.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	counts := map[string]int{}
	for _, line := range strings.Split(string(body), "\n") {
		labels, ok := strings.CutPrefix(line, "agq_commands_total{")
		if !ok {
			continue
		}
		_, name, ok := strings.Cut(labels, `command="`)
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, `"`)
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		counts[strings.ToLower(name)] += int(v)
	}
	return counts
}
