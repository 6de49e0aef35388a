package worker

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestParseRegisterReply(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		reply string
		want  registerReply
	}{
		{"OK worker_id=w-1 heartbeat_interval=30", registerReply{"w-1", 30 * time.Second}},
		{"OK heartbeat_interval=0.5 worker_id=w-1", registerReply{"w-1", 500 * time.Millisecond}},
		{"OK worker_id=w-1 heartbeat_interval=15s", registerReply{"w-1", 15 * time.Second}},
		{"OK", registerReply{}},
		{"OK worker_id=w-1 something=else", registerReply{WorkerID: "w-1"}},
	} {
		got, err := parseRegisterReply(tt.reply)
		if err != nil || got != tt.want {
			t.Errorf("%q: %+v, %v; want %+v", tt.reply, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "QUEUED", "OK heartbeat_interval=soon", "OK heartbeat_interval=0", "OK heartbeat_interval=-3"} {
		if _, err := parseRegisterReply(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseHeartbeatReply(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		reply string
		want  heartbeatReply
	}{
		{"OK", heartbeatReply{}},
		{"OK drain=true", heartbeatReply{Drain: true}},
		{"OK drain=false", heartbeatReply{}},
		{"OK cancel=j1", heartbeatReply{Cancel: []string{"j1"}}},
		{"OK cancel=j1,j2", heartbeatReply{Cancel: []string{"j1", "j2"}}},
		{"OK drain=true cancel=j1,,j2,", heartbeatReply{Drain: true, Cancel: []string{"j1", "j2"}}},
		{"OK  cancel=j1   drain=true ", heartbeatReply{Drain: true, Cancel: []string{"j1"}}},
		{"OK cancel=j1 cancel=j3", heartbeatReply{Cancel: []string{"j1", "j3"}}},
		{"OK pause=5 drain=true", heartbeatReply{Drain: true, Unknown: []string{"pause=5"}}},
	} {
		got, err := parseHeartbeatReply(tt.reply)
		if err != nil || got.Drain != tt.want.Drain || !slices.Equal(got.Cancel, tt.want.Cancel) || !slices.Equal(got.Unknown, tt.want.Unknown) {
			t.Errorf("%q: %+v, %v; want %+v", tt.reply, got, err, tt.want)
		}
	}
	if _, err := parseHeartbeatReply("PONG"); err == nil {
		t.Error("PONG accepted")
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
		{replyErr("CANCELLED job j1 was cancelled"), outcomeCancelled},
		{replyErr("ERR Worker not registered: w-1"), outcomeNotRegistered},
		{replyErr("ERR job j1 is owned by w-2"), outcomeRefused},
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
