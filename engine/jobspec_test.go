package engine_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/records"
)

// A job's fields are checked and completed by one set of rules, without a
// database: defaults where the submission gives none, the tools it
// requires, its bounds.
func TestJobRules(t *testing.T) {
	rules := engine.JobRules{MaxAttempts: 3, JobTimeout: time.Hour}
	intp := func(n int) *int { return &n }
	list := func(s ...string) *[]string { return &s }
	t.Run("Defaults", func(t *testing.T) {
		j, err := rules.NewJob(records.JobSpec{Type: "resize"}, "ready")
		if err != nil {
			t.Fatal(err)
		}
		if j.Queue != "ready" || j.MaxAttempts != 3 || j.TimeoutSeconds != 3600 || j.RetryBackoffSeconds != 1 ||
			!slices.Equal(j.Requires, []string{"resize"}) || len(j.ID) != 36 {
			t.Fatalf("%+v", j)
		}
	})
	t.Run("RequiresFromThePlansTools", func(t *testing.T) {
		j, err := rules.NewJob(records.JobSpec{Type: "x", Plan: json.RawMessage(`{"tasks":[{"tool":"sort"},{"tool":"grep"},{"tool":"sort"}]}`)}, "q")
		if err != nil || !slices.Equal(j.Requires, []string{"sort", "grep"}) {
			t.Fatalf("%v, %v", j.Requires, err)
		}
		j, err = rules.NewJob(records.JobSpec{Type: "x", Requires: list()}, "q")
		if err != nil || len(j.Requires) != 0 {
			t.Fatalf("an empty requires: %v, %v", j.Requires, err)
		}
	})
	for _, c := range []struct {
		name string
		spec records.JobSpec
		want string
	}{
		{"BadID", records.JobSpec{JobID: "a b"}, "job_id must be"},
		{"TooManyAttempts", records.JobSpec{MaxAttempts: intp(1001)}, "max_attempts must be between 1 and 1000"},
		{"NoTimeout", records.JobSpec{TimeoutSeconds: intp(0)}, "timeout_seconds must be between 1 and 2592000"},
		{"ParentTwice", records.JobSpec{After: list("p", "p")}, "after names job p twice"},
		{"NoParents", records.JobSpec{After: list()}, "after must name 1 to"},
		{"ToolMissing", records.JobSpec{Plan: json.RawMessage(`{"tasks":[{}]}`)}, "plan.tasks[0].tool is missing"},
		{"BadTraceParent", records.JobSpec{TraceParent: "x"}, "traceparent must be a W3C traceparent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := rules.NewJob(c.spec, "q"); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want %q", err, c.want)
			}
		})
	}
}
