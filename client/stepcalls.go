package client

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// The slots' STEP.* calls go to agq in pipelines, as their reports do:
// agq serves the begins and completions of one pipeline as one run, about
// different jobs, sharing their commits, and writes their replies
// together. Each call keeps its own reply, and its sender its own retries
// (stepCommand).

// maxStepCalls bounds the calls one pipeline carries (the server's
// MaxGroup).
const maxStepCalls = 500

// pendingCall is a step call waiting for its pipeline.
type pendingCall struct {
	ctx   context.Context
	args  []any
	reply chan callReply // capacity 1
}

type callReply struct {
	text string
	err  error
}

// stepCall sends args with the other slots' step calls, in one pipeline,
// and returns its reply. After Run's drain it goes alone.
func (w *Worker) stepCall(ctx context.Context, args []any) (string, error) {
	c := &pendingCall{ctx: ctx, args: args, reply: make(chan callReply, 1)}
	if !w.stepCalls.offer(c) {
		return w.rdb.Do(ctx, args...).Text()
	}
	select {
	case r := <-c.reply:
		return r.text, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stepCaller sends the waiting step calls as pipelines.
func (w *Worker) stepCaller() { sendPipelines(&w.stepCalls, w.sendStepCalls) }

// sendStepCalls sends batch in one pipeline, each call's reply to its
// sender; a call whose sender gave up meanwhile is not sent.
func (w *Worker) sendStepCalls(batch []*pendingCall) {
	pipe := w.rdb.Pipeline()
	sent := batch[:0:0]
	cmds := make([]*redis.Cmd, 0, len(batch))
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.reply <- callReply{err: err}
			continue
		}
		sent = append(sent, c)
		cmds = append(cmds, pipe.Do(c.ctx, c.args...))
	}
	if len(sent) == 0 {
		return
	}
	pipe.Exec(context.Background())
	for i, c := range sent {
		text, err := cmds[i].Text()
		c.reply <- callReply{text: text, err: err}
	}
}
