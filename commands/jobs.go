package commands

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/jsonmsg"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

func (s *Server) jobCommands() []*Command {
	return []*Command{
		{Name: "job.submit", Arity: 2, Roles: producers | roleWorker, Handler: s.cmdJobSubmit, Prepare: s.prepareSubmission},
		{Name: "lpush", Arity: -3, Roles: producers, Handler: s.cmdLPush, Prepare: s.prepareSubmission},
		{Name: "brpop", Arity: -3, Roles: workers, Blocking: true, Handler: s.cmdBRPop},
		{Name: "rpop", Arity: -2, Roles: workers, Handler: s.cmdRPop},
		{Name: "blmpop", Arity: -5, Roles: workers, Blocking: true, Handler: s.cmdBLMPop},
		{Name: "lmpop", Arity: -4, Roles: workers, Handler: s.cmdLMPop},
		{Name: "job.update", Arity: 3, Roles: workers, Handler: sendNow(s.prepareReport), Prepare: s.prepareReport},
		{Name: "job.get", Arity: 2, Roles: readers | roleWorker, Handler: s.cmdJobGet},
		{Name: "job.wait", Arity: 3, Roles: readers | roleWorker, Blocking: true, Handler: s.cmdJobWait},
		{Name: "job.list", Arity: -1, Roles: readers, Handler: s.cmdJobList},
		{Name: "job.cancel", Arity: -2, Roles: producers, Handler: s.cmdJobCancel},
		{Name: "job.retry", Arity: -2, Roles: producers, Handler: s.cmdJobRetry},
		{Name: "job.parents", Arity: -2, Roles: workers, Handler: s.cmdJobParents},
		{Name: "job.children", Arity: -2, Roles: readers | roleWorker, Handler: s.cmdJobChildren},
	}
}

// parseJobs validates the documents, naming the first that is not a valid
// job. keyQueue is the queue of LPUSH's key, "" for JOB.SUBMIT.
func (s *Server) parseJobs(docs [][]byte, keyQueue string, batch bool) ([]records.NewJob, error) {
	jobs := make([]records.NewJob, len(docs))
	for i, d := range docs {
		j, err := s.parseJob(d, cmp.Or(keyQueue, "ready"))
		if err != nil {
			if errors.Is(err, resp.ErrPayloadTooBig) {
				return nil, resp.ErrPayloadTooBig
			}
			if batch {
				return nil, resp.Errorf("job %d: %s", i, err)
			}
			return nil, resp.Errorf("invalid job: %s", err)
		}
		if keyQueue != "" && j.Queue != keyQueue {
			return nil, resp.Errorf("job %d: its queue %q is not the key's queue %q", i, j.Queue, keyQueue)
		}
		jobs[i] = j
	}
	return jobs, nil
}

// errUndecoded: a batch one decoder could not read.
var errUndecoded = errors.New("undecoded")

// batchJobs reads a batch with one decoder and takes each of its jobs
// through the engine's rules, naming the first refused; errUndecoded when
// the batch must be read document by document to word what is wrong.
func (s *Server) batchJobs(body []byte) ([]records.NewJob, error) {
	specs, ok := s.decodeBatch(body)
	if !ok {
		return nil, errUndecoded
	}
	jobs := make([]records.NewJob, len(specs))
	for i, spec := range specs {
		j, err := s.eng.NewJob(spec, "ready")
		if err != nil {
			return nil, resp.Errorf("job %d: %s", i, err)
		}
		jobs[i] = j
	}
	return jobs, nil
}

// JOB.SUBMIT json — one job object, or an array of them submitted together.
func (s *Server) cmdJobSubmit(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	body := bytes.TrimSpace(args[1])
	if len(body) > 0 && body[0] == '[' {
		// One decoding of a valid batch; an invalid one is read again,
		// document by document, to say what is wrong with it.
		jobs, err := s.batchJobs(body)
		if err == errUndecoded {
			var docs []json.RawMessage
			if err := json.Unmarshal(body, &docs); err != nil {
				return nil, resp.Errorf("invalid job batch: %s", strings.TrimPrefix(err.Error(), "json: "))
			}
			if len(docs) == 0 {
				return nil, resp.Errorf("invalid job batch: empty array")
			}
			if len(docs) > maxBatch {
				return nil, resp.Errorf("invalid job batch: more than %d jobs", maxBatch)
			}
			raw := make([][]byte, len(docs))
			for i, d := range docs {
				raw[i] = d
			}
			if jobs, err = s.parseJobs(raw, "", true); err != nil {
				return nil, err
			}
		} else if err != nil {
			return nil, err
		}
		if err := checkAfterTotal(jobs); err != nil {
			return nil, err
		}
		setSubmitter(sess, jobs)
		res, err := sess.eng.SubmitBatch(ctx, jobs)
		if err != nil {
			return nil, err
		}
		return resp.ArrayOf(res, func(r records.SubmitResult) resp.Reply { return resp.BulkString(r.ID) }), nil
	}
	return sendNow(s.prepareSubmission)(ctx, sess, args)
}

