package commands

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/group"
	"github.com/agq/agq/internal/jsonmsg"
	"github.com/agq/agq/resp"
	"github.com/agq/agq/store"
)

func (s *Server) jobCommands() []*Command {
	producer := roleProducer | roleAdmin
	worker := roleWorker | roleAdmin
	return []*Command{
		{Name: "job.submit", Arity: 2, Roles: producer, Handler: s.cmdJobSubmit},
		{Name: "lpush", Arity: -3, Roles: producer, Handler: s.cmdLPush},
		{Name: "brpop", Arity: -3, Roles: worker, Blocking: true, Handler: s.cmdBRPop},
		{Name: "rpop", Arity: -2, Roles: worker, Handler: s.cmdRPop},
		{Name: "blmpop", Arity: -5, Roles: worker, Blocking: true, Handler: s.cmdBLMPop},
		{Name: "lmpop", Arity: -4, Roles: worker, Handler: s.cmdLMPop},
		{Name: "job.update", Arity: 3, Roles: worker, Handler: s.cmdJobUpdate},
		{Name: "job.get", Arity: 2, Roles: readers, Handler: s.cmdJobGet},
		{Name: "job.wait", Arity: 3, Roles: readers, Blocking: true, Handler: s.cmdJobWait},
		{Name: "job.list", Arity: -1, Roles: readers, Handler: s.cmdJobList},
		{Name: "job.cancel", Arity: 2, Roles: producer, Handler: s.cmdJobCancel},
		{Name: "job.retry", Arity: 2, Roles: producer, Handler: s.cmdJobRetry},
	}
}

// submit validates every job, then inserts them all in one transaction:
// a bad element rejects the whole batch, naming its index.
// keyQueue is the queue of LPUSH's key, "" for JOB.SUBMIT.
func (s *Server) submit(ctx context.Context, docs [][]byte, keyQueue string, batch bool) ([]store.SubmitResult, error) {
	jobs, err := s.parseJobs(docs, keyQueue, batch)
	if err != nil {
		return nil, err
	}
	return s.submitJobs(ctx, jobs, batch)
}

// parseJobs validates the documents, naming the first that is not a valid
// job. keyQueue is the queue of LPUSH's key, "" for JOB.SUBMIT.
func (s *Server) parseJobs(docs [][]byte, keyQueue string, batch bool) ([]store.NewJob, error) {
	jobs := make([]store.NewJob, len(docs))
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

// submitJobs inserts validated jobs: a batch in one transaction, a single
// job with the node's next group of submissions.
func (s *Server) submitJobs(ctx context.Context, jobs []store.NewJob, batch bool) ([]store.SubmitResult, error) {
	var res []store.SubmitResult
	var err error
	if batch {
		var notes []store.ReadyNote
		res, notes, err = s.store.JobsSubmit(ctx, jobs)
		if err == nil {
			s.hub.Publish(notes, nil)
			s.publishSubmitted(jobs, res, nil)
		}
	} else {
		// A single job joins the node's next group of submissions: it
		// shares that group's commit, and its reply still waits for it.
		var out submitOutcome
		out, err = s.groups.submits.Do(ctx, jobs[0])
		if err == nil {
			res, err = []store.SubmitResult{out.res}, out.err
		}
	}
	if errors.Is(err, store.ErrConflict) {
		return nil, resp.CodeErrorf("TRYAGAIN", "%s", err)
	}
	if exists := (*store.JobExistsError)(nil); errors.As(err, &exists) {
		// An id is one job: submitting it again is idempotent only
		// with the same contents.
		return nil, resp.Errorf("%s", err)
	}
	return res, err
}

// JOB.SUBMIT json — one job object, or an array of them submitted together.
func (s *Server) cmdJobSubmit(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	body := bytes.TrimSpace(args[1])
	if len(body) > 0 && body[0] == '[' {
		// One decoding of a valid batch; an invalid one is read again,
		// document by document, to say what is wrong with it.
		jobs, ok := s.parseBatch(body)
		if !ok {
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
			var err error
			if jobs, err = s.parseJobs(raw, "", true); err != nil {
				return nil, err
			}
		}
		res, err := s.submitJobs(ctx, jobs, true)
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(res))
		for i, r := range res {
			ids[i] = r.ID
		}
		return resp.StringArray(ids), nil
	}
	res, err := s.submit(ctx, [][]byte{body}, "", false)
	if err != nil {
		return nil, err
	}
	return resp.BulkString(res[0].ID), nil
}

// maxBatch bounds the jobs of one JOB.SUBMIT.
const maxBatch = 10000

