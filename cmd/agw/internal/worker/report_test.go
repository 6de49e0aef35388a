package worker

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/cmd/agw/internal/pipeline"
)

func TestReportBodies(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 11, 17, 10, 0, 15, 0, time.UTC)

	t.Run("Completed", func(t *testing.T) {
		t.Parallel()
		b := completedBody(pipeline.Result{Output: "<b>&</b>\n", Tasks: []pipeline.TaskResult{{Tool: "cat", DurationMS: 3}}}, now, 1<<20)
		want := `{"status":"completed","completed_at":"2025-11-17T10:00:15Z","output":"<b>&</b>\n",` +
			`"task_results":[{"tool":"cat","exit_code":0,"stderr":"","duration_ms":3}]}`
		if string(b) != want {
			t.Fatalf("\n got %s\nwant %s", b, want)
		}
	})

	t.Run("FailedWithoutTasks", func(t *testing.T) {
		t.Parallel()
		b := failedBody("refused: no plan", false, nil, now, 1<<20)
		want := `{"status":"failed","failed_at":"2025-11-17T10:00:15Z","error":"refused: no plan","retryable":false,"task_results":[]}`
		if string(b) != want {
			t.Fatalf("\n got %s\nwant %s", b, want)
		}
	})

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		b := cancelledBody([]pipeline.TaskResult{{Tool: "sleep", ExitCode: 143, Signal: "SIGTERM", DurationMS: 900}}, now, 1<<20)
		want := `{"status":"cancelled","cancelled_at":"2025-11-17T10:00:15Z",` +
			`"task_results":[{"tool":"sleep","exit_code":143,"signal":"SIGTERM","stderr":"","duration_ms":900}]}`
		if string(b) != want {
			t.Fatalf("\n got %s\nwant %s", b, want)
		}
	})

	t.Run("OutputIsCutToFit", func(t *testing.T) {
		t.Parallel()
		out := strings.Repeat("é\x01", 10000) // 3 bytes raw, 8 in JSON
		b := completedBody(pipeline.Result{Output: out, Tasks: []pipeline.TaskResult{{Tool: "cat", Stderr: "warn"}}}, now, 20000)
		if len(b) > 20000 {
			t.Fatalf("%d bytes", len(b))
		}
		var u completedUpdate
		if err := json.Unmarshal(b, &u); err != nil {
			t.Fatal(err)
		}
		if !u.OutputTruncated || !strings.HasPrefix(out, u.Output) || len(u.Output) < 3000 || u.TaskResults[0].Stderr != "warn" {
			t.Fatalf("output %d bytes, truncated %v, stderr %q", len(u.Output), u.OutputTruncated, u.TaskResults[0].Stderr)
		}
	})

	t.Run("StderrIsCutToFit", func(t *testing.T) {
		t.Parallel()
		tasks := make([]pipeline.TaskResult, 10)
		for i := range tasks {
			tasks[i] = pipeline.TaskResult{Tool: "sort", Stderr: strings.Repeat("x", 4000) + "the end"}
		}
		b := failedBody("task 1 (sort): exited with status 2", true, tasks, now, 8000)
		var u failedUpdate
		if err := json.Unmarshal(b, &u); err != nil {
			t.Fatal(err)
		}
		if len(b) > 8000 || len(u.TaskResults[0].Stderr) != shortStderr || !strings.HasSuffix(u.TaskResults[0].Stderr, "the end") {
			t.Fatalf("%d bytes, stderr %q", len(b), u.TaskResults[0].Stderr)
		}
		if len(tasks[0].Stderr) != 4007 {
			t.Fatal("the caller's task results were changed")
		}
	})
}
