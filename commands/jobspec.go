package commands

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/agq/agq/internal/jsonmsg"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// parseJob validates one job document. defaultQueue applies when it names none.
func (s *Server) parseJob(raw []byte, defaultQueue string) (records.NewJob, error) {
	if err := s.checkDoc(raw); err != nil {
		return records.NewJob{}, err
	}
	var spec records.JobSpec
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "" {
			return records.NewJob{}, fmt.Errorf("a job must be a JSON object")
		}
		return records.NewJob{}, fmt.Errorf("%s", jsonmsg.Reason(err))
	}
	if dec.More() {
		return records.NewJob{}, fmt.Errorf("trailing data after the JSON object")
	}
	return s.eng.NewJob(spec, defaultQueue)
}

// checkDoc checks what a job document must be before it is decoded: not
// too large, UTF-8, not null, without text PostgreSQL cannot store.
func (s *Server) checkDoc(raw []byte) error {
	if int64(len(raw)) > s.opts.MaxPayload {
		return resp.ErrPayloadTooBig
	}
	if !utf8.Valid(raw) {
		return fmt.Errorf("not valid UTF-8")
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return fmt.Errorf("a job must be a JSON object")
	}
	// Only an escape can spell text PostgreSQL cannot store.
	if bytes.Contains(raw, []byte(`\u`)) && json.Valid(raw) {
		if err := textError(raw); err != nil {
			return err
		}
	}
	return nil
}

// decodeBatch reads a JSON array of job documents with one decoder, each
// checked as parseJob checks it. ok is false when any element is not a job
// document, or the array is not a valid batch: the caller then parses the
// documents one by one, to word the first error found.
func (s *Server) decodeBatch(body []byte) (specs []records.JobSpec, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, false
	}
	for dec.More() {
		if len(specs) == maxBatch {
			return nil, false
		}
		start := dec.InputOffset()
		var spec records.JobSpec
		if err := dec.Decode(&spec); err != nil {
			return nil, false
		}
		raw := bytes.TrimLeft(body[start:dec.InputOffset()], ", \t\r\n")
		if s.checkDoc(raw) != nil {
			return nil, false
		}
		specs = append(specs, spec)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim(']') || len(specs) == 0 {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // something after the array
	}
	return specs, true
}

// checkAfterTotal bounds the after entries of one submission.
func checkAfterTotal(jobs []records.NewJob) error {
	n := 0
	for _, j := range jobs {
		n += len(j.After)
	}
	if n > records.MaxAfterEntries {
		return resp.Errorf("invalid job batch: more than %d after entries", records.MaxAfterEntries)
	}
	return nil
}

// delivery is the job as BRPOP hands it to a worker. Its fields are in
// name order, as a map of them would be encoded: a struct encodes without
// sorting keys or boxing values, and a pop of many jobs encodes each.
type delivery struct {
	Attempt     int             `json:"attempt"`
	Delivery    string          `json:"delivery,omitempty"`
	FairKey     string          `json:"fair_key,omitempty"`
	Inputs      json.RawMessage `json:"inputs"`
	JobID       string          `json:"job_id"`
	MaxAttempts int             `json:"max_attempts"`
	// Namespace is the job's (§6f): its id is unique only there.
	Namespace string                         `json:"namespace"`
	Parents   map[string]records.ParentState `json:"parents,omitempty"`
	// ParentsTruncated: the parents' results did not fit (JOB.PARENTS).
	ParentsTruncated bool            `json:"parents_truncated,omitempty"`
	Payload          json.RawMessage `json:"payload"`
	Plan             json.RawMessage `json:"plan"`
	Priority         int             `json:"priority"`
	Queue            string          `json:"queue"`
	Requires         []string        `json:"requires"`
	TimeoutSeconds   int             `json:"timeout_seconds"`
	// TraceParent names the span a worker's spans join (its attempt's, or
	// the submitter's when agq does not trace); TraceState goes with it.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	Type        string `json:"type"`
}

// deliveryJSON is the job as BRPOP hands it to a worker, or as LRANGE
// shows a waiting one. A delivery carries its token.
func deliveryJSON(j records.Job) []byte {
	d := deliveryFor(j)
	if b, ok := appendDelivery(make([]byte, 0, 256+len(d.Payload)+len(d.Plan)+len(d.Inputs)), &d); ok {
		return b
	}
	b, _ := json.Marshal(d)
	return b
}

// jobJSON is the full record JOB.WAIT and JOB.LIST answer (JOB.GET and GET job:<id> add its steps).
func jobJSON(j records.Job) []byte {
	b, _ := json.Marshal(jobFields(j))
	return b
}

// jobFields are the job's JSON fields.
func jobFields(j records.Job) map[string]any {
	m := map[string]any{
		"namespace":             j.Namespace,
		"job_id":                j.ID,
		"queue":                 j.Queue,
		"type":                  j.Type,
		"requires":              j.Requires,
		"plan":                  rawOrNull(j.Plan),
		"inputs":                rawOrNull(j.Inputs),
		"payload":               rawOrNull(j.Payload),
		"priority":              j.Priority,
		"status":                j.Status,
		"attempt":               j.Attempt,
		"attempts":              j.Attempt,
		"max_attempts":          j.MaxAttempts,
		"retry_backoff_seconds": j.RetryBackoffSeconds,
		"timeout_seconds":       j.TimeoutSeconds,
		"run_at":                j.RunAt.UTC(),
		"unique_key":            j.UniqueKey,
		"worker_id":             j.WorkerID,
		"cancel_requested":      j.CancelRequested,
		"progress":              rawOrNull(j.Progress),
		"result":                rawOrNull(j.Result),
		"errors":                rawOrNull(j.Errors),
		"created_at":            j.CreatedAt.UTC(),
		"started_at":            j.StartedAt,
		"finished_at":           j.FinishedAt,
		"updated_at":            j.UpdatedAt.UTC(),
		"snoozes":               j.Snoozes,
		"fair_key":              j.FairKey,
		"fair_weight":           j.FairWeight,
	}
	// Only a job with parents has these: other jobs read as they always did.
	if j.After != nil {
		m["after"], m["pending_parents"], m["on_parent_failure"] = j.After, j.PendingParents, j.OnParentFailure
	}
	return m
}

func rawOrNull(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage("null")
	}
	return r
}
