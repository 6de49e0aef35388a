package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// A job's page lists its steps: each with its status, attempts, input and
// output, and the attempts kept (a failed one, and the one running).
func TestTheJobPageListsItsSteps(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "JOB.SUBMIT", `{"job_id":"charge-ship","queue":"orders","type":"order"}`).Err(); err != nil {
		t.Fatal(err)
	}
	key := a.CreateKey(t, "worker", "w1")
	w := a.Client(t, redis.Options{Username: "w1", Password: key})
	reg, _ := json.Marshal(map[string]any{"worker_id": "w1", "hostname": "h", "agw_version": "1",
		"capabilities": map[string]any{"tools": []string{}, "types": []string{"order"}}})
	if err := w.Do(ctx, "WORKER.REGISTER", string(reg)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.Do(ctx, "RPOP", "queue:orders").Err(); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]any{
		{"STEP.BEGIN", "charge-ship", "charge", `{"input":{"cents":1250}}`},
		{"STEP.COMPLETE", "charge-ship", "charge", `{"receipt":"r-77"}`},
		{"STEP.BEGIN", "charge-ship", "ship"},
		{"STEP.FAIL", "charge-ship", "ship", `{"message":"carrier down","retry_after_seconds":0.01}`},
	} {
		if err := w.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	// Delivered again, the failed step runs a second attempt.
	if err := w.Do(ctx, "BRPOP", "queue:orders", "5").Err(); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]any{
		{"STEP.BEGIN", "charge-ship", "ship"},
	} {
		if err := w.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}

	b := newBrowser(t, "http://"+a.HTTPAddr+"/")
	wantStatus(t, "sign-in", b.signIn(a.AdminKey), http.StatusSeeOther)
	res, page := b.do("GET", "job?id=charge-ship", nil)
	wantStatus(t, "the job page", res, http.StatusOK)
	i := strings.Index(page, `id="job-steps"`)
	if i < 0 {
		t.Fatalf("no steps on the job page:\n%s", page)
	}
	steps := page[i:]
	for _, want := range []string{"<code>charge</code>", "st-completed", "1250", "r-77", "<code>ship</code>", "st-running",
		`class="step-history"`, "#1 <span class=\"st st-failed\">failed</span>", "carrier down",
		"#2 <span class=\"st st-running\">running</span>"} {
		if !strings.Contains(steps, want) {
			t.Errorf("the steps table lacks %q:\n%s", want, steps)
		}
	}
	if strings.Index(steps, "<code>charge</code>") > strings.Index(steps, "<code>ship</code>") {
		t.Error("steps are not in the order first begun")
	}
}
