package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Limits on a plan, checked before anything runs. They are far above what a
// pipeline needs and far below what would strain the worker.
const (
	MaxTasks       = 64
	MaxArgs        = 1024
	MaxArgBytes    = 128 << 10 // one argument; Linux refuses more than 128 KiB anyway
	maxTimeoutSecs = 366 * 24 * 3600
)

// Task is one step of a plan: a tool from the offered set, its argument
// vector (no shell ever sees it), and an optional timeout counted from the
// task's start.
type Task struct {
	Tool    string
	Args    []string
	Timeout time.Duration
}

// Spec is a plan ready to run: its tasks in pipeline order, the first task's
// standard input, and the job's timeout (zero: none).
type Spec struct {
	Tasks   []Task
	Stdin   string
	Timeout time.Duration
	// OnLine, if set, gets each line of output as it comes: the last
	// task's stdout (task 0) and every task's stderr (its number, from 1),
	// at most 1 KiB each. It is called from the goroutines reading the
	// output and must not block.
	OnLine func(task int, stderr bool, line string)
}

// The job JSON's plan and inputs. Decoding is strict: a field agw does not
// know (say "env" or "cwd") is refused rather than silently ignored, because
// ignoring it would run something other than what the submitter asked for.
type wirePlan struct {
	Tasks []wireTask `json:"tasks"`
}

type wireTask struct {
	Tool           string   `json:"tool"`
	Args           []string `json:"args"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}

type wireInputs struct {
	Stdin string `json:"stdin"`
}

// ParseSpec builds a Spec from a job's "plan" and "inputs" JSON and its
// "timeout_seconds". Every error it returns wraps ErrRefused.
func ParseSpec(plan, inputs json.RawMessage, timeoutSeconds float64) (Spec, error) {
	var s Spec
	if isNull(plan) {
		return s, refused(0, "", "the job has no plan; agw runs plans of the form {\"tasks\":[{\"tool\":…,\"args\":[…]}]}")
	}
	var p wirePlan
	if err := decodeStrict(plan, &p); err != nil {
		return s, refused(0, "", "bad plan: %v", err)
	}
	if !isNull(inputs) {
		var in wireInputs
		if err := decodeStrict(inputs, &in); err != nil {
			return s, refused(0, "", "bad inputs: %v", err)
		}
		s.Stdin = in.Stdin
	}
	var err error
	if s.Timeout, err = seconds(timeoutSeconds); err != nil {
		return s, refused(0, "", "bad timeout_seconds: %v", err)
	}
	switch {
	case len(p.Tasks) == 0:
		return s, refused(0, "", "the plan has no tasks")
	case len(p.Tasks) > MaxTasks:
		return s, refused(0, "", "the plan has %d tasks; at most %d are allowed", len(p.Tasks), MaxTasks)
	}
	for i, wt := range p.Tasks {
		n := i + 1
		if wt.Tool == "" {
			return s, refused(n, "", "the task names no tool")
		}
		if len(wt.Args) > MaxArgs {
			return s, refused(n, wt.Tool, "%d arguments; at most %d are allowed", len(wt.Args), MaxArgs)
		}
		for j, a := range wt.Args {
			if len(a) > MaxArgBytes {
				return s, refused(n, wt.Tool, "argument %d is %d bytes; at most %d are allowed", j+1, len(a), MaxArgBytes)
			}
			if strings.IndexByte(a, 0) >= 0 {
				return s, refused(n, wt.Tool, "argument %d contains a NUL byte", j+1)
			}
		}
		t := Task{Tool: wt.Tool, Args: wt.Args}
		if wt.TimeoutSeconds != nil {
			if t.Timeout, err = seconds(*wt.TimeoutSeconds); err != nil {
				return s, refused(n, wt.Tool, "bad timeout_seconds: %v", err)
			}
		}
		s.Tasks = append(s.Tasks, t)
	}
	return s, nil
}

// seconds turns a JSON number of seconds into a duration; 0 means none.
func seconds(v float64) (time.Duration, error) {
	if v < 0 || v > maxTimeoutSecs || math.IsNaN(v) {
		return 0, fmt.Errorf("%v is not between 0 and %d", v, maxTimeoutSecs)
	}
	return time.Duration(v * float64(time.Second)), nil
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

func decodeStrict(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON value")
	}
	return nil
}
