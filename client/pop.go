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

// waitFree waits until a slot is free and returns how many are; 0 when
// popping stopped. While jobs are ending (their reports on the way) and
// fewer than half the slots are free, it waits for those slots too: one
// pop for many slots, not one for each.
func (w *Worker) waitFree() int {
	for {
		w.mu.Lock()
		free, ending := w.free, w.ending
		w.mu.Unlock()
		if free > 0 && (ending == 0 || 2*free >= w.opts.Concurrency) {
			return free
		}
		select {
		case <-w.freed:
		case <-w.popCtx.Done():
			return 0
		}
	}
}

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
		w.jobs.Go(func() { w.runJob(r) })
	}
}

func (w *Worker) track(msg *jobMessage) *runningJob {
	j := &Job{msg: msg, w: w}
	r := &runningJob{job: j, started: time.Now()}
	r.ctx, r.cancel = context.WithCancelCause(w.jobsCtx)
	j.run = r
	w.mu.Lock()
	w.free--
	w.running[msg.JobID] = r
	w.mu.Unlock()
	return r
}

// handlerReturned counts r among the jobs whose slot frees soon.
func (w *Worker) handlerReturned(r *runningJob) {
	w.mu.Lock()
	w.ending++
	r.ending = true
	w.mu.Unlock()
}

func (w *Worker) untrack(r *runningJob) {
	w.mu.Lock()
	w.free++
	if r.ending {
		w.ending--
	}
	if w.running[r.job.ID()] == r {
		delete(w.running, r.job.ID())
	}
	w.mu.Unlock()
	select {
	case w.freed <- struct{}{}:
	default:
	}
}
