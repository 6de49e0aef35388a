package client

import (
	"context"
	"encoding/json"
	"time"
)

// popLoop keeps the slots full: whenever some are free it takes up to that
// many jobs with one BLMPOP, from the first of the queues that has any.
func (w *Worker) popLoop() {
	keys := make([]string, len(w.opts.Queues))
	for i, q := range w.opts.Queues {
		keys[i] = "queue:" + q
	}
	b := w.newBackoff()
	for {
		free := w.waitFree()
		if free == 0 {
			return
		}
		if err := w.ensureRegistered(w.popCtx); err != nil {
			return
		}
		res := w.pop.BLMPop(w.popCtx, w.opts.PopTimeout, "RIGHT", int64(free), keys...)
		queue, raws, err := res.Result()
		switch classify(err) {
		case outcomeOK:
			b.Reset()
			w.start(queue, raws)
			continue
		case outcomeNil:
			b.Reset()
			continue
		case outcomeNoPerm:
			w.fail(err)
			return
		case outcomeNotRegistered:
			w.reg.lost()
		case outcomeConn:
			if w.popCtx.Err() != nil {
				return
			}
			w.reg.lost()
		}
		wait := b.Next()
		w.log.Warn("BLMPOP failed", "error", err, "retry_in", wait)
		if !sleep(w.popCtx, wait) {
			return
		}
	}
}

// popSettle is how long the pop loop waits, after a slot freed, for more
// to free: a burst of short jobs ends within it, and one pop then serves
// all their slots.
const popSettle = 2 * time.Millisecond

// waitFree waits until a slot is free and returns how many are; 0 when
// popping stopped. It pops at once when half the slots are free, else
// popSettle after it first saw one free. Popping pauses while many final
// reports wait for agq: a worker that cannot report takes no more jobs.
func (w *Worker) waitFree() int {
	var settle *time.Timer
	var settled <-chan time.Time
	defer func() {
		if settle != nil {
			settle.Stop()
		}
	}()
	for {
		w.mu.Lock()
		free, unreported := w.free, w.unreported
		w.mu.Unlock()
		if free > 0 && unreported < w.reportBacklog() {
			if 2*free >= w.opts.Concurrency || settle != nil && settled == nil {
				return free
			}
			if settle == nil {
				settle = time.NewTimer(popSettle)
				settled = settle.C
			}
		}
		select {
		case <-w.freed:
		case <-settled:
			settled = nil
		case <-w.popCtx.Done():
			return 0
		}
	}
}

// reportBacklog is how many final reports may wait before popping pauses.
func (w *Worker) reportBacklog() int { return max(2*w.opts.Concurrency, maxReportBatch) }

// start runs each delivered job in a slot of its own.
func (w *Worker) start(queue string, raws []string) {
	for _, raw := range raws {
		var msg jobMessage
		if err := json.Unmarshal([]byte(raw), &msg); err != nil || msg.JobID == "" {
			w.log.Error("received a job without a readable job_id; agq delivers it again after its acknowledgement timeout",
				"queue", queue, "error", err)
			continue
		}
		msg.raw = raw
		r := w.track(&msg)
		w.jobs.Add(1)
		go w.runJob(r)
	}
}

func (w *Worker) track(msg *jobMessage) *runningJob {
	j := &Job{msg: msg, w: w}
	r := &runningJob{job: j}
	r.ctx, r.cancel = context.WithCancelCause(w.jobsCtx)
	j.run = r
	w.mu.Lock()
	w.free--
	w.running[msg.JobID] = r
	w.mu.Unlock()
	return r
}

// handlerReturned frees r's slot; its final report may still be on its way.
func (w *Worker) handlerReturned(reporting bool) {
	w.mu.Lock()
	w.free++
	if reporting {
		w.unreported++
	}
	w.mu.Unlock()
	w.signalFreed()
}

// untrack forgets r once agq has its final report (or it needs none).
func (w *Worker) untrack(r *runningJob, reported bool) {
	w.mu.Lock()
	if reported {
		w.unreported--
	}
	if w.running[r.job.ID()] == r {
		delete(w.running, r.job.ID())
	}
	w.mu.Unlock()
	r.cancel(nil)
	if reported {
		w.signalFreed()
	}
	w.jobs.Done()
}

func (w *Worker) signalFreed() {
	select {
	case w.freed <- struct{}{}:
	default:
	}
}
