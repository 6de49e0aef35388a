package commands

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/agq/agq/internal/jsonmsg"
	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/internal/tracing"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// jobSpec is the JOB.SUBMIT document. Unknown fields are refused: a typo in
// a field name must not silently change what runs.
type jobSpec struct {
	JobID               string          `json:"job_id"`
	Queue               string          `json:"queue"`
	Type                string          `json:"type"`
	Requires            *[]string       `json:"requires"`
	Plan                json.RawMessage `json:"plan"`
	Inputs              json.RawMessage `json:"inputs"`
	Payload             json.RawMessage `json:"payload"`
	Priority            int             `json:"priority"`
	MaxAttempts         *int            `json:"max_attempts"`
	RetryBackoffSeconds *float64        `json:"retry_backoff_seconds"`
	TimeoutSeconds      *int            `json:"timeout_seconds"`
	RunAt               *time.Time      `json:"run_at"`
	DelaySeconds        *float64        `json:"delay_seconds"`
	UniqueKey           string          `json:"unique_key"`
	After               *[]string       `json:"after"`
	OnParentFailure     string          `json:"on_parent_failure"`
	// TraceParent and TraceState are the submitter's W3C trace context:
	// not part of the job's contents.
	TraceParent string `json:"traceparent"`
	TraceState  string `json:"tracestate"`
}

// planTools is the part of a plan that names the tools it needs.
type planTools struct {
	Tasks []struct {
		Tool string `json:"tool"`
	} `json:"tasks"`
}

// parseJob validates one job document. defaultQueue applies when it names none.
func (s *Server) parseJob(raw []byte, defaultQueue string) (records.NewJob, error) {
	if err := s.checkDoc(raw); err != nil {
		return records.NewJob{}, err
	}
	var spec jobSpec
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
	return s.jobFromSpec(spec, defaultQueue)
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

// parseBatch reads a JSON array of job documents with one decoder, each
// checked and validated as parseJob does it. ok is false when any element
// is not a valid job, or the array is not a valid batch: the caller then
// parses the documents one by one, to word the first error found.
func (s *Server) parseBatch(body []byte) (jobs []records.NewJob, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, false
	}
	for dec.More() {
		if len(jobs) == maxBatch {
			return nil, false
		}
		start := dec.InputOffset()
		var spec jobSpec
		if err := dec.Decode(&spec); err != nil {
			return nil, false
		}
		raw := bytes.TrimLeft(body[start:dec.InputOffset()], ", \t\r\n")
		if s.checkDoc(raw) != nil {
			return nil, false
		}
		j, err := s.jobFromSpec(spec, "ready")
		if err != nil {
			return nil, false
		}
		jobs = append(jobs, j)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim(']') || len(jobs) == 0 {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // something after the array
	}
	return jobs, true
}

// jobFromSpec validates a decoded job document. defaultQueue applies when
// it names none.
func (s *Server) jobFromSpec(spec jobSpec, defaultQueue string) (records.NewJob, error) {
	j := records.NewJob{
		ID:                  spec.JobID,
		Queue:               cmp.Or(spec.Queue, defaultQueue),
		Type:                spec.Type,
		Plan:                spec.Plan,
		Inputs:              spec.Inputs,
		Payload:             spec.Payload,
		Priority:            spec.Priority,
		MaxAttempts:         s.opts.MaxAttempts,
		RetryBackoffSeconds: 1,
		TimeoutSeconds:      int(s.opts.JobTimeout / time.Second),
		UniqueKey:           spec.UniqueKey,
	}
	if j.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return records.NewJob{}, err
		}
		j.ID = id.String()
	} else if !names.JobID(j.ID) {
		return records.NewJob{}, fmt.Errorf("job_id must be %s", names.Rule)
	}
	if !names.Queue(j.Queue) {
		return records.NewJob{}, fmt.Errorf("queue must be %s", names.Rule)
	}
	if len(j.Type) > 128 {
		return records.NewJob{}, fmt.Errorf("type is longer than 128 bytes")
	}
	if len(j.UniqueKey) > 256 {
		return records.NewJob{}, fmt.Errorf("unique_key is longer than 256 bytes")
	}
	if j.Priority < -1_000_000 || j.Priority > 1_000_000 {
		return records.NewJob{}, fmt.Errorf("priority must be between -1000000 and 1000000")
	}
	if spec.MaxAttempts != nil {
		if *spec.MaxAttempts < 1 || *spec.MaxAttempts > 1000 {
			return records.NewJob{}, fmt.Errorf("max_attempts must be between 1 and 1000")
		}
		j.MaxAttempts = *spec.MaxAttempts
	}
	if spec.RetryBackoffSeconds != nil {
		if *spec.RetryBackoffSeconds < 0 || *spec.RetryBackoffSeconds > 86400 {
			return records.NewJob{}, fmt.Errorf("retry_backoff_seconds must be between 0 and 86400")
		}
		j.RetryBackoffSeconds = *spec.RetryBackoffSeconds
	}
	if spec.TimeoutSeconds != nil {
		if *spec.TimeoutSeconds < 1 || *spec.TimeoutSeconds > 30*86400 {
			return records.NewJob{}, fmt.Errorf("timeout_seconds must be between 1 and 2592000")
		}
		j.TimeoutSeconds = *spec.TimeoutSeconds
	}
	switch {
	case spec.RunAt != nil && spec.DelaySeconds != nil:
		return records.NewJob{}, fmt.Errorf("give run_at or delay_seconds, not both")
	case spec.RunAt != nil:
		j.RunAt = *spec.RunAt
	case spec.DelaySeconds != nil:
		if *spec.DelaySeconds < 0 || *spec.DelaySeconds > 366*86400 {
			return records.NewJob{}, fmt.Errorf("delay_seconds must be between 0 and 31622400")
		}
		j.RunAt = time.Now().Add(time.Duration(*spec.DelaySeconds * float64(time.Second)))
	}
	requires, err := deriveRequires(spec)
	if err != nil {
		return records.NewJob{}, err
	}
	j.Requires = requires
	if err := afterFromSpec(spec, &j); err != nil {
		return records.NewJob{}, err
	}
	if err := traceFromSpec(spec, &j); err != nil {
		return records.NewJob{}, err
	}
	return j, nil
}

