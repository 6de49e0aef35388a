package worker

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// registerAtStart registers before any work. The server being unreachable
// is retried with backoff; a refusal (a wrong key, an invalid id, an id
// that belongs to another key) is returned: it will not fix itself.
func (w *Worker) registerAtStart(ctx context.Context) error {
	w.regMu.Lock()
	defer w.regMu.Unlock()
	return w.registerLocked(ctx, func(error) bool { return true })
}

// ensureRegistered registers again if a connection was lost or the server
// said it does not know this worker since the last registration. Concurrent
// callers wait for one registration. Once running, no refusal is final: the
// worker keeps trying, with backoff, until ctx ends.
func (w *Worker) ensureRegistered(ctx context.Context) error {
	if w.isRegistered() {
		return nil
	}
	w.regMu.Lock()
	defer w.regMu.Unlock()
	if w.isRegistered() {
		return nil // registered by another goroutine meanwhile
	}
	return w.registerLocked(ctx, func(error) bool { return false })
}

// markStale makes the next ensureRegistered register again: a connection
// was lost (the server may have restarted or declared this worker dead
// meanwhile), or the server said it does not know this worker. It never
// blocks, even while a registration is being retried.
func (w *Worker) markStale() { w.lost.Add(1) }

// isRegistered reports whether the last successful registration began
// after the last time the registration was marked stale.
func (w *Worker) isRegistered() bool { return w.registeredAt.Load() == w.lost.Load() }

func (w *Worker) registerLocked(ctx context.Context, fatal func(error) bool) error {
	b := w.newBackoff()
	for {
		// A connection lost while the registration is under way marks
		// it stale again: it counts only from what it saw at its start.
		seen := w.lost.Load()
		reply, err := w.cmdRegister(ctx, w.withRunningJobs(w.regBody))
		if err == nil {
			w.registeredAt.Store(seen)
			w.registered(reply)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if classify(err) != outcomeConn {
			err = fmt.Errorf("agq refused the registration: %w", err)
			if fatal(err) {
				return err
			}
		}
		wait := b.Next()
		w.log.Warn().Err(err).Dur("retry_in", wait).Msg("registration failed")
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

func (w *Worker) registered(reply string) {
	r, err := parseRegisterReply(reply)
	if err != nil {
		w.log.Warn().Err(err).Msg("registration reply not understood; keeping the previous heartbeat interval")
	}
	if r.WorkerID != "" && r.WorkerID != w.cfg.WorkerID {
		w.log.Warn().Str("reply_worker_id", r.WorkerID).Msg("agq registered a different worker id than asked for")
	}
	if r.HeartbeatInterval > 0 {
		w.interval.Store(int64(r.HeartbeatInterval))
	}
	w.log.Info().Dur("heartbeat_interval", w.heartbeatInterval()).Msg("registered")
}

func (w *Worker) heartbeatInterval() time.Duration { return time.Duration(w.interval.Load()) }

// withRunningJobs adds the jobs this process runs to the registration: agq
// gives back the jobs an earlier process with the same id held and lost.
func (w *Worker) withRunningJobs(body []byte) []byte {
	w.jobsMu.Lock()
	ids := make([]string, 0, len(w.running))
	for id := range w.running {
		ids = append(ids, id)
	}
	w.jobsMu.Unlock()
	sort.Strings(ids)
	return withField(body, "running_jobs", mustMarshal(ids))
}
