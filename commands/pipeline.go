package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidwall/redcon"

	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// A pipeline of writes — LPUSH, JOB.SUBMIT, JOB.UPDATE of any kind,
// STEP.BEGIN, STEP.COMPLETE — is served in runs: each write is read,
// checked and added to its engine group at once, without waiting for the
// one before it, so that a pipeline of thousands of submissions
// (redis-cli --pipe) shares a few commits instead of taking one each. Each reply is still written
// once its write is on disk, in the pipeline's order, and a refused write
// is that command's reply alone.
//
// A run ends, its replies all written, before any other command (a read,
// a blocking pop, AUTH…), before a second write about a job id or unique
// key already in it, before a batch (a JOB.SUBMIT array or an LPUSH of
// several jobs, one transaction of its own, run in turn), and at a group's
// worth of writes. So each command sees the writes sent before it, as when
// Redis runs a pipeline one command after another, and a connection holds
// at most a group's worth of commands and replies at once. While a run's
// writes commit it keeps reading the pipeline, so that what the client
// sends meanwhile joins the next group; a client that waits for its
// replies gets them as soon as they are ready.

// pipelineConn is what Serve's connections offer for serving a pipeline
// in runs.
type pipelineConn interface {
	redcon.Conn
	TakePipeline(n int) []redcon.Command
	AwaitPipeline(done <-chan struct{}) bool
	Flush() error
}

type writeKind int

const (
	notWrite writeKind = iota
	// groupedWrite is one job or one report: it joins its group.
	groupedWrite
	// batchWrite stores several jobs in one transaction of its own.
	batchWrite
)

// writeKindOf tells the writes a run serves from other commands.
func writeKindOf(cmd redcon.Command) writeKind {
	name := cmd.Args[0]
	switch {
	case resp.Is(name, "job.update"), resp.Is(name, "step.begin"), resp.Is(name, "step.complete"):
		return groupedWrite
	case resp.Is(name, "lpush"):
		if len(cmd.Args) > 3 {
			return batchWrite
		}
		return groupedWrite
	case resp.Is(name, "job.submit"):
		if len(cmd.Args) == 2 && bytes.HasPrefix(bytes.TrimSpace(cmd.Args[1]), []byte("[")) {
			return batchWrite
		}
		return groupedWrite
	}
	return notWrite
}

// pipelinedWrites reports whether cmd and the next command of the
// pipeline are both writes: a lone write, or a write followed by a read (a
// report and the next pop, most often), runs as any other command.
func pipelinedWrites(conn redcon.Conn, cmd redcon.Command) bool {
	next := conn.PeekPipeline()
	return len(next) > 0 && writeKindOf(cmd) != notWrite && writeKindOf(next[0]) != notWrite
}

// servePipeline serves cmd and the writes pipelined after it in runs,
// leaving the first other command to the serve loop.
func (s *Server) servePipeline(conn pipelineConn, sess *Session, cmd redcon.Command) {
	run := &pipelineRun{s: s, conn: conn, sess: sess, keys: map[string]struct{}{}}
	for {
		if writeKindOf(cmd) == batchWrite {
			run.end()
			reply, _, _ := s.execute(sess, cmd)
			conn.WriteRaw(reply)
		} else {
			run.add(cmd)
		}
		next := conn.PeekPipeline()
		if len(next) == 0 && len(run.entries) > 0 && conn.AwaitPipeline(run.outcomes()) {
			next = conn.PeekPipeline()
		}
		if len(next) == 0 || writeKindOf(next[0]) == notWrite {
			run.end()
			return
		}
		cmd = conn.TakePipeline(1)[0]
	}
}

// pipelineRun is the writes of a pipeline being served together.
type pipelineRun struct {
	s       *Server
	conn    pipelineConn
	sess    *Session
	entries []*pipelined
	// awaited counts the entries handed to an awaiting goroutine; done
	// closes once those all have their outcomes.
	awaited int
	done    chan struct{}
	// keys are the job ids and unique keys the entries write.
	keys map[string]struct{}
}

