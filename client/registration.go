package client

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// registration tracks whether agq knows this worker: stale counts the
// times it was marked lost (a dropped connection, "Worker not registered"),
// current is stale's value when the last registration began. The worker
// is registered while they are equal.
type registration struct {
	mu      sync.Mutex // one registration at a time
	stale   atomic.Uint64
	current atomic.Uint64
}

func (r *registration) ok() bool { return r.current.Load() == r.stale.Load() }
func (r *registration) lost()    { r.stale.Add(1) }

// registerAtStart registers before any work; an unreachable server is
// retried, a refusal returned.
func (w *Worker) registerAtStart(ctx context.Context) error {
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	return w.registerLocked(ctx)
}

// ensureRegistered registers again after the registration was marked lost;
// concurrent callers wait for one registration.
func (w *Worker) ensureRegistered(ctx context.Context) error {
	if w.reg.ok() {
		return nil
	}
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	if w.reg.ok() {
		return nil
	}
	err := w.registerLocked(ctx)
	if err != nil && ctx.Err() == nil {
		w.fail(err)
	}
	return err
}

func (w *Worker) registerLocked(ctx context.Context) error {
	b := w.newBackoff()
	for {
		seen := w.reg.stale.Load()
		reply, err := w.rdb.Do(ctx, "WORKER.REGISTER", w.registrationBody()).Text()
		switch classify(err) {
		case outcomeOK:
			w.reg.current.Store(seen)
			w.registered(reply)
			return nil
		case outcomeConn:
		default:
			return fmt.Errorf("client: agq refused the registration: %w", err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := b.Next()
		w.log.Warn("registration failed", "error", err, "retry_in", wait)
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

func (w *Worker) registered(reply string) {
	if w.opts.HeartbeatInterval == 0 {
		for _, tok := range strings.Fields(reply) {
			if v, ok := strings.CutPrefix(tok, "heartbeat_interval="); ok {
				if secs, err := strconv.ParseFloat(v, 64); err == nil && secs > 0 {
					w.interval.Store(int64(secs * float64(time.Second)))
				}
			}
		}
	}
	w.log.Info("registered", "heartbeat_interval", w.heartbeatInterval())
}

func (w *Worker) heartbeatInterval() time.Duration { return time.Duration(w.interval.Load()) }

// registrationBody is WORKER.REGISTER's JSON, with the jobs this process
// runs: agq gives back at once those an earlier process of this id lost.
func (w *Worker) registrationBody() []byte {
	types := slices.Clone(w.opts.Capabilities.Types)
	types = append(types, slices.Collect(maps.Keys(w.handlers))...)
	slices.Sort(types)
	running := w.runningIDs()
	slices.Sort(running)
	body, _ := json.Marshal(map[string]any{
		"worker_id":   w.opts.WorkerID,
		"hostname":    w.opts.Hostname,
		"platform":    runtime.GOOS + "-" + runtime.GOARCH,
		"agw_version": w.opts.Version,
		"capabilities": map[string][]string{
			"tools":         nonNil(w.opts.Capabilities.Tools),
			"agentic_units": nonNil(w.opts.Capabilities.AgenticUnits),
			"types":         nonNil(slices.Compact(types)),
		},
		"max_concurrent_jobs": w.opts.Concurrency,
		"tags":                nonNilMap(w.opts.Tags),
		"running_jobs":        nonNil(running),
	})
	return body
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// heartbeatLoop sends WORKER.HEARTBEAT every interval and acts on its
// reply's tokens. A failed heartbeat is retried sooner: three missed
// intervals and agq declares the worker dead.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	b := w.newBackoff()
	next := w.heartbeatInterval()
	for sleep(ctx, next) {
		next = w.heartbeatInterval()
		if err := w.ensureRegistered(ctx); err != nil {
			return
		}
		reply, err := w.rdb.Do(ctx, "WORKER.HEARTBEAT", w.opts.WorkerID, w.stats()).Text()
		switch classify(err) {
		case outcomeOK:
			b.Reset()
			w.onHeartbeat(reply)
			continue
		case outcomeNoPerm:
			w.fail(err)
			return
		case outcomeNotRegistered:
			w.log.Warn("agq does not know this worker; registering again")
			w.reg.lost()
		case outcomeConn:
			w.reg.lost()
		}
		if ctx.Err() != nil {
			return
		}
		next = min(b.Next(), next)
		w.log.Warn("heartbeat failed", "error", err, "retry_in", next)
	}
}

// onHeartbeat reads "OK [drain=true] [cancel=<id>,<id>]".
func (w *Worker) onHeartbeat(reply string) {
	tokens := strings.Fields(reply)
	if len(tokens) > 0 {
		tokens = tokens[1:] // "OK"
	}
	for _, tok := range tokens {
		key, value, _ := strings.Cut(tok, "=")
		switch key {
		case "drain":
			if value == "true" {
				w.log.Info("agq asked this worker to drain: finishing the running jobs, taking no new ones")
				w.endPopping()
			}
		case "cancel":
			for _, id := range strings.Split(value, ",") {
				if id != "" && w.cancelJob(id, errCancelledByServer) {
					w.log.Info("agq cancelled the job; stopping it", "job_id", id)
				}
			}
		}
	}
}

func (w *Worker) stats() []byte {
	var v any = w.Stats()
	if w.opts.HeartbeatStats != nil {
		v = w.opts.HeartbeatStats(w.Stats())
	}
	b, _ := json.Marshal(v)
	return b
}

// cancelListener hears job.cancel, which names a job as soon as its
// cancellation is asked, sooner than the next heartbeat. go-redis
// resubscribes after a lost connection.
func (w *Worker) cancelListener(ctx context.Context) {
	sub := w.rdb.Subscribe(ctx, "job.cancel")
	defer sub.Close()
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			if w.cancelJob(m.Payload, errCancelledByServer) {
				w.log.Info("agq cancelled the job; stopping it", "job_id", m.Payload)
			}
		}
	}
}

// backoff is the reconnection schedule: min doubling to max, back to min
// after a success, never longer than the heartbeat interval.
type backoff struct {
	min, max time.Duration
	limit    func() time.Duration
	cur      time.Duration
}

func (w *Worker) newBackoff() *backoff {
	return &backoff{min: w.opts.BackoffMin, max: w.opts.BackoffMax, limit: w.heartbeatInterval}
}

func (b *backoff) Next() time.Duration {
	d := cmp.Or(b.cur, b.min)
	b.cur = min(2*d, b.max)
	d = min(d, b.max)
	if b.limit != nil {
		if l := b.limit(); l > 0 {
			d = min(d, l)
		}
	}
	return d
}

func (b *backoff) Reset() { b.cur = 0 }

// sleep waits d or until ctx ends; it reports whether it waited it all.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
