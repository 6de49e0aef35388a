package pipeline

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()

	t.Run("ReadsTasksInputsAndTimeouts", func(t *testing.T) {
		t.Parallel()
		spec, err := ParseSpec(
			json.RawMessage(`{"tasks":[{"tool":"sort","args":["-r"]},{"tool":"uniq","args":["-c"],"timeout_seconds":1.5}]}`),
			json.RawMessage(`{"stdin":"b\na\n"}`), 30)
		if err != nil {
			t.Fatal(err)
		}
		if len(spec.Tasks) != 2 || spec.Tasks[0].Tool != "sort" || spec.Tasks[0].Args[0] != "-r" || spec.Tasks[0].Timeout != 0 {
			t.Fatalf("tasks = %+v", spec.Tasks)
		}
		if spec.Tasks[1].Timeout != 1500*time.Millisecond {
			t.Fatalf("task timeout = %v", spec.Tasks[1].Timeout)
		}
		if spec.Stdin != "b\na\n" || spec.Timeout != 30*time.Second {
			t.Fatalf("stdin %q timeout %v", spec.Stdin, spec.Timeout)
		}
	})

	t.Run("NoInputsMeansEmptyStdin", func(t *testing.T) {
		t.Parallel()
		for _, inputs := range []string{``, `null`, `{}`} {
			spec, err := ParseSpec(json.RawMessage(`{"tasks":[{"tool":"cat"}]}`), json.RawMessage(inputs), 0)
			if err != nil || spec.Stdin != "" || spec.Timeout != 0 {
				t.Fatalf("inputs %q: %+v, %v", inputs, spec, err)
			}
		}
	})

	refusals := []struct {
		name, plan, inputs string
		timeout            float64
		want               string
	}{
		{"NoPlan", ``, ``, 0, "no plan"},
		{"NullPlan", `null`, ``, 0, "no plan"},
		{"NotJSON", `{"tasks":`, ``, 0, "bad plan"},
		{"UnknownPlanField", `{"tasks":[{"tool":"cat"}],"shell":true}`, ``, 0, `unknown field "shell"`},
		{"UnknownTaskField", `{"tasks":[{"tool":"cat","env":{"A":"1"}}]}`, ``, 0, `unknown field "env"`},
		{"UnknownInput", `{"tasks":[{"tool":"cat"}]}`, `{"files":{}}`, 0, `unknown field "files"`},
		{"ArgsNotStrings", `{"tasks":[{"tool":"head","args":["-n",3]}]}`, ``, 0, "bad plan"},
		{"TrailingData", `{"tasks":[{"tool":"cat"}]} {}`, ``, 0, "after the JSON value"},
		{"NoTasks", `{"tasks":[]}`, ``, 0, "no tasks"},
		{"TooManyTasks", `{"tasks":[` + strings.Repeat(`{"tool":"cat"},`, MaxTasks) + `{"tool":"cat"}]}`, ``, 0, "at most 64"},
		{"NoTool", `{"tasks":[{"args":["x"]}]}`, ``, 0, "names no tool"},
		{"NULInArgument", `{"tasks":[{"tool":"grep","args":["a\u0000b"]}]}`, ``, 0, "NUL"},
		{"NegativeJobTimeout", `{"tasks":[{"tool":"cat"}]}`, ``, -1, "timeout_seconds"},
		{"HugeTaskTimeout", `{"tasks":[{"tool":"cat","timeout_seconds":1e300}]}`, ``, 0, "timeout_seconds"},
	}
	for _, tt := range refusals {
		t.Run("Refuses"+tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseSpec(json.RawMessage(tt.plan), json.RawMessage(tt.inputs), tt.timeout)
			if !errors.Is(err, ErrRefused) || Retryable(err) {
				t.Fatalf("err = %v, want a refusal", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %q, want it to mention %q", err, tt.want)
			}
		})
	}
}