// traceFromSpec reads traceparent and tracestate; a tracestate without a
// traceparent means nothing and is dropped, as W3C says.
func traceFromSpec(spec jobSpec, j *records.NewJob) error {
	if spec.TraceParent == "" {
		return nil
	}
	if !tracing.ValidParent(spec.TraceParent) {
		return fmt.Errorf("traceparent must be a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>")
	}
	if len(spec.TraceState) > tracing.MaxStateLen {
		return fmt.Errorf("tracestate is longer than %d bytes", tracing.MaxStateLen)
	}
	j.TraceParent, j.TraceState = spec.TraceParent, spec.TraceState
	return nil
}

// afterFromSpec reads after and on_parent_failure.
func afterFromSpec(spec jobSpec, j *records.NewJob) error {
	switch spec.OnParentFailure {
	case "", records.ParentFailureCancel, records.ParentFailureRun:
		j.OnParentFailure = spec.OnParentFailure
	default:
		return fmt.Errorf("on_parent_failure must be \"cancel\" or \"run\"")
	}
	if spec.After == nil {
		return nil
	}
	after := *spec.After
	if len(after) == 0 || len(after) > records.MaxParents {
		return fmt.Errorf("after must name 1 to %d jobs", records.MaxParents)
	}
	seen := make(map[string]bool, len(after))
	for _, p := range after {
		if seen[p] {
			return fmt.Errorf("after names job %s twice", p)
		}
		seen[p] = true
	}
	j.After = after
	return nil
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

// deriveRequires: the given list, else the tools of plan.tasks, else the
// type, else nothing.
func deriveRequires(spec jobSpec) ([]string, error) {
	var out []string
	switch {
	case spec.Requires != nil:
		out = *spec.Requires
	case len(spec.Plan) > 0 && string(spec.Plan) != "null":
		var p planTools
		if err := json.Unmarshal(spec.Plan, &p); err != nil {
			return nil, fmt.Errorf("plan must be an object whose tasks name their tool: %s", jsonmsg.Reason(err))
		}
		for i, t := range p.Tasks {
			if t.Tool == "" {
				return nil, fmt.Errorf("plan.tasks[%d].tool is missing", i)
			}
			out = append(out, t.Tool)
		}
	}
	if len(out) == 0 && spec.Type != "" && spec.Requires == nil {
		out = []string{spec.Type}
	}
	uniq := make([]string, 0, len(out))
	var seen map[string]bool // for long lists only: most have a few entries
	if len(out) > 16 {
		seen = make(map[string]bool, len(out))
	}
	for _, r := range out {
		if r == "" || len(r) > 128 {
			return nil, fmt.Errorf("requires entries must be 1-128 bytes")
		}
		if seen != nil && !seen[r] || seen == nil && !slices.Contains(uniq, r) {
			uniq = append(uniq, r)
			if seen != nil {
				seen[r] = true
			}
		}
	}
	return uniq, nil
}

// delivery is the job as BRPOP hands it to a worker. Its fields are in
// name order, as a map of them would be encoded: a struct encodes without
// sorting keys or boxing values, and a pop of many jobs encodes each.
type delivery struct {
	Attempt     int                            `json:"attempt"`
	Delivery    string                         `json:"delivery,omitempty"`
	Inputs      json.RawMessage                `json:"inputs"`
	JobID       string                         `json:"job_id"`
	MaxAttempts int                            `json:"max_attempts"`
	Parents     map[string]records.ParentState `json:"parents,omitempty"`
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
