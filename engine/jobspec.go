package engine

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/agq/agq/internal/jsonmsg"
	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/internal/tracing"
	"github.com/agq/agq/records"
)

// JobRules are the rules of a job's fields: their bounds and defaults, the
// tools it requires, its parents and its trace context. Every submission
// takes its job through them (Engine.NewJob), whatever wire it came by.
type JobRules struct {
	// MaxAttempts and JobTimeout are a job's when its submission gives
	// none.
	MaxAttempts int
	JobTimeout  time.Duration
}

// NewJob is the job a submission asks for, as agq stores it: by the
// engine's JobRules.
func (e *Engine) NewJob(spec records.JobSpec, defaultQueue string) (records.NewJob, error) {
	return JobRules{MaxAttempts: e.cfg.MaxAttempts, JobTimeout: e.cfg.JobTimeout}.NewJob(spec, defaultQueue)
}

// NewJob is the job spec asks for: its fields checked, its defaults filled
// in. defaultQueue applies when spec names none. Its errors say what is
// wrong with the document.
func (r JobRules) NewJob(spec records.JobSpec, defaultQueue string) (records.NewJob, error) {
	j := records.NewJob{
		ID:                  spec.JobID,
		Queue:               cmp.Or(spec.Queue, defaultQueue),
		Type:                spec.Type,
		Plan:                spec.Plan,
		Inputs:              spec.Inputs,
		Payload:             spec.Payload,
		Priority:            spec.Priority,
		MaxAttempts:         r.MaxAttempts,
		RetryBackoffSeconds: 1,
		TimeoutSeconds:      int(r.JobTimeout / time.Second),
		UniqueKey:           spec.UniqueKey,
	}
	if j.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return records.NewJob{}, err
		}
		j.ID, j.GeneratedID = id.String(), true
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
	if err := fairFromSpec(spec, &j); err != nil {
		return records.NewJob{}, err
	}
	return j, nil
}

// fairFromSpec reads fair_key and fair_weight (BRIEF §6g): a key of 1 to
// 128 bytes, none sharing the key "", and a weight from 1 to 1000.
func fairFromSpec(spec records.JobSpec, j *records.NewJob) error {
	j.FairWeight = 1
	if spec.FairKey != nil {
		if len(*spec.FairKey) < 1 || len(*spec.FairKey) > records.MaxFairKey {
			return fmt.Errorf("fair_key must be 1 to %d bytes", records.MaxFairKey)
		}
		j.FairKey = *spec.FairKey
	}
	if spec.FairWeight != nil {
		if *spec.FairWeight < 1 || *spec.FairWeight > records.MaxFairWeight {
			return fmt.Errorf("fair_weight must be between 1 and %d", records.MaxFairWeight)
		}
		j.FairWeight = *spec.FairWeight
	}
	return nil
}

// traceFromSpec reads traceparent and tracestate; a tracestate without a
// traceparent means nothing and is dropped, as W3C says.
func traceFromSpec(spec records.JobSpec, j *records.NewJob) error {
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
func afterFromSpec(spec records.JobSpec, j *records.NewJob) error {
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

// deriveRequires: the given list, else the tools of plan.tasks, else the
// type, else nothing.
func deriveRequires(spec records.JobSpec) ([]string, error) {
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

// planTools is the part of a plan that names the tools it needs.
type planTools struct {
	Tasks []struct {
		Tool string `json:"tool"`
	} `json:"tasks"`
}
