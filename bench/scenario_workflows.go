package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/client"
)

// fanInRuns numbers the fan-in runs, so that each submits jobs of its own.
var fanInRuns atomic.Int64

// agqFanIn submits n parents and one child after all of them in one
// pipeline, works the parents off with BLMPOP COUNT and pipelined
// reports while one worker waits for the child, and answers the time from
// the reply to the last parent's completion to the child's pop.
func agqFanIn(ctx context.Context, s *agqServer, ws []*worker, n, count int) (time.Duration, error) {
	if len(ws) < 2 {
		return 0, fmt.Errorf("a fan-in needs two workers")
	}
	run := fanInRuns.Add(1)
	parents, child := fmt.Sprintf("fanin-%d", run), fmt.Sprintf("fanin-%d-child", run)
	// A JOB.SUBMIT array holds at most 10,000 jobs: the parents go in one,
	// the child in a second JOB.SUBMIT of the same pipeline.
	var b strings.Builder
	b.WriteByte('[')
	after := make([]string, n)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		after[i] = fmt.Sprintf("%s-%d", parents, i)
		fmt.Fprintf(&b, `{"job_id":%q,"queue":%q,"type":"bench"}`, after[i], parents)
	}
	b.WriteByte(']')
	ids, _ := json.Marshal(after)
	pipe := s.admin.Pipeline()
	pipe.Do(ctx, "JOB.SUBMIT", b.String())
	pipe.Do(ctx, "JOB.SUBMIT", fmt.Sprintf(`{"job_id":%q,"queue":%q,"type":"bench","after":%s}`, child, child, ids))
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("submitting the graph: %w", err)
	}

	picked := make(chan time.Time, 1)
	popErr := make(chan error, 1)
	go func() {
		res, err := ws[0].c.BRPop(ctx, time.Minute, "queue:"+child).Result()
		if err != nil {
			popErr <- fmt.Errorf("waiting for the child: %w", err)
			return
		}
		picked <- time.Now()
		var d delivered
		if err := json.Unmarshal([]byte(res[1]), &d); err == nil {
			ws[0].c.Do(ctx, "JOB.UPDATE", d.ID, fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, d.Attempt, d.Delivery))
		}
	}()

	var done atomic.Int64
	var last atomic.Int64 // unix nanoseconds of the last completion's reply
	var wg sync.WaitGroup
	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make(chan error, len(ws))
	for _, w := range ws[1:] {
		wg.Go(func() {
			for done.Load() < int64(n) {
				k, err := w.workBatch(workCtx, parents, count)
				if err != nil {
					errs <- err
					stop()
					return
				}
				if done.Add(int64(k)) >= int64(n) && k > 0 {
					last.Store(time.Now().UnixNano())
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	select {
	case at := <-picked:
		return at.Sub(time.Unix(0, last.Load())), nil
	case err := <-popErr:
		return 0, err
	}
}

// settleAgq waits, for at most limit, until agq has moved every finished
// job into history and no autovacuum worker is busy: a burn-down then
// pays for none of the moves and vacuums the one before it left (the
// mover takes jobs finished 5 s before), which would otherwise fall on a
// run of another kind.
func settleAgq(ctx context.Context, cl *cluster, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	conn, err := pgx.Connect(ctx, cl.url("agq"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for time.Now().Before(deadline) {
		var finished bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE status IN ('completed', 'failed', 'cancelled'))`).Scan(&finished); err != nil {
			return err
		}
		if !finished {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return cl.autovacuumsQuiet(ctx, time.Until(deadline))
}

// stepNames are the steps of a benchmark three-step job.
var stepNames = []string{"charge", "ship", "mail"}

// agqBurnDownSteps works off n pre-submitted jobs as workers running each
// as three steps, then JOB.UPDATE completed. With next, a step's
// STEP.COMPLETE begins the next step (… NEXT step), as a worker does that
// knows its next step, and the last STEP.COMPLETE and the report share a
// round trip: STEP.BEGIN, two STEP.COMPLETE … NEXT, STEP.COMPLETE and
// JOB.UPDATE pipelined, five round trips with the pop; without, each step
// is a STEP.BEGIN and a STEP.COMPLETE of its own, and each command a round
// trip, eight with the pop.
func agqBurnDownSteps(ctx context.Context, cl *cluster, s *agqServer, ws []*worker, n int, next bool) (measure, error) {
	queue := "burn-steps"
	return burnDown(ctx, cl, s, ws, queue, n, false, func(w *worker) (int, error) {
		return w.workSteps(ctx, queue, next)
	})
}

// agqBurnDownPadded works off n pre-submitted plain jobs with the round
// trips of a three-step job (agqBurnDownSteps with next): three PINGs
// between each pop and its report, five round trips a job. agq answers a
// PING without PostgreSQL, so its rate bounds what a record of steps,
// however cheap, could bring three-step jobs to.
func agqBurnDownPadded(ctx context.Context, cl *cluster, s *agqServer, ws []*worker, n int) (measure, error) {
	queue := "burn-padded"
	return burnDown(ctx, cl, s, ws, queue, n, false, func(w *worker) (int, error) {
		d, ok, err := w.pop(ctx, queue, time.Second)
		if !ok || err != nil {
			return 0, err
		}
		for range stepNames {
			if err := w.c.Ping(ctx).Err(); err != nil {
				return 0, err
			}
		}
		doc := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, d.Attempt, d.Delivery)
		return 1, w.c.Do(ctx, "JOB.UPDATE", d.ID, doc).Err()
	})
}

// agqBurnDownClientSteps works off n pre-submitted jobs with one Worker
// of the client package of slots slots, as a Go user would run jobs of
// steps: its handler runs three client.Step calls (none, with plain,
// returning at once).
func agqBurnDownClientSteps(ctx context.Context, cl *cluster, s *agqServer, n, slots int, plain bool) (measure, error) {
	queue, id := "burn-client-steps", "client-steps"
	if plain {
		queue, id = "burn-client-plain", "client-plain"
	}
	if err := s.submitDocs(ctx, n, 1000, func(int) string { return jobDoc(queue, 0) }); err != nil {
		return measure{}, err
	}
	return agqWorkClientWith(ctx, cl, s, queue, n, id, slots, func(ctx context.Context, j *client.Job) (any, error) {
		if plain {
			return nil, nil
		}
		for _, step := range stepNames {
			if _, err := client.Step(ctx, j, step, nil, func(context.Context) (bool, error) { return true, nil }); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
}

// workSteps pops a job from queue, waiting up to a second, runs its three
// steps and reports it completed; it answers how many jobs it completed.
func (w *worker) workSteps(ctx context.Context, queue string, next bool) (int, error) {
	d, ok, err := w.pop(ctx, queue, time.Second)
	if !ok || err != nil {
		return 0, err
	}
	doc := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, d.Attempt, d.Delivery)
	if !next {
		for _, step := range stepNames {
			if err := w.c.Do(ctx, "STEP.BEGIN", d.ID, step, "DELIVERY", d.Delivery).Err(); err != nil {
				return 0, fmt.Errorf("STEP.BEGIN %s: %w", step, err)
			}
			if err := w.c.Do(ctx, "STEP.COMPLETE", d.ID, step, `{"ok":true}`, "DELIVERY", d.Delivery).Err(); err != nil {
				return 0, fmt.Errorf("STEP.COMPLETE %s: %w", step, err)
			}
		}
		return 1, w.c.Do(ctx, "JOB.UPDATE", d.ID, doc).Err()
	}
	if err := w.c.Do(ctx, "STEP.BEGIN", d.ID, stepNames[0], "DELIVERY", d.Delivery).Err(); err != nil {
		return 0, fmt.Errorf("STEP.BEGIN %s: %w", stepNames[0], err)
	}
	last := len(stepNames) - 1
	for i, step := range stepNames[:last] {
		reply, err := w.c.Do(ctx, "STEP.COMPLETE", d.ID, step, `{"ok":true}`, "NEXT", stepNames[i+1], "DELIVERY", d.Delivery).Text()
		if err != nil {
			return 0, fmt.Errorf("STEP.COMPLETE %s: %w", step, err)
		}
		if !strings.Contains(reply, `"execute":true`) {
			return 0, fmt.Errorf("STEP.COMPLETE %s NEXT %s answered %s", step, stepNames[i+1], reply)
		}
	}
	// The last step's completion and the job's report go in one round
	// trip: nothing runs between them, and agq applies them in order.
	pipe := w.c.Pipeline()
	complete := pipe.Do(ctx, "STEP.COMPLETE", d.ID, stepNames[last], `{"ok":true}`, "DELIVERY", d.Delivery)
	report := pipe.Do(ctx, "JOB.UPDATE", d.ID, doc)
	pipe.Exec(ctx)
	if err := complete.Err(); err != nil {
		return 0, fmt.Errorf("STEP.COMPLETE %s: %w", stepNames[last], err)
	}
	return 1, report.Err()
}

// thousands formats n with commas: 10,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
