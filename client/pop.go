package client

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// A worker of more than one slot pops with two loops, each on its own
// connection and taking up to half the slots at a time: while agq claims
// one batch, the slots of the other are refilled, and PostgreSQL runs both
// claims at once. The first loop waits in BLMPOP; the second takes only
// what is there already (LMPOP), and after finding nothing waits until
// the first gets a full batch, so that an idle worker holds one blocked
// connection and a trickle of jobs costs no second pop.
type popper struct {
	conn     *redis.Client // closed to cut a blocked pop off
	blocking bool
	freed    chan struct{} // a slot was freed or a report answered (capacity 1)
}

// popLoop keeps the slots full: whenever some are free it takes up to
// that many jobs (at most its share) with one pop, from the first of the
// queues that has any.
func (w *Worker) popLoop(p *popper) {
	keys := make([]string, len(w.opts.Queues))
	for i, q := range w.opts.Queues {
		keys[i] = "queue:" + q
	}
	b := w.newBackoff()
	for {
		n := w.reserve(p)
		if n == 0 {
			return
		}
		if err := w.ensureRegistered(w.popCtx); err != nil {
			w.release(n)
			return
		}
		var res *redis.KeyValuesCmd
		if p.blocking {
			res = p.conn.BLMPop(w.popCtx, w.opts.PopTimeout, "RIGHT", int64(n), keys...)
		} else {
			res = p.conn.LMPop(w.popCtx, "RIGHT", int64(n), keys...)
		}
		queue, raws, err := res.Result()
		w.release(n - len(raws))
		switch classify(err) {
		case outcomeOK:
			b.Reset()
			w.start(queue, raws)
			if p.blocking && len(raws) == n {
				w.signalPopped() // a full batch: more may wait
			}
			continue
		case outcomeNil:
			b.Reset()
			if !p.blocking {
				// A full batch signalled before this pop found nothing
				// is stale: wait for the next one.
				w.drainPopped()
				if !w.waitPopped() {
					return
				}
			}
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
		w.log.Warn("pop failed", "error", err, "retry_in", wait)
		if !sleep(w.popCtx, wait) {
			return
		}
	}
}

// signalPopped tells the second loop that the first got a full batch.
func (w *Worker) signalPopped() {
	select {
	case w.popped <- struct{}{}:
	default:
	}
}

// drainPopped forgets a full batch signalled and not yet waited for.
func (w *Worker) drainPopped() {
	select {
	case <-w.popped:
	default:
	}
}

// waitPopped waits until the first loop gets a full batch; false when
// popping stopped.
func (w *Worker) waitPopped() bool {
	select {
	case <-w.popped:
		return true
	case <-w.popCtx.Done():
		return false
	}
}

// popSettle is how long a pop loop waits, after a slot freed, for more
// to free: a burst of short jobs ends within it, and one pop then serves
// all their slots.
const popSettle = 2 * time.Millisecond

// reserve waits until a slot is free and takes as many as are, up to
// half the worker's slots, for p's next pop; 0 when popping stopped. It
// takes them at once when that many are free, else popSettle after it
// first saw one free. Popping pauses while many final reports wait for
// agq: a worker that cannot report takes no more jobs.
func (w *Worker) reserve(p *popper) int {
	share := (w.opts.Concurrency + 1) / 2
	var settle *time.Timer
	var settled <-chan time.Time
	defer func() {
		if settle != nil {
			settle.Stop()
		}
	}()
	for {
		w.mu.Lock()
		if free := w.free; free > 0 && w.unreported < w.reportBacklog() {
			if free >= share || settle != nil && settled == nil {
				n := min(free, share)
				w.free -= n
				w.mu.Unlock()
				return n
			}
			if settle == nil {
				settle = time.NewTimer(popSettle)
				settled = settle.C
			}
		}
		w.mu.Unlock()
		select {
		case <-p.freed:
		case <-settled:
			settled = nil
		case <-w.popCtx.Done():
			return 0
		}
	}
}

// release gives back n slots a pop reserved and did not fill.
func (w *Worker) release(n int) {
	if n == 0 {
		return
	}
	w.mu.Lock()
	w.free += n
	w.mu.Unlock()
	w.signalFreed()
}

// reportBacklog is how many final reports may wait before popping pauses.
func (w *Worker) reportBacklog() int { return max(2*w.opts.Concurrency, maxReportBatch) }

// start hands each delivered job to a slot of its own, which its pop
// reserved: the slots decode their jobs, so that the next pop goes out at
// once.
func (w *Worker) start(queue string, raws []string) {
	w.jobs.Add(len(raws))
	for _, raw := range raws {
		w.runInSlot(delivery{queue, raw})
	}
}

// delivery is a job as BLMPOP delivered it.
type delivery struct{ queue, raw string }

// runInSlot hands a delivered job to an idle slot goroutine, or starts
// one. Slot goroutines outlive their jobs, so a job does not pay for a new
// goroutine and the growth of its stack; there are about as many as the
// worker's concurrency, and they end when Run returns.
func (w *Worker) runInSlot(d delivery) {
	select {
	case w.idleSlots <- d:
	default:
		go w.slot(d)
	}
}

func (w *Worker) slot(d delivery) {
	for {
		if r := w.track(d); r != nil {
			w.runJob(r)
		}
		select {
		case d = <-w.idleSlots:
		case <-w.slotsEnd:
			return
		}
	}
}

// track decodes a delivered job and keeps it as this worker's until agq
// has its final report; nil when it has no readable job_id, whose slot is
// then free again.
func (w *Worker) track(d delivery) *runningJob {
	// The job's three records in one allocation.
	t := &struct {
		msg jobMessage
		job Job
		run runningJob
	}{}
	msg, j, r := &t.msg, &t.job, &t.run
	if err := decodeJob(d.raw, msg); err != nil || msg.JobID == "" {
		w.log.Error("received a job without a readable job_id; agq delivers it again after its acknowledgement timeout",
			"queue", d.queue, "error", err)
		w.handlerReturned(false)
		w.jobs.Done()
		return nil
	}
	*j = Job{msg: msg, w: w, run: r}
	r.job = j
	r.ctx, r.cancel = context.WithCancelCause(w.jobsCtx)
	w.mu.Lock()
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
	for _, p := range w.poppers {
		select {
		case p.freed <- struct{}{}:
		default:
		}
	}
}
