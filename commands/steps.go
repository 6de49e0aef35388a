package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/jsonmsg"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

func (s *Server) stepCommands() []*Command {
	return []*Command{
		{Name: "step.begin", Arity: -3, Roles: workers, Handler: sendNow(s.prepareStepBegin), Prepare: s.prepareStepBegin},
		{Name: "step.complete", Arity: -3, Roles: workers, Handler: sendNow(s.prepareStepComplete), Prepare: s.prepareStepComplete},
		{Name: "step.fail", Arity: -4, Roles: workers, Handler: s.cmdStepFail},
		{Name: "step.sleep", Arity: -4, Roles: workers, Handler: s.cmdStepSleep},
		{Name: "job.steps", Arity: -2, Roles: readers | roleWorker, Handler: s.cmdJobSteps},
	}
}

// maxStepWait bounds a sleep and a retry_after_seconds.
const maxStepWait = 30 * 24 * time.Hour

// stepBeginDoc is STEP.BEGIN's optional object.
type stepBeginDoc struct {
	Input               json.RawMessage `json:"input"`
	MaxAttempts         *int            `json:"max_attempts"`
	RetryBackoffSeconds *float64        `json:"retry_backoff_seconds"`
}

// stepFailDoc is STEP.FAIL's error object.
type stepFailDoc struct {
	Message           string   `json:"message"`
	NonRetryable      bool     `json:"non_retryable"`
	RetryAfterSeconds *float64 `json:"retry_after_seconds"`
}

// STEP.BEGIN job_id step_id [json] [DELIVERY token]
func (s *Server) prepareStepBegin(ctx context.Context, sess *Session, args [][]byte) (write, error) {
	p, rest, err := s.readStepCall(ctx, sess, args, 1)
	if err != nil {
		return write{}, err
	}
	b := records.StepBeginParams{StepParams: p}
	if len(rest) == 1 {
		if err := readStepBeginDoc(rest[0], &b); err != nil {
			return write{}, err
		}
	}
	return write{keys: []string{"job:" + p.JobID}, send: func() func(context.Context) (resp.Reply, error) {
		wait := sess.eng.StepBegin(b)
		return func(ctx context.Context) (resp.Reply, error) {
			r, err := wait(ctx)
			if err != nil {
				return nil, err
			}
			return stepBeginReply(r), nil
		}
	}}, nil
}

// readStepBeginDoc reads STEP.BEGIN's optional object into b.
func readStepBeginDoc(raw []byte, b *records.StepBeginParams) error {
	var doc stepBeginDoc
	if err := decodeStepDoc(raw, &doc); err != nil {
		return resp.Errorf("invalid step: %s", err)
	}
	if doc.MaxAttempts != nil && (*doc.MaxAttempts < 1 || *doc.MaxAttempts > 1000) {
		return resp.Errorf("invalid step: max_attempts must be between 1 and 1000")
	}
	if f := doc.RetryBackoffSeconds; f != nil && !(*f >= 0 && *f <= 86400) {
		return resp.Errorf("invalid step: retry_backoff_seconds must be between 0 and 86400")
	}
	b.Input, b.MaxAttempts, b.BackoffSeconds = doc.Input, doc.MaxAttempts, doc.RetryBackoffSeconds
	return nil
}

// stepBeginReply is STEP.BEGIN's reply.
func stepBeginReply(r records.StepBeginResult) resp.Reply {
	if r.Execute {
		return resp.Bulk(`{"execute":true,"attempt":` + strconv.Itoa(r.Attempt) + `}`)
	}
	out, _ := json.Marshal(struct {
		Execute bool            `json:"execute"`
		Output  json.RawMessage `json:"output"`
	}{false, r.Output})
	return resp.Bulk(out)
}

// STEP.COMPLETE job_id step_id [output_json] [NEXT step_id [json]] [DELIVERY token]
func (s *Server) prepareStepComplete(ctx context.Context, sess *Session, args [][]byte) (write, error) {
	p, output, next, err := s.readStepComplete(ctx, sess, args)
	if err != nil {
		return write{}, err
	}
	return write{keys: []string{"job:" + p.JobID}, send: func() func(context.Context) (resp.Reply, error) {
		wait := sess.eng.StepComplete(p, output, next)
		return func(ctx context.Context) (resp.Reply, error) {
			r, err := wait(ctx)
			if err != nil {
				return nil, err
			}
			if next == nil {
				return resp.OK, nil
			}
			return stepBeginReply(r), nil
		}
	}}, nil
}