// pipelined is one write of a run.
type pipelined struct {
	cmd    redcon.Command
	c      *Command
	name   string
	start  time.Time
	ctx    context.Context
	cancel context.CancelFunc
	// w is the write as prepared; err its refusal, or its outcome's.
	w     write
	await func(context.Context) (resp.Reply, error)
	reply resp.Reply
	err   error
	// alone: its preparation panicked, and it runs as any other command
	// when its reply is due, which reports the panic.
	alone bool
}

// A Preparer reads and checks one write of a pipeline, without sending it.
type Preparer func(ctx context.Context, sess *Session, args [][]byte) (write, error)

// write is a write read and checked, not yet sent.
type write struct {
	// keys are the job ids and unique keys it writes: a run ends before a
	// second write of one of them.
	keys []string
	// send adds it to its engine group and answers how to await its
	// reply.
	send func() (await func(context.Context) (resp.Reply, error))
	// push is an LPUSH's: its reply is the queue's depth, counted once the
	// run's jobs are stored.
	push *pushed
}

// pushed is an LPUSH of one job in a pipeline, its job stored.
type pushed struct {
	queue string
	jobs  *records.Pushed
}

// sendNow is the handler of a write served alone: prepared, sent, awaited.
func sendNow(prepare Preparer) Handler {
	return func(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
		w, err := prepare(ctx, sess, args)
		if err != nil {
			return nil, err
		}
		return w.send()(ctx)
	}
}

// okOnNil answers OK for a write whose outcome is only its error.
func okOnNil(wait func(context.Context) error) func(context.Context) (resp.Reply, error) {
	return func(ctx context.Context) (resp.Reply, error) {
		return okOr(wait(ctx))
	}
}

// add adds a write to the run, ending the run first when it is full or
// already writes the same job.
func (r *pipelineRun) add(cmd redcon.Command) {
	e := r.s.prepareWrite(r.sess, cmd)
	if len(r.entries) >= records.MaxGroup || r.holdsAny(e.w.keys) {
		r.end()
	}
	if e.err == nil && !e.alone {
		e.await = e.w.send()
	}
	for _, k := range e.w.keys {
		r.keys[k] = struct{}{}
	}
	r.entries = append(r.entries, e)
}

func (r *pipelineRun) holdsAny(keys []string) bool {
	for _, k := range keys {
		if _, ok := r.keys[k]; ok {
			return true
		}
	}
	return false
}

// outcomes hands the entries not yet awaited to a goroutine that awaits
// them, and returns a channel closed once every entry of the run has its
// outcome.
func (r *pipelineRun) outcomes() <-chan struct{} {
	batch := r.entries[r.awaited:]
	r.awaited = len(r.entries)
	prev, done := r.done, make(chan struct{})
	go func() {
		for _, e := range batch {
			e.wait()
		}
		if prev != nil {
			<-prev
		}
		close(done)
	}()
	r.done = done
	return done
}

// end awaits the run's writes, writes their replies in order and sends
// them, and starts an empty run.
func (r *pipelineRun) end() {
	if len(r.entries) == 0 {
		return
	}
	if r.done != nil {
		<-r.done
	}
	for _, e := range r.entries[r.awaited:] {
		e.wait()
	}
	r.countPushes()
	for _, e := range r.entries {
		r.conn.WriteRaw(r.s.pipelinedReply(r.sess, e))
		e.cancel()
	}
	r.conn.Flush() // a failed write shows at the serve loop's next read
	r.entries, r.awaited, r.done = nil, 0, nil
	clear(r.keys)
}

// countPushes answers the run's LPUSHes, with one count per queue.
func (r *pipelineRun) countPushes() {
	byQueue := map[string][]*pipelined{}
	for _, e := range r.entries {
		if p := e.w.push; p != nil && p.jobs != nil && e.err == nil {
			byQueue[p.queue] = append(byQueue[p.queue], e)
		}
	}
	for queue, es := range byQueue {
		pushes := make([]records.Pushed, len(es))
		for i, e := range es {
			pushes[i] = *e.w.push.jobs
		}
		ctx, cancel := r.s.ctxForCommand(r.sess)
		depths, err := r.sess.eng.PushDepths(ctx, queue, pushes)
		cancel()
		for i, e := range es {
			if err != nil {
				e.err = err
			} else {
				e.reply = resp.Int(depths[i])
			}
		}
	}
}

