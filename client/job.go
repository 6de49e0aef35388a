package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/agq/agq/internal/plainjson"
)

// jobMessage is the job as a pop delivers it.
type jobMessage struct {
	JobID          string          `json:"job_id"`
	Queue          string          `json:"queue"`
	Type           string          `json:"type"`
	Requires       []string        `json:"requires"`
	Plan           json.RawMessage `json:"plan"`
	Inputs         json.RawMessage `json:"inputs"`
	Payload        json.RawMessage `json:"payload"`
	Parents        json.RawMessage `json:"parents"`
	Priority       int             `json:"priority"`
	Attempt        int             `json:"attempt"`
	MaxAttempts    int             `json:"max_attempts"`
	TimeoutSeconds float64         `json:"timeout_seconds"`
	Delivery       string          `json:"delivery"`
	TraceParent    string          `json:"traceparent"`
	TraceState     string          `json:"tracestate"`
	FairKey        string          `json:"fair_key"`
	raw            string
}

// Job is one delivery of a job to a handler.
type Job struct {
	msg *jobMessage
	w   *Worker
	run *runningJob
}

// ID is the job's id.
func (j *Job) ID() string { return j.msg.JobID }

// Type is the job's type.
func (j *Job) Type() string { return j.msg.Type }

// Queue is the queue the job was taken from.
func (j *Job) Queue() string { return j.msg.Queue }

// Attempt numbers the job's deliveries from 1 (a snooze or a sleep keeps it).
func (j *Job) Attempt() int { return j.msg.Attempt }

// MaxAttempts is how many attempts the job has.
func (j *Job) MaxAttempts() int { return j.msg.MaxAttempts }

// FairKey is the fair key the job was submitted with ("" for none).
func (j *Job) FairKey() string { return j.msg.FairKey }

// Payload is the job's payload as JSON.
func (j *Job) Payload() json.RawMessage { return j.msg.Payload }

// Parents is, for a job submitted with after, each parent's status and
// result as JSON.
func (j *Job) Parents() json.RawMessage { return j.msg.Parents }

// Plan is the job's plan as JSON.
func (j *Job) Plan() json.RawMessage { return j.msg.Plan }

// Inputs is the job's inputs as JSON.
func (j *Job) Inputs() json.RawMessage { return j.msg.Inputs }

// TraceParent is the W3C traceparent the handler's spans join (agq's span
// of this attempt when agq traces), "" when the job carries none;
// TraceState goes with it.
func (j *Job) TraceParent() string { return j.msg.TraceParent }

// TraceState is the W3C tracestate that goes with TraceParent.
func (j *Job) TraceState() string { return j.msg.TraceState }

// Timeout is the job's timeout (0: none), after which its ctx ends.
func (j *Job) Timeout() time.Duration {
	return time.Duration(j.msg.TimeoutSeconds * float64(time.Second))
}

// Raw is the job as agq delivered it.
func (j *Job) Raw() string { return j.msg.raw }

// Decode decodes the job's payload into a T.
func Decode[T any](j *Job) (T, error) {
	var v T
	if len(j.msg.Payload) == 0 {
		return v, nil
	}
	err := json.Unmarshal(j.msg.Payload, &v)
	if err != nil {
		err = fmt.Errorf("client: decoding the payload of job %s: %w", j.ID(), err)
	}
	return v, err
}

// Progress reports how far the job got (the job's progress in JOB.GET).
func (j *Job) Progress(ctx context.Context, currentTask, percent int) error {
	return j.run.update(ctx, map[string]any{"current_task": currentTask, "progress_percent": percent})
}

// Acknowledge tells agq at once that the job runs; without it, a job
// running longer than AckAfter is acknowledged then. A handler calls it
// before work it would not want done twice by two workers: agq gives an
// unacknowledged delivery to another worker after its acknowledgement
// timeout. It returns ErrCancelled or ErrDeliveryLost when the job is no
// longer this handler's to run.
func (j *Job) Acknowledge(ctx context.Context) error {
	r := j.run
	r.mu.Lock()
	acked := r.acked
	r.mu.Unlock()
	if acked {
		return nil
	}
	return r.update(ctx, j.w.runningDoc())
}

// Log publishes one line of the job's output to job.<id>.logs, for those
// following the job (agq keeps the last lines of the attempt for
// JOB.LOGS). Lines published after the final report are refused.
func (j *Job) Log(ctx context.Context, line string) error {
	return j.w.rdb.Publish(ctx, "job."+j.ID()+".logs", line).Err()
}