// readStepComplete reads a STEP.COMPLETE: the call, its output (nil for
// none) and the step it begins next (nil for none).
func (s *Server) readStepComplete(ctx context.Context, sess *Session, args [][]byte) (records.StepParams, json.RawMessage, *records.StepBeginParams, error) {
	p, rest, err := s.readStepCall(ctx, sess, args, 4)
	if err != nil {
		return p, nil, nil, err
	}
	var output json.RawMessage
	if len(rest) > 0 && !resp.Is(rest[0], "next") {
		if !json.Valid(rest[0]) {
			return p, nil, nil, resp.Errorf("invalid step output: must be JSON")
		}
		output, rest = rest[0], rest[1:]
	}
	if len(rest) == 0 {
		return p, output, nil, nil
	}
	if !resp.Is(rest[0], "next") || len(rest) < 2 || len(rest) > 3 {
		return p, nil, nil, resp.ErrSyntax
	}
	next := &records.StepBeginParams{StepParams: p}
	next.StepID = string(rest[1])
	if len(rest) == 3 {
		if err := readStepBeginDoc(rest[2], next); err != nil {
			return p, nil, nil, err
		}
	}
	return p, output, next, nil
}

// STEP.FAIL job_id step_id error_json [DELIVERY token]
func (s *Server) cmdStepFail(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	p, rest, err := s.readStepCall(ctx, sess, args, 1)
	if err != nil {
		return nil, err
	}
	if len(rest) != 1 {
		return nil, resp.Errorf("wrong number of arguments for 'step.fail' command")
	}
	var doc stepFailDoc
	if err := decodeStepDoc(rest[0], &doc); err != nil {
		return nil, resp.Errorf("invalid step error: %s", err)
	}
	f := records.StepFailParams{StepParams: p, Message: doc.Message, NonRetryable: doc.NonRetryable}
	if f.Message == "" {
		f.Message = "failed without an error message"
	}
	if doc.RetryAfterSeconds != nil {
		d, ok := stepWait(*doc.RetryAfterSeconds, true)
		if !ok {
			return nil, resp.Errorf("invalid step error: retry_after_seconds must be between 0 and 2592000 (30 days)")
		}
		f.RetryAfter = &d
	}
	r, err := sess.eng.StepFail(ctx, f)
	if err != nil {
		return nil, err
	}
	if !r.Retry {
		return resp.Bulk(`{"retry":false}`), nil
	}
	return resp.Bulk(`{"retry":true,"retry_at":"` + r.RetryAt.UTC().Format(time.RFC3339Nano) + `"}`), nil
}

// STEP.SLEEP job_id step_id seconds [DELIVERY token]
func (s *Server) cmdStepSleep(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	p, rest, err := s.readStepCall(ctx, sess, args, 1)
	if err != nil {
		return nil, err
	}
	if len(rest) != 1 {
		return nil, resp.Errorf("wrong number of arguments for 'step.sleep' command")
	}
	secs, err := strconv.ParseFloat(string(rest[0]), 64)
	d, ok := stepWait(secs, false)
	if err != nil || !ok {
		return nil, resp.Errorf("seconds must be more than 0 and at most 2592000 (30 days)")
	}
	r, err := sess.eng.StepSleep(ctx, records.StepSleepParams{StepParams: p, For: d})
	if err != nil {
		return nil, err
	}
	if !r.Sleeping {
		return resp.OK, nil
	}
	return resp.SimpleString("SLEEPING " + r.WakeAt.UTC().Format(time.RFC3339Nano)), nil
}

// JOB.STEPS job_id [CURSOR c] [LIMIT n] — a JSON array of the job's steps in
// the order first begun; the next page starts at CURSOR c + the number
// answered.
func (s *Server) cmdJobSteps(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	p := records.JobStepsParams{JobID: string(args[1]), Limit: 100}
	for i := 2; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return nil, resp.ErrSyntax
		}
		n, err := resp.ParseInt(args[i+1])
		switch resp.Upper(args[i]) {
		case "CURSOR":
			if err != nil || n < 0 || n > records.MaxSteps {
				return nil, resp.Errorf("CURSOR must be between 0 and %d", records.MaxSteps)
			}
			p.After = int(n)
		case "LIMIT":
			if err != nil || n < 1 || n > 1000 {
				return nil, resp.Errorf("LIMIT must be between 1 and 1000")
			}
			p.Limit = int(n)
		default:
			return nil, resp.ErrSyntax
		}
	}
	// A worker's key reads the steps of the job it holds, and of the jobs
	// it submitted: it is their producer.
	if sess.principal().Role == auth.RoleWorker && s.mayReadID(ctx, sess, p.JobID) != nil {
		w, err := s.hotWorker(ctx, sess)
		if err != nil {
			return nil, err
		}
		p.Holder = w.ID
	}
	steps, err := sess.eng.JobSteps(ctx, p)
	if err != nil {
		return nil, err
	}
	return resp.Bulk(stepsJSON(steps)), nil
}

