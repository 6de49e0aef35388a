// Package listen is the wakeup hub's connection on PostgreSQL: one
// dedicated connection that LISTENs on agq's notification channels and
// reads the notes the hub may have missed. It is kept apart from the hub
// so that the hub's users (the wire layer) depend on neither store nor
// pgx.
package listen

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// kinds maps each channel listened to to what its notices are about.
var kinds = map[string]wakeup.NoticeKind{
	store.ChannelJobs:   wakeup.NoticeJobs,
	store.ChannelDone:   wakeup.NoticeDone,
	store.ChannelKeys:   wakeup.NoticeKeys,
	store.ChannelEvents: wakeup.NoticeEvents,
	store.ChannelMoved:  wakeup.NoticeMoved,
}

// Dialer returns the hub's Dial for the database at connString (a direct
// URL: LISTEN does not survive a transaction-mode pooler).
func Dialer(connString string) func(ctx context.Context) (wakeup.Conn, error) {
	return func(ctx context.Context) (wakeup.Conn, error) {
		cc, err := store.DedicatedConnConfig(connString)
		if err != nil {
			return nil, err
		}
		c, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return nil, err
		}
		for ch := range kinds {
			if _, err := c.Exec(ctx, "LISTEN "+ch); err != nil {
				c.Close(context.Background())
				return nil, err
			}
		}
		return &conn{c: c}, nil
	}
}

// Send returns the hub's Send: NOTIFY on the events channel through st.
func Send(st *store.Store) func(ctx context.Context, payloads []string) error {
	return func(ctx context.Context, payloads []string) error {
		return st.Notify(ctx, store.ChannelEvents, payloads)
	}
}

type conn struct{ c *pgx.Conn }

func (c *conn) Next(ctx context.Context) (wakeup.Notice, error) {
	for {
		n, err := c.c.WaitForNotification(ctx)
		if err != nil {
			return wakeup.Notice{}, err
		}
		if kind, ok := kinds[n.Channel]; ok {
			return wakeup.Notice{Kind: kind, Payload: n.Payload}, nil
		}
	}
}

func (c *conn) ClaimableNotes(ctx context.Context, namespaces, queues []string, perQueue int) ([]records.ReadyNote, error) {
	notes, err := store.ClaimableNotes(ctx, c.c, namespaces, queues, perQueue)
	return readyNotes(notes), err
}

func (c *conn) FutureReadyNotes(ctx context.Context, limit int) ([]records.ReadyNote, error) {
	notes, err := store.FutureReadyNotes(ctx, c.c, limit)
	return readyNotes(notes), err
}

func (c *conn) Ping(ctx context.Context) error { return c.c.Ping(ctx) }

func (c *conn) Close() { c.c.Close(context.Background()) }

func readyNotes(notes []records.ReadyNote) []records.ReadyNote {
	if notes == nil {
		return nil
	}
	out := make([]records.ReadyNote, len(notes))
	for i, n := range notes {
		out[i] = n
	}
	return out
}