// LPUSH queue:<name> json [json …] — answers the queue's ready depth.
func (s *Server) cmdLPush(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
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
	res, err := s.submitJobs(ctx, jobs, len(args) > 3)
	if err != nil {
		return nil, err
	}
	ready, now := int64(0), time.Now()
	for i, r := range res {
		if r.Created && r.Delivered == nil && !jobs[i].RunAt.After(now) {
			ready++
		}
	}
	n, err := s.pushedDepth(ctx, queues[0], ready)
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

// maxSnooze bounds one snooze.
const maxSnooze = 366 * 24 * time.Hour

// JOB.UPDATE job_id json
func (s *Server) cmdJobUpdate(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	r, err := s.readReport(ctx, sess, args)
	if err != nil {
		return nil, err
	}
	if r.group == nil {
		return s.snooze(ctx, r.p)
	}
	// The report joins the node's next group of its kind: a final one
	// shares that group's commit, and its reply waits for it.
	err, gerr := r.group.Do(ctx, r.p)
	return reportReply(r.p.ID, err, gerr)
}

// report is a JOB.UPDATE read and checked: what the store is to apply, and
// the group it joins (none for a snooze, which takes the careful path).
type report struct {
	p     store.JobUpdateParams
	group *group.Runner[store.JobUpdateParams, error]
}

// readReport reads and checks a JOB.UPDATE's arguments and finds the
// reporting worker.
func (s *Server) readReport(ctx context.Context, sess *Session, args [][]byte) (report, error) {
	id := string(args[1])
	if int64(len(args[2])) > s.opts.MaxPayload {
		return report{}, resp.ErrPayloadTooBig
	}
	// One decoding: the document must be an object, checked by its first
	// byte, since decoding null or an array into a struct would not fail.
	var doc updateDoc
	if body := bytes.TrimSpace(args[2]); len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &doc) != nil {
		var typeErr *json.UnmarshalTypeError
		if err := json.Unmarshal(args[2], &doc); errors.As(err, &typeErr) && typeErr.Field != "" {
			return report{}, resp.Errorf("invalid update: %s", jsonmsg.Reason(err))
		}
		return report{}, resp.Errorf("invalid update: must be a JSON object")
	}
	switch doc.Status {
	case "", store.StatusRunning, store.StatusCompleted, store.StatusFailed, store.StatusCancelled:
	case store.StatusSnoozed:
		if doc.Seconds == nil || !(*doc.Seconds > 0) || time.Duration(*doc.Seconds*float64(time.Second)) > maxSnooze {
			return report{}, resp.Errorf("invalid update: a snooze needs seconds, more than 0 and at most a year")
		}
	default:
		return report{}, resp.Errorf("invalid update: status must be running, completed, failed, cancelled or snoozed")
	}
	if err := textError(args[2]); err != nil {
		return report{}, resp.Errorf("invalid update: %s", err)
	}
	if doc.Delivery != "" {
		u, err := uuid.Parse(doc.Delivery)
		if err != nil {
			return report{}, resp.Errorf("invalid update: delivery must be the token the job was delivered with")
		}
		// In the form the store compares (any case, braces or urn: name the same token).
		doc.Delivery = u.String()
	}
	p := store.JobUpdateParams{ID: id, Status: doc.Status, Error: doc.Error, Retryable: true, Attempt: doc.Attempt,
		Delivery: doc.Delivery, Raw: args[2], MaxSnoozes: s.opts.MaxSnoozes}
	if doc.Seconds != nil {
		p.SnoozeFor = time.Duration(*doc.Seconds * float64(time.Second))
	}
	if doc.Retryable != nil {
		p.Retryable = *doc.Retryable
	}
	if doc.Status == store.StatusFailed && p.Error == "" {
		p.Error = "failed without an error message"
	}
	if sess.principal().Role == auth.RoleAdmin {
		p.Admin = true
	} else {
		w, err := s.hotWorker(ctx, sess)
		if err != nil {
			return report{}, err
		}
		p.WorkerID = w.ID
	}
	switch doc.Status {
	case store.StatusSnoozed:
		return report{p: p}, nil
	case "", store.StatusRunning:
		return report{p: p, group: s.groups.acks}, nil
	}
	return report{p: p, group: s.groups.finishes}, nil
}

// snooze applies a snooze: rare, on the careful path, on its own.
func (s *Server) snooze(ctx context.Context, p store.JobUpdateParams) (resp.Reply, error) {
	freed, err := s.store.JobUpdate(ctx, p)
	s.hub.Free(freed) // the snooze, or a failure past the snooze limit
	if err != nil {
		return nil, jobError(p.ID, err)
	}
	s.publishAsIs(ctx, func(store.JobState) string { return store.StatusSnoozed }, p.ID)
	return resp.OK, nil
}

