package worker

import (
	"context"
)

// heartbeatLoop sends WORKER.HEARTBEAT with the stats every interval the
// server named, and acts on what the reply says. A failed heartbeat is
// retried on the backoff schedule, never later than the interval: three
// missed intervals and the server declares this worker dead.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	b := w.newBackoff()
	next := w.heartbeatInterval()
	for sleep(ctx, next) {
		next = w.heartbeatInterval()
		if err := w.ensureRegistered(ctx); err != nil {
			return // ctx ended
		}
		reply, err := w.cmdHeartbeat(ctx, w.statsJSON())
		switch classify(err) {
		case outcomeOK:
			b.Reset()
			w.onHeartbeatReply(reply)
			continue
		case outcomeNotRegistered:
			w.log.Warn().Err(err).Msg("agq does not know this worker; registering again")
			w.markStale()
		case outcomeConn:
			w.markStale()
		}
		if ctx.Err() != nil {
			return
		}
		next = min(b.Next(), next)
		w.log.Warn().Err(err).Dur("retry_in", next).Msg("heartbeat failed")
	}
}

func (w *Worker) onHeartbeatReply(reply string) {
	r, err := parseHeartbeatReply(reply)
	if err != nil {
		w.log.Warn().Err(err).Msg("heartbeat reply not understood")
		return
	}
	if len(r.Unknown) > 0 {
		w.log.Debug().Strs("tokens", r.Unknown).Msg("heartbeat reply has tokens agw does not know")
	}
	for _, id := range r.Cancel {
		if w.cancelJob(id, errCancelledByServer) {
			w.log.Info().Str("job_id", id).Msg("agq cancelled the job; stopping it")
		}
	}
	if r.Drain && !w.draining.Swap(true) {
		// Drain is one-way until agw exits: finish the running jobs,
		// pop nothing more, keep heartbeating so the server still sees
		// the worker (and keeps extending its leases), stay up until
		// the operator stops it.
		w.log.Info().Int64("active_jobs", w.active.Load()).Msg("agq asked this worker to drain: finishing running jobs, taking no new ones")
		w.stopPop()
	}
}

func (w *Worker) statsJSON() []byte {
	return mustMarshal(w.sampler.Sample(w.counters()))
}