// runningJob is a job a slot runs.
type runningJob struct {
	job    *Job
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex // keeps one job's reports in order
	acked bool
	final bool
	// ended: a step failed or the job went to sleep, which ended the
	// delivery on agq; nothing more is reported.
	ended bool
	// steps holds a step's completion for the job's next call.
	steps heldSteps
}

// runJob runs a delivered job's handler and hands its final report to the
// reporter. The slot frees when the handler returns; the job stays this
// worker's (listed at registration, held through a drain) until agq has
// the report.
func (w *Worker) runJob(r *runningJob) {
	j := r.job
	ctx := r.ctx
	if secs := j.msg.TimeoutSeconds; secs > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, time.Duration(secs*float64(time.Second)), errJobTimeout)
		defer stop()
	}
	ack := time.AfterFunc(w.opts.AckAfter, func() { r.acknowledge(w) })
	result, err := w.call(ctx, j)
	ack.Stop()
	held := r.takeHeld()
	cause := context.Cause(r.ctx)
	if ctx.Err() != nil && cause == nil {
		cause = context.Cause(ctx)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.final = true
	if r.ended || errors.Is(cause, errCancelConfirmed) || errors.Is(cause, ErrDeliveryLost) {
		w.handlerReturned(false)
		w.untrack(r, false)
		return
	}
	if err == nil && cause == nil {
		if body, ok := r.completedBody(result); ok {
			w.completed.Add(1)
			w.handlerReturned(true)
			w.reports.push(r.finalReport(body, held))
			return
		}
	}
	doc, failed := finalReport(result, err, cause)
	if failed {
		w.failed.Add(1)
		w.log.Warn("job failed", "job_id", j.ID(), "error", doc["error"], "retryable", doc["retryable"])
	} else if doc["status"] == "completed" {
		w.completed.Add(1)
	}
	w.handlerReturned(true)
	w.reports.push(r.finalReport(r.body(doc), held))
}

// finalReport is the reporter's entry for r's final report, sent after
// the completion of step held (if any) in the same pipeline.
func (r *runningJob) finalReport(body []byte, held *heldStep) *pendingReport {
	w := r.job.w
	p := &pendingReport{jobID: r.job.ID(), body: body}
	if held != nil {
		p.step = []any{"STEP.COMPLETE", r.job.ID(), held.id, held.output, "DELIVERY", r.job.msg.Delivery}
	}
	p.done = func(err error) {
		switch classify(err) {
		case outcomeOK, outcomeCancelled, outcomeLost:
		default:
			w.log.Error("could not report the job's end", "job_id", r.job.ID(), "error", err)
		}
		w.untrack(r, true)
	}
	return p
}

// call runs the job's handler; a panic is a failed attempt.
func (w *Worker) call(ctx context.Context, j *Job) (result any, err error) {
	h := w.handlers[j.Type()]
	if h == nil {
		h = w.fallback
	}
	if h == nil {
		return nil, Permanent(fmt.Errorf("no handler for jobs of type %q", j.Type()))
	}
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("handler panicked", "job_id", j.ID(), "panic", p, "stack", string(debug.Stack()))
			result, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return h(ctx, j)
}

// finalReport is the JOB.UPDATE document for how the handler ended.
func finalReport(result any, err, cause error) (doc map[string]any, failed bool) {
	doc = map[string]any{}
	var fe *fieldsError
	if errors.As(err, &fe) {
		maps.Copy(doc, fe.fields)
	}
	var snooze *snoozeError
	switch {
	case errors.Is(cause, errCancelledByServer):
		doc["status"] = "cancelled"
		return doc, false
	case err == nil:
		if fields, ok := result.(ReportFields); ok {
			maps.Copy(doc, fields)
		} else {
			doc["output"] = result
		}
		doc["status"] = "completed"
		return doc, false
	case errors.As(err, &snooze):
		return map[string]any{"status": "snoozed", "seconds": max(snooze.d.Seconds(), 0.001)}, false
	case errors.Is(cause, ErrShuttingDown):
		msg := err.Error()
		if !errors.Is(err, ErrShuttingDown) {
			msg = ErrShuttingDown.Error() + ": " + msg
		}
		doc["status"], doc["error"], doc["retryable"] = "failed", msg, true
	case errors.Is(cause, errJobTimeout):
		doc["status"], doc["error"], doc["retryable"] = "failed", "timed out: "+err.Error(), true
	default:
		doc["status"], doc["error"], doc["retryable"] = "failed", err.Error(), !IsPermanent(err)
	}
	return doc, true
}