// reportReply is a grouped report's reply: err is the report's own
// refusal, gerr the group's failure.
func reportReply(id string, err, gerr error) (resp.Reply, error) {
	if err = cmp.Or(gerr, err); err != nil {
		return nil, jobError(id, err)
	}
	return resp.OK, nil
}

// jobError words store errors about one job for the client.
func jobError(id string, err error) error {
	var owner *store.NotOwnerError
	var state *store.StateError
	var stale *store.StaleDeliveryError
	var snoozes *store.SnoozeLimitError
	switch {
	case errors.As(err, &snoozes):
		return resp.Errorf("job %s was %s", id, snoozes)
	case errors.Is(err, store.ErrNotFound):
		return resp.Errorf("no such job %s", id)
	case errors.Is(err, store.ErrConflict):
		return resp.Errorf("job %s cannot be queued again: its unique_key is held by another unfinished job", id)
	case errors.Is(err, store.ErrJobCancelled):
		return resp.CodeErrorf("CANCELLED", "job %s was cancelled", id)
	case errors.As(err, &stale):
		return resp.Errorf("job %s was delivered again (attempt %d): this report is about an earlier delivery", id, stale.Attempt)
	case errors.As(err, &owner):
		return resp.Errorf("job %s is owned by %s", id, owner.Owner)
	case errors.As(err, &state):
		return resp.Errorf("job %s is %s", id, state.Status)
	}
	return err
}

// JOB.GET job_id
func (s *Server) cmdJobGet(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	j, err := s.store.JobGet(ctx, string(args[1]))
	if errors.Is(err, store.ErrNotFound) {
		return resp.Nil, nil
	}
	if err != nil {
		return nil, err
	}
	return resp.Bulk(jobJSON(j)), nil
}

// JOB.WAIT job_id timeout — the job once it is completed, failed or
// cancelled; nil on timeout.
func (s *Server) cmdJobWait(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	id := string(args[1])
	timeout, err := resp.ParseTimeout(args[2])
	if err != nil {
		return nil, err
	}
	b := newBlocking(ctx, sess, timeout, waitRecheck)
	defer b.close()
	jw := s.hub.NewJobWaiter(id, b.onWake())
	defer jw.Close()
	for {
		getCtx, cancel := s.ctxForCommand(sess)
		j, err := s.store.JobGet(getCtx, id)
		cancel()
		if errors.Is(err, store.ErrNotFound) {
			return nil, resp.Errorf("no such job %s", id)
		}
		if err != nil {
			return nil, err
		}
		if store.IsTerminal(j.Status) {
			return resp.Bulk(jobJSON(j)), nil
		}
		if _, reply, err := next(b, jw.C(), resp.Nil); reply != nil || err != nil {
			return reply, err
		}
	}
}

// JOB.LIST [QUEUE q] [STATUS s] [TYPE t] [LIMIT n] [CURSOR c]
// Answers [next_cursor, [job json …]] like SCAN; cursor "0" starts and ends.
func (s *Server) cmdJobList(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	p := store.JobListParams{Limit: 100}
	for i := 1; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return nil, resp.ErrSyntax
		}
		v := string(args[i+1])
		switch strings.ToUpper(string(args[i])) {
		case "QUEUE":
			p.Queue = v
		case "STATUS":
			p.Status = strings.ToLower(v)
			switch p.Status {
			case store.StatusQueued, store.StatusScheduled, store.StatusRunning, store.StatusRetrying,
				store.StatusCompleted, store.StatusFailed, store.StatusCancelled:
			default:
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
	jobs, err := s.store.JobList(ctx, p)
	if err != nil {
		return nil, err
	}
	next := "0"
	if len(jobs) == p.Limit {
		next = jobs[len(jobs)-1].ID
	}
	items := make(resp.Array, len(jobs))
	for i, j := range jobs {
		items[i] = resp.Bulk(jobJSON(j))
	}
	return resp.Array{resp.BulkString(next), items}, nil
}

// JOB.CANCEL job_id
func (s *Server) cmdJobCancel(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	if err := s.CancelJob(ctx, string(args[1])); err != nil {
		return nil, err
	}
	return resp.OK, nil
}

// JOB.RETRY job_id
func (s *Server) cmdJobRetry(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	if err := s.RetryJob(ctx, string(args[1])); err != nil {
		return nil, err
	}
	return resp.OK, nil
}
