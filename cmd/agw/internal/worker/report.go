package worker

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agq/agq/client"
	"github.com/agq/agq/cmd/agw/internal/pipeline"
	"github.com/agq/agq/internal/plainjson"
)

// The JOB.UPDATE bodies.

type completedUpdate struct {
	Status          string                `json:"status"`
	CompletedAt     string                `json:"completed_at"`
	Output          string                `json:"output"`
	OutputTruncated bool                  `json:"output_truncated,omitempty"`
	TaskResults     []pipeline.TaskResult `json:"task_results"`
}

type cancelledUpdate struct {
	Status      string                `json:"status"`
	CancelledAt string                `json:"cancelled_at"`
	TaskResults []pipeline.TaskResult `json:"task_results"`
}

type failedUpdate struct {
	Status      string                `json:"status"`
	FailedAt    string                `json:"failed_at"`
	Error       string                `json:"error"`
	Retryable   bool                  `json:"retryable"`
	TaskResults []pipeline.TaskResult `json:"task_results"`
}

func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// completedBody is the completed report, cut to fit in limit bytes: first
// the output (halved until it fits, flagged output_truncated), then the
// stderr tails.
func completedBody(res pipeline.Result, now time.Time, limit int) []byte {
	u := completedUpdate{
		Status:          "completed",
		CompletedAt:     timestamp(now),
		Output:          storable(res.Output),
		OutputTruncated: res.OutputTruncated,
		TaskResults:     taskResults(res.Tasks),
	}
	for {
		b := mustMarshal(u)
		if len(b) <= limit {
			return b
		}
		switch {
		case u.Output != "":
			u.Output, u.OutputTruncated = halve(u.Output), true
		case shortenStderr(u.TaskResults):
		default:
			return b
		}
	}
}

// failedBody is the failed report, its stderr tails cut to fit in limit.
func failedBody(msg string, retryable bool, tasks []pipeline.TaskResult, now time.Time, limit int) []byte {
	u := failedUpdate{
		Status:      "failed",
		FailedAt:    timestamp(now),
		Error:       storable(msg),
		Retryable:   retryable,
		TaskResults: taskResults(tasks),
	}
	for {
		b := mustMarshal(u)
		if len(b) <= limit || !shortenStderr(u.TaskResults) {
			return b
		}
	}
}

// cancelledBody tells agq that a job it cancelled has stopped, its stderr
// tails cut to fit in limit.
func cancelledBody(tasks []pipeline.TaskResult, now time.Time, limit int) []byte {
	u := cancelledUpdate{Status: "cancelled", CancelledAt: timestamp(now), TaskResults: taskResults(tasks)}
	for {
		b := mustMarshal(u)
		if len(b) <= limit || !shortenStderr(u.TaskResults) {
			return b
		}
	}
}

func taskResults(tasks []pipeline.TaskResult) []pipeline.TaskResult {
	out := make([]pipeline.TaskResult, len(tasks))
	copy(out, tasks)
	for i := range out {
		out[i].Stderr = storable(out[i].Stderr)
	}
	return out
}

// storable replaces the NUL bytes of a tool's output, which agq refuses
// (PostgreSQL cannot store them), with U+FFFD, as JSON encoding already
// does for bytes that are not UTF-8: a tool printing binary data must not
// keep its job from being reported.
func storable(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }

// shortStderr is what each stderr tail is cut to when a report is too big.
const shortStderr = 256

func shortenStderr(tasks []pipeline.TaskResult) bool {
	changed := false
	for i := range tasks {
		if s := tasks[i].Stderr; len(s) > shortStderr {
			cut := len(s) - shortStderr
			for cut < len(s) && !utf8.RuneStart(s[cut]) {
				cut++
			}
			tasks[i].Stderr, changed = s[cut:], true
		}
	}
	return changed
}

// halve keeps the first half of s, ending on a whole UTF-8 character.
func halve(s string) string {
	n := len(s) / 2
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// mustMarshal encodes the update structs above, which cannot fail to encode.
func mustMarshal(v any) []byte {
	b, err := plainjson.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// fields are a report body's fields but its status, which the client
// sets.
func fields(body []byte) client.ReportFields {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		panic(err) // the bodies above are JSON objects
	}
	f := make(client.ReportFields, len(raw))
	for k, v := range raw {
		if k != "status" {
			f[k] = v
		}
	}
	return f
}
