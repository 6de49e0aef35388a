package wakeup

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agq/agq/records"
)

// A Conn is the hub's connection to the database's notifications: what
// it hears, and the two reads that make up for notes it missed. The hub
// holds one at a time, dialled again after an error.
type Conn interface {
	// Next waits for the next notice until ctx ends.
	Next(ctx context.Context) (Notice, error)
	// ClaimableNotes are notes for the jobs claimable now in queues, each
	// of the namespace at the same index of namespaces, at most perQueue
	// of each.
	ClaimableNotes(ctx context.Context, namespaces, queues []string, perQueue int) ([]records.ReadyNote, error)
	// FutureReadyNotes are notes for the jobs due later, soonest first.
	FutureReadyNotes(ctx context.Context, limit int) ([]records.ReadyNote, error)
	// Ping checks the connection.
	Ping(ctx context.Context) error
	Close()
}

// A Notice is one notification: what it is about, and its payload.
type Notice struct {
	Kind    NoticeKind
	Payload string
}

// NoticeKind says what a notice is about: each is one channel.
type NoticeKind int

const (
	// NoticeJobs: jobs became claimable; the payload is a ReadyNote.
	NoticeJobs NoticeKind = iota + 1
	// NoticeDone: a job finished; the payload is its id.
	NoticeDone
	// NoticeKeys: a key was revoked or replaced.
	NoticeKeys
	// NoticeEvents: another node's coalesced notice (or this node's own).
	NoticeEvents
	// NoticeMoved: a job moved out of running, or a worker declared dead
	// or registered again; the payload is a Moved.
	NoticeMoved
)

// listenLoop keeps one LISTEN connection open, reconnecting after errors.
func (h *Hub) listenLoop(ctx context.Context) {
	if h.cfg.Dial == nil {
		return
	}
	first := true
	for ctx.Err() == nil {
		err := h.listenOnce(ctx, !first)
		first = false
		if ctx.Err() != nil {
			return
		}
		h.cfg.Logger.Warn().Err(err).Msg("LISTEN connection lost; reconnecting")
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.cfg.ReconnectDelay):
		}
	}
}

func (h *Hub) listenOnce(ctx context.Context, reconnect bool) error {
	conn, err := h.cfg.Dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Due times announced before we listened are learnt from the table.
	notes, err := conn.FutureReadyNotes(ctx, 10000)
	if err != nil {
		return err
	}
	for _, note := range notes {
		h.deliver(note)
	}
	// Notes sent while we were not listening — away, or not yet connected
	// while clients were already served — are lost: everyone re-checks.
	h.wakeAll()
	h.heardOwnInterest()
	emit(h, Reconnected, struct{}{})
	if reconnect {
		h.cfg.Logger.Info().Msg("LISTEN connection restored")
	}
	nextCheck := time.Now().Add(recheckEvery)
	for {
		// Waiting is bounded so that the waited queues are re-checked, busy
		// or not, which also finds a connection that died silently.
		if !time.Now().Before(nextCheck) {
			checkCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := h.recheck(checkCtx, conn)
			cancel()
			if err != nil {
				return err
			}
			nextCheck = time.Now().Add(recheckEvery)
		}
		waitCtx, cancel := context.WithDeadline(ctx, nextCheck)
		n, err := conn.Next(waitCtx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return err
		}
		switch n.Kind {
		case NoticeJobs:
			var note records.ReadyNote
			if err := json.Unmarshal([]byte(n.Payload), &note); err != nil || note.Queue == "" {
				h.cfg.Logger.Warn().Str("payload", n.Payload).Msg("malformed job notification")
				continue
			}
			h.deliver(note)
		case NoticeDone:
			h.jobDone(n.Payload)
		case NoticeEvents:
			h.receiveEvent(n.Payload)
		case NoticeMoved:
			var m records.Moved
			if json.Unmarshal([]byte(n.Payload), &m) != nil {
				continue
			}
			if m.Registered != "" {
				h.WakeWorker(m.Registered)
				continue
			}
			if m.ID != "" {
				// A job left running (the watchdog, a worker's
				// registration): room for the pops limits held back.
				var f records.Room
				f.AddIn(m.Namespace, m.Queue, m.Type, 1)
				emit(h, RoomFreed, f)
			}
			if h.subscribed() {
				emit(h, Moved, m)
			}
		case NoticeKeys:
			emit(h, KeyRevoked, n.Payload)
		}
	}
}

// recheck wakes the waiters that can take jobs claimable now in the queues
// they wait on; it pings the connection when nobody waits.
func (h *Hub) recheck(ctx context.Context, conn Conn) error {
	h.mu.Lock()
	namespaces := make([]string, 0, len(h.byQueue))
	queues := make([]string, 0, len(h.byQueue))
	for k, ws := range h.byQueue {
		if len(ws) > 0 {
			namespaces, queues = append(namespaces, k.ns), append(queues, k.queue)
		}
	}
	h.mu.Unlock()
	if len(queues) == 0 {
		return conn.Ping(ctx)
	}
	notes, err := conn.ClaimableNotes(ctx, namespaces, queues, recheckPerQueue)
	if err != nil {
		return err
	}
	for _, note := range notes {
		h.deliver(note)
	}
	return nil
}