// maxBatch bounds the jobs of one JOB.SUBMIT.
const maxBatch = 10000

// LPUSH queue:<name> json [json …] — answers the queue's ready depth.
func (s *Server) cmdLPush(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	if !bytes.HasPrefix(args[1], []byte("queue:")) {
		return nil, resp.ErrReadOnlyKeys // a write to a key that is not a queue
	}
	queues, err := queueKeys(args[1:2])
	if err != nil {
		return nil, err
	}
	jobs, err := s.parseJobs(args[2:], queues[0], len(args) > 3)
	if err != nil {
		return nil, err
	}
	n, err := sess.eng.Push(ctx, queues[0], jobs)
	if err != nil {
		return nil, err
	}
	return resp.Int(n), nil
}

// updateDoc is the part of a JOB.UPDATE document agq interprets; the rest
// is kept as progress or result.
type updateDoc struct {
	Status    string `json:"status"`
	Error     string `json:"error"`
	Retryable *bool  `json:"retryable"`
	Attempt   int    `json:"attempt"`
	Delivery  string `json:"delivery"`
	// Seconds is how long a snoozed job waits.
	Seconds *float64 `json:"seconds"`
}

// decodeUpdateDoc reads a JOB.UPDATE document with encoding/json, which
// words what is wrong with it. The document must be an object, checked by
// its first byte, since decoding null or an array into a struct would not
// fail.
func decodeUpdateDoc(raw []byte, doc *updateDoc) error {
	*doc = updateDoc{}
	if body := bytes.TrimSpace(raw); len(body) > 0 && body[0] == '{' && json.Unmarshal(body, doc) == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(raw, doc); errors.As(err, &typeErr) && typeErr.Field != "" {
		return resp.Errorf("invalid update: %s", jsonmsg.Reason(err))
	}
	return resp.Errorf("invalid update: must be a JSON object")
}

// maxSnooze bounds one snooze.
const maxSnooze = 366 * 24 * time.Hour

// JOB.UPDATE job_id json
func (s *Server) prepareReport(ctx context.Context, sess *Session, args [][]byte) (write, error) {
	r, err := s.readReport(ctx, sess, args)
	if err != nil {
		return write{}, err
	}
	return write{keys: []string{"job:" + r.ID}, send: func() func(context.Context) (resp.Reply, error) {
		return okOnNil(sess.eng.Report(r))
	}}, nil
}

// readReport reads and checks a JOB.UPDATE's arguments and finds the
// reporting worker.
func (s *Server) readReport(ctx context.Context, sess *Session, args [][]byte) (records.Report, error) {
	id := string(args[1])
	if int64(len(args[2])) > s.opts.MaxPayload {
		return records.Report{}, resp.ErrPayloadTooBig
	}
	var doc updateDoc
	if !readUpdateDoc(args[2], &doc) {
		if err := decodeUpdateDoc(args[2], &doc); err != nil {
			return records.Report{}, err
		}
	}
	switch doc.Status {
	case "", records.StatusRunning, records.StatusCompleted, records.StatusFailed, records.StatusCancelled:
	case records.StatusSnoozed:
		if doc.Seconds == nil || !(*doc.Seconds > 0) || time.Duration(*doc.Seconds*float64(time.Second)) > maxSnooze {
			return records.Report{}, resp.Errorf("invalid update: a snooze needs seconds, more than 0 and at most a year")
		}
	default:
		return records.Report{}, resp.Errorf("invalid update: status must be running, completed, failed, cancelled or snoozed")
	}
	if err := textError(args[2]); err != nil {
		return records.Report{}, resp.Errorf("invalid update: %s", err)
	}
	if doc.Attempt < 0 { // 0 is none given; no delivery has a negative one
		return records.Report{}, resp.Errorf("invalid update: attempt must be a positive integer")
	}
	if doc.Delivery != "" {
		var ok bool
		if doc.Delivery, ok = deliveryToken(doc.Delivery); !ok {
			return records.Report{}, resp.Errorf("invalid update: delivery must be the token the job was delivered with")
		}
	}
	p := records.Report{ID: id, Status: doc.Status, Error: doc.Error, Retryable: true, Attempt: doc.Attempt,
		Delivery: doc.Delivery, Raw: args[2]}
	if doc.Seconds != nil {
		p.SnoozeFor = time.Duration(*doc.Seconds * float64(time.Second))
	}
	if doc.Retryable != nil {
		p.Retryable = *doc.Retryable
	}
	if doc.Status == records.StatusFailed && p.Error == "" {
		p.Error = "failed without an error message"
	}
	var err error
	if p.WorkerID, p.Admin, err = s.caller(ctx, sess); err != nil {
		return records.Report{}, err
	}
	return p, nil
}