func (e *pipelined) wait() {
	if e.await != nil {
		e.reply, e.err = e.await(e.ctx)
	}
}

// pipelinedReply encodes a write's reply. One whose preparation panicked
// runs as any other command; one whose group failed before reaching the
// database is sent once more, on a fresh connection, as run does for any
// command — but not an LPUSH whose job is stored, which would store it
// again.
func (s *Server) pipelinedReply(sess *Session, e *pipelined) []byte {
	retry := e.await != nil && e.err != nil && records.SafeToRetry(e.err) && e.ctx.Err() == nil
	if e.alone || retry && e.w.push != nil && e.w.push.jobs == nil {
		// (An LPUSH sent again is answered with its own count.)
		reply, _, _ := s.execute(sess, e.cmd)
		return reply
	}
	if retry && e.w.push == nil {
		s.metrics.retried.Inc()
		sess.eng.DropIdleConns()
		e.reply, e.err = e.w.send()(e.ctx)
	}
	out, err := e.reply, e.err
	if err != nil && sess.revoked.Load() && errors.Is(err, context.Canceled) {
		err = resp.ErrNoAuth
	}
	if err != nil {
		out = nil
	}
	reply, _ := s.end(sess, e.c, e.name, e.start, out, err)
	return reply
}

// prepareWrite reads and checks a write, as its handler would, without
// adding it to its group yet.
func (s *Server) prepareWrite(sess *Session, cmd redcon.Command) (e *pipelined) {
	e = &pipelined{cmd: cmd, start: time.Now()}
	e.c, e.name = s.begin(sess, cmd, e.start)
	e.ctx, e.cancel = s.ctxForCommand(sess)
	if e.err = s.admit(sess, e.c, e.name, cmd.Args); e.err != nil {
		return e
	}
	defer func() {
		if p := recover(); p != nil {
			e.alone, e.err = true, nil
		}
	}()
	// A write refused here writes nothing: it needs no place among the
	// writes about its job, and its reply is the same at any time.
	e.w, e.err = e.c.Prepare(e.ctx, sess, cmd.Args)
	return e
}

// prepareSubmission prepares a JOB.SUBMIT of one object or an LPUSH of
// one job.
func (s *Server) prepareSubmission(_ context.Context, sess *Session, args [][]byte) (write, error) {
	job, queue, err := s.readSubmission(args)
	if err != nil {
		return write{}, err
	}
	job.SubmittedBy = submitter(sess)
	w := write{keys: []string{"job:" + job.ID}}
	if job.UniqueKey != "" {
		w.keys = append(w.keys, "unique:"+job.UniqueKey)
	}
	if queue != "" {
		w.push = &pushed{queue: queue}
	}
	w.send = func() func(context.Context) (resp.Reply, error) {
		wait := sess.eng.Submit(job)
		return func(ctx context.Context) (resp.Reply, error) {
			res, err := wait(ctx)
			if err != nil {
				return nil, err
			}
			if w.push == nil {
				return resp.BulkString(res.ID), nil
			}
			w.push.jobs = &records.Pushed{Jobs: []records.NewJob{job}, Results: []records.SubmitResult{res}}
			return nil, nil
		}
	}
	return w, nil
}

// readSubmission reads the job of a JOB.SUBMIT of one object or an LPUSH
// of one job, as cmdJobSubmit and cmdLPush read it; queue is LPUSH's.
func (s *Server) readSubmission(args [][]byte) (job records.NewJob, queue string, err error) {
	docs := [][]byte{bytes.TrimSpace(args[1])}
	if resp.Is(args[0], "lpush") {
		if !bytes.HasPrefix(args[1], []byte("queue:")) {
			return job, "", resp.ErrReadOnlyKeys
		}
		queues, err := queueKeys(args[1:2])
		if err != nil {
			return job, "", err
		}
		queue, docs = queues[0], args[2:]
	}
	jobs, err := s.parseJobs(docs, queue, false)
	if err != nil {
		return job, "", err
	}
	if len(jobs) != 1 {
		return job, "", fmt.Errorf("%d jobs where one was read", len(jobs))
	}
	return jobs[0], queue, nil
}
