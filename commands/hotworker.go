package commands

import (
	"context"
	"slices"

	"github.com/agq/agq/records"
)

// hotWorker is the worker a session acts as, read once and kept: pops and
// reports need only its id and capabilities, and the claim statement
// re-checks its state and capabilities in the database. The copy is
// dropped when the worker registers or unregisters again, when the key is
// revoked, and when a claim finds it changed.
func (s *Server) hotWorker(ctx context.Context, sess *Session) (records.Worker, error) {
	sess.mu.Lock()
	w := sess.worker
	sess.mu.Unlock()
	if w != nil {
		return *w, nil
	}
	got, err := offStack(func() (records.Worker, error) { return s.sessionWorker(ctx, sess) })
	if err != nil {
		return got, err
	}
	if got.State == records.WorkerActive || got.State == records.WorkerDraining {
		keep := got
		keep.Capabilities = slices.Clone(got.Capabilities)
		sess.mu.Lock()
		sess.worker = &keep
		sess.mu.Unlock()
	}
	return got, nil
}

// forgetWorker drops the session's copy of its worker.
func (sess *Session) forgetWorker() {
	sess.mu.Lock()
	sess.worker = nil
	sess.mu.Unlock()
}

// forgetWorkers drops the copies sessions keep of worker id, or of any
// worker of principal: it registered or unregistered.
func (s *Server) forgetWorkers(principal, id string) {
	for _, sess := range s.sessionList() {
		sess.mu.Lock()
		if w := sess.worker; w != nil && (w.ID == id || w.Principal == principal) {
			sess.worker = nil
		}
		sess.mu.Unlock()
	}
}

// offStack runs fn on a goroutine of its own and waits for it. A
// connection's goroutine lives as long as the client, and its stack never
// gives back what a deep call (a database lookup) grew it to: thousands of
// idle clients would each keep that. The lookups a connection makes once —
// its key, its worker — run on a short-lived goroutine instead.
func offStack[T any](fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	c := make(chan result, 1)
	go func() {
		v, err := fn()
		c <- result{v, err}
	}()
	r := <-c
	return r.v, r.err
}