// JOB.GET job_id
func (s *Server) cmdJobGet(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	j, err := sess.eng.JobGet(ctx, string(args[1]))
	if err == nil {
		if err := mayRead(sess, j); err != nil {
			return nil, err
		}
	}
	return jsonOrNil(j, err, jobGetJSON)
}

// JOB.WAIT job_id timeout — the job once it is completed, failed or
// cancelled; nil on timeout.
func (s *Server) cmdJobWait(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	id := string(args[1])
	timeout, err := resp.ParseTimeout(args[2])
	if err != nil {
		return nil, err
	}
	if err := s.mayReadID(ctx, sess, id); err != nil {
		return nil, err
	}
	b := newBlocking(ctx, sess, timeout, api.WaitRecheck)
	defer b.close()
	j, ended, err := sess.eng.WaitJob(ctx, id, jobWait{b})
	if err != nil || !ended {
		return resp.Nil, err
	}
	return resp.Bulk(jobJSON(j)), nil
}

// JOB.LIST [QUEUE q] [STATUS s] [TYPE t] [LIMIT n] [CURSOR c]
// Answers [next_cursor, [job json …]] like SCAN; cursor "0" starts and ends.
func (s *Server) cmdJobList(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	p := records.JobListParams{Limit: 100}
	for i := 1; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return nil, resp.ErrSyntax
		}
		v := string(args[i+1])
		switch resp.Upper(args[i]) {
		case "QUEUE":
			p.Queue = v
		case "STATUS":
			p.Status = strings.ToLower(v)
			if !slices.Contains(records.Statuses, p.Status) {
				return nil, resp.Errorf("unknown status '%s'", v)
			}
		case "TYPE":
			p.Type = v
		case "LIMIT":
			n, err := resp.ParseInt(args[i+1])
			if err != nil || n < 1 || n > 1000 {
				return nil, resp.Errorf("LIMIT must be between 1 and 1000")
			}
			p.Limit = int(n)
		case "CURSOR":
			if v != "0" {
				p.Cursor = v
			}
		default:
			return nil, resp.ErrSyntax
		}
	}
	jobs, err := sess.eng.JobList(ctx, p)
	if err != nil {
		return nil, err
	}
	next := "0"
	if len(jobs) == p.Limit {
		next = jobs[len(jobs)-1].ID
	}
	items := resp.ArrayOf(jobs, func(j records.Job) resp.Reply { return resp.Bulk(jobJSON(j)) })
	return resp.Array{resp.BulkString(next), items}, nil
}

// JOB.CANCEL job_id [CASCADE]
func (s *Server) cmdJobCancel(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	switch {
	case len(args) == 2:
		return okOr(sess.eng.CancelJob(ctx, string(args[1])))
	case len(args) == 3 && strings.EqualFold(string(args[2]), "cascade"):
		return okOr(sess.eng.CancelJobCascade(ctx, string(args[1])))
	}
	return nil, resp.ErrSyntax
}

// JOB.RETRY job_id [FROM step_id]
func (s *Server) cmdJobRetry(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	switch {
	case len(args) == 2:
		return okOr(sess.eng.RetryJob(ctx, string(args[1])))
	case len(args) == 4 && strings.EqualFold(string(args[2]), "from"):
		return okOr(sess.eng.RetryJobFrom(ctx, string(args[1]), string(args[3])))
	}
	return nil, resp.ErrSyntax
}
