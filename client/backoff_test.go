package client

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	b := &backoff{min: time.Second, max: time.Minute}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i, w := range want {
		if got := b.Next(); got != w*time.Second {
			t.Fatalf("attempt %d: %v, want %v", i+1, got, w*time.Second)
		}
	}
	b.Reset()
	if got := b.Next(); got != time.Second {
		t.Fatalf("after a reset: %v", got)
	}
}

// The schedule never waits longer than the heartbeat interval agq named
// (read at each wait: a registration may change it): three missed
// intervals and agq declares the worker dead.
func TestBackoffIsLimitedByTheHeartbeatInterval(t *testing.T) {
	t.Parallel()
	interval := 5 * time.Second
	b := &backoff{min: time.Second, max: time.Minute, limit: func() time.Duration { return interval }}
	want := []time.Duration{1, 2, 4, 5, 5}
	for i, w := range want {
		if got := b.Next(); got != w*time.Second {
			t.Fatalf("attempt %d: %v, want %v", i+1, got, w*time.Second)
		}
	}
	interval = 30 * time.Second
	if got := b.Next(); got != 30*time.Second {
		t.Fatalf("after the interval grew to 30s: %v, want 30s", got)
	}
	interval = 0 // none named: the schedule alone
	if got := b.Next(); got != time.Minute {
		t.Fatalf("without an interval: %v, want 1m", got)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	replyErr := func(s string) error { return fmt.Errorf("wrapped: %w", redisError(s)) }
	for _, tt := range []struct {
		err  error
		want outcome
	}{
		{nil, outcomeOK},
		{redis.Nil, outcomeNil},
		{io.EOF, outcomeConn},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, outcomeConn},
		{redis.ErrPoolTimeout, outcomeConn},
		{replyErr("LOADING agq is starting"), outcomeConn},
		{replyErr("ERR internal error while running 'worker.register'"), outcomeConn},
		{replyErr("CANCELLED job j1 was cancelled"), outcomeCancelled},
		{replyErr("ERR Worker not registered: w-1"), outcomeNotRegistered},
		{replyErr("NOPERM Worker ID already registered by another principal"), outcomeNoPerm},
		{replyErr("ERR job j1 is owned by w-2"), outcomeLost},
		{replyErr("ERR job j1 is not running for this delivery token (its current attempt is 2): it was delivered again since, or never with this token"), outcomeLost},
		{replyErr("ERR job j1 was delivered again (attempt 2): this report is about an earlier delivery"), outcomeLost},
		{replyErr("WRONGPASS invalid username-password pair or user is disabled."), outcomeRefused},
		{replyErr("ERR payload too large"), outcomeRefused},
	} {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("%v: %v, want %v", tt.err, got, tt.want)
		}
	}
}

// redisError is an error reply as go-redis returns it.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}
