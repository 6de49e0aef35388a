package client

import (
	"context"
	"sync"
)

// maxReportBatch bounds the reports one pipeline carries.
const maxReportBatch = 1000

// reportPipelines is how many pipelines of reports may be in flight at
// once: while one waits for its commit, the next gathers reports.
const reportPipelines = 4

// pendingReport is a JOB.UPDATE waiting for its pipeline.
type pendingReport struct {
	ctx   context.Context
	jobID string
	body  []byte
	done  chan error
}

// report sends JOB.UPDATE job_id body together with the reports of other
// slots, in one pipeline, and returns its reply's error.
func (w *Worker) report(ctx context.Context, jobID string, body []byte) error {
	p := &pendingReport{ctx: ctx, jobID: jobID, body: body, done: make(chan error, 1)}
	select {
	case w.reports <- p:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reporter gathers the reports waiting and sends each gathering as one
// pipeline; reports about different jobs in one pipeline share a commit
// on agq, and each still gets its own reply.
func (w *Worker) reporter() {
	inFlight := make(chan struct{}, reportPipelines)
	var wg sync.WaitGroup
	defer wg.Wait()
	for first := range w.reports {
		batch := []*pendingReport{first}
	gather:
		for len(batch) < maxReportBatch {
			select {
			case p, ok := <-w.reports:
				if !ok {
					break gather
				}
				batch = append(batch, p)
			default:
				break gather
			}
		}
		inFlight <- struct{}{}
		wg.Go(func() {
			defer func() { <-inFlight }()
			w.sendReports(batch)
		})
	}
}

func (w *Worker) sendReports(batch []*pendingReport) {
	if len(batch) == 1 {
		p := batch[0]
		p.done <- w.rdb.Do(p.ctx, "JOB.UPDATE", p.jobID, p.body).Err()
		return
	}
	pipe := w.rdb.Pipeline()
	for _, p := range batch {
		pipe.Do(w.reportCtx, "JOB.UPDATE", p.jobID, p.body)
	}
	cmds, err := pipe.Exec(w.reportCtx)
	for i, p := range batch {
		if i < len(cmds) {
			p.done <- cmds[i].Err()
		} else {
			p.done <- err
		}
	}
}