// body is the JOB.UPDATE JSON of doc about this delivery.
func (r *runningJob) body(doc map[string]any) []byte {
	doc["delivery"] = r.job.msg.Delivery
	doc["attempt"] = r.job.msg.Attempt
	body, err := plainjson.Marshal(doc)
	if err != nil {
		body, _ = plainjson.Marshal(map[string]any{"status": "failed", "error": "result is not JSON: " + err.Error(),
			"retryable": false, "delivery": r.job.msg.Delivery, "attempt": r.job.msg.Attempt})
	}
	return body
}

// completedBody is the JOB.UPDATE JSON of a job completed with result,
// written without building a document first: most jobs end so. It
// reports false when result has fields of its own or is not JSON.
func (r *runningJob) completedBody(result any) ([]byte, bool) {
	if _, ok := result.(ReportFields); ok {
		return nil, false
	}
	output := []byte("null")
	if result != nil {
		var err error
		if output, err = plainjson.Marshal(result); err != nil {
			return nil, false
		}
	}
	delivery := r.job.msg.Delivery
	if !plainToken(delivery) {
		return nil, false // agq's tokens are plain: anything else takes the general path
	}
	b := make([]byte, 0, 64+len(output)+len(delivery))
	b = append(b, `{"status":"completed","output":`...)
	b = append(b, output...)
	b = append(b, `,"delivery":"`...)
	b = append(b, delivery...)
	b = append(b, '"')
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.job.msg.Attempt), 10)
	return append(b, '}'), true
}

// plainToken reports whether encoding/json writes s as it is, between
// quotes, without escaping anything.
func plainToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// acknowledge tells agq that a long job is running, before its
// acknowledgement timeout gives the delivery to another worker.
func (r *runningJob) acknowledge(w *Worker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.final || r.acked {
		return
	}
	r.acked = true
	if o, err := r.send(w, r.ctx, w.runningDoc()); o != outcomeOK && r.ctx.Err() == nil {
		w.log.Warn("could not acknowledge the job", "job_id", r.job.ID(), "error", err)
	}
}

// runningDoc is an acknowledgement's JOB.UPDATE document.
func (w *Worker) runningDoc() map[string]any {
	return map[string]any{"status": "running", "worker_id": w.opts.WorkerID, "started_at": time.Now().UTC().Format(time.RFC3339)}
}

// update sends a report the handler asked for.
func (r *runningJob) update(ctx context.Context, doc map[string]any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o, err := r.send(r.job.w, ctx, doc); o {
	case outcomeOK:
		r.acked = true
		return nil
	case outcomeCancelled:
		return ErrCancelled
	case outcomeLost:
		return fmt.Errorf("%w: %v", ErrDeliveryLost, err)
	default:
		return err
	}
}

// send reports doc about this delivery until agq answers, retrying
// connection trouble (agq applies a repeated report once). CANCELLED and a
// lost delivery end the handler's ctx. Called with r.mu held.
func (r *runningJob) send(w *Worker, ctx context.Context, doc map[string]any) (outcome, error) {
	body := r.body(doc)
	b := w.newBackoff()
	for {
		err := w.report(ctx, r.job.ID(), body)
		o := classify(err)
		switch o {
		case outcomeOK:
			return o, nil
		case outcomeCancelled:
			r.cancel(errCancelConfirmed)
			return o, err
		case outcomeLost:
			r.cancel(fmt.Errorf("%w: %v", ErrDeliveryLost, err))
			return o, err
		case outcomeNotRegistered:
			w.reg.lost()
			if err := w.ensureRegistered(ctx); err != nil {
				return outcomeConn, err
			}
		case outcomeConn:
			if ctx.Err() != nil {
				return o, err // the sender gave up: nothing says the connection is lost
			}
			w.reg.lost()
		default:
			return o, err
		}
		if ctx.Err() != nil {
			return outcomeConn, err
		}
		wait := b.Next()
		w.log.Warn("JOB.UPDATE failed", "job_id", r.job.ID(), "error", err, "retry_in", wait)
		if !sleep(ctx, wait) {
			return outcomeConn, err
		}
	}
}