// stepsJSON is JOB.STEPS's array.
func stepsJSON(steps []records.Step) []byte {
	type stepJSON struct {
		StepID      string          `json:"step_id"`
		Kind        string          `json:"kind"`
		Status      string          `json:"status"`
		Attempts    int             `json:"attempts"`
		Input       json.RawMessage `json:"input"`
		Output      json.RawMessage `json:"output"`
		Errors      json.RawMessage `json:"errors"`
		BeganAt     time.Time       `json:"began_at"`
		CompletedAt *time.Time      `json:"completed_at"`
		WakeAt      *time.Time      `json:"wake_at"`
		// A wait's deadline (null for none), and what it waits for.
		Deadline json.RawMessage `json:"deadline,omitempty"`
		Signal   *string         `json:"signal,omitempty"`
		Jobs     []string        `json:"jobs,omitempty"`
		History  []attemptJSON   `json:"history"`
	}
	out := make([]stepJSON, len(steps))
	for i, st := range steps {
		out[i] = stepJSON{StepID: st.StepID, Kind: st.Kind, Status: st.Status, Attempts: st.Attempts,
			Input: rawOrNull(st.Input), Output: rawOrNull(st.Output), Errors: rawOrNull(st.Errors),
			BeganAt: st.BeganAt.UTC(), CompletedAt: utcOrNil(st.CompletedAt), WakeAt: utcOrNil(st.WakeAt),
			Signal: st.Signal, Jobs: st.Jobs}
		if st.Kind == "wait" {
			out[i].Deadline, _ = json.Marshal(utcOrNil(st.Deadline))
		}
		out[i].History = historyJSON(st.History)
	}
	b, _ := json.Marshal(out)
	return b
}

// attemptJSON is an entry of a step's history in JOB.STEPS: a running
// attempt has no outcome (null).
type attemptJSON struct {
	Attempt int        `json:"attempt"`
	BeganAt time.Time  `json:"began_at"`
	EndedAt *time.Time `json:"ended_at"`
	Outcome *string    `json:"outcome"`
	Error   *string    `json:"error"`
}

// historyJSON is a step's history in JOB.STEPS, [] for none.
func historyJSON(history []records.StepAttempt) []attemptJSON {
	out := make([]attemptJSON, len(history))
	for i, a := range history {
		out[i] = attemptJSON{Attempt: a.Attempt, BeganAt: a.BeganAt.UTC(), EndedAt: utcOrNil(a.EndedAt), Error: a.Error}
		if a.Outcome != "" {
			out[i].Outcome = &history[i].Outcome
		}
	}
	return out
}

func utcOrNil(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// readStepCall reads what every STEP.* call has: the job, the step, the
// trailing DELIVERY token, and the calling worker. It answers the
// arguments between the step id and the token, at most most of them:
// more are options it does not know, a syntax error as in Redis.
func (s *Server) readStepCall(ctx context.Context, sess *Session, args [][]byte, most int) (records.StepParams, [][]byte, error) {
	p := records.StepParams{JobID: string(args[1]), StepID: string(args[2])}
	rest := args[3:]
	if n := len(rest); n >= 2 && resp.Is(rest[n-2], "delivery") {
		var ok bool
		if p.Delivery, ok = deliveryToken(string(rest[n-1])); !ok {
			return p, nil, resp.Errorf("invalid delivery: must be the token the job was delivered with")
		}
		rest = rest[:n-2]
	}
	if len(rest) > most {
		return p, nil, resp.ErrSyntax
	}
	for _, a := range rest {
		if int64(len(a)) > s.opts.MaxPayload {
			return p, nil, resp.ErrPayloadTooBig
		}
		if err := textError(a); err != nil {
			return p, nil, resp.Errorf("invalid step: %s", err)
		}
	}
	var err error
	if p.WorkerID, p.Admin, err = s.caller(ctx, sess); err != nil {
		return p, nil, err
	}
	return p, rest, nil
}

// decodeStepDoc decodes a step call's object strictly: unknown fields are
// refused, as in a job.
func decodeStepDoc(raw []byte, v any) error {
	body := bytes.TrimSpace(raw)
	if len(body) == 0 || body[0] != '{' {
		return errors.New("must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New(jsonmsg.Reason(err))
	}
	if dec.More() {
		return errors.New("must be one JSON object")
	}
	return nil
}

// stepWait is secs as a duration within maxStepWait; zero allowed when
// zeroOK.
func stepWait(secs float64, zeroOK bool) (time.Duration, bool) {
	if math.IsNaN(secs) || secs < 0 || secs == 0 && !zeroOK || secs > maxStepWait.Seconds() {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// jobGetJSON is the job as JOB.GET and GET job:<id> show it: with its count of steps.
func jobGetJSON(j records.Job) []byte {
	m := jobFields(j)
	m["steps"] = j.Steps
	b, _ := json.Marshal(m)
	return b
}
