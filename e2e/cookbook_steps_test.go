package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// TestCookbookStepsWorkerRunsAsPrinted builds the cookbook's three-step
// worker, as printed, and runs an order an earlier delivery had charged
// before its worker went away: the charge is not made again, and the
// steps after it run once.
//
// Not parallel: buildCookbookWorker builds in one directory per process.
func TestCookbookStepsWorkerRunsAsPrinted(t *testing.T) {
	page := readPage(t, "cookbook.md")
	worker := buildCookbookWorker(t, fencedBlock(t, page, "```go title=\"steps-worker.go\""))

	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	do := func(c *redis.Client, args ...any) string {
		t.Helper()
		v, err := c.Do(ctx, args...).Text()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	do(admin, "JOB.SUBMIT", `{"job_id":"order-1","type":"order","queue":"orders","payload":{"order":"o-1","cents":1250}}`)

	// A first worker charges order-1, then goes away before shipping it.
	first := a.Client(t, redis.Options{Username: "first-1", Password: a.CreateKey(t, "worker", "first-1")})
	do(first, "WORKER.REGISTER", `{"worker_id":"first-1","hostname":"h","agw_version":"1","capabilities":{"tools":[],"types":["order"]}}`)
	var held struct {
		Delivery string `json:"delivery"`
	}
	if err := json.Unmarshal([]byte(do(first, "RPOP", "queue:orders")), &held); err != nil {
		t.Fatal(err)
	}
	do(first, "STEP.BEGIN", "order-1", "charge", `{"input":{"order":"o-1","cents":1250}}`, "DELIVERY", held.Delivery)
	do(first, "STEP.COMPLETE", "order-1", "charge", `"receipt-o-1"`, "DELIVERY", held.Delivery)
	do(first, "WORKER.UNREGISTER", "first-1")

	cmd := exec.Command(worker)
	cmd.Env = append(cleanEnv(), "AGQ_ADDR="+a.Addr, "AGQ_WORKER_ID=shipper-1", "AGQ_KEY="+a.CreateKey(t, "worker", "shipper-1"))
	p := startProcess(t, "steps-worker.go", cmd)
	do(admin, "JOB.SUBMIT", `{"job_id":"order-2","type":"order","queue":"orders","payload":{"order":"o-2","cents":990}}`)

	for _, c := range []struct{ id, order string }{{"order-1", "o-1"}, {"order-2", "o-2"}} {
		j := decodeJob(t, do(admin, "JOB.WAIT", c.id, 20))
		var result struct {
			Status string            `json:"status"`
			Output map[string]string `json:"output"`
		}
		if err := json.Unmarshal(j.Result, &result); err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		if j.Status != "completed" || j.worker() != "shipper-1" || result.Output["receipt"] != "receipt-"+c.order ||
			result.Output["parcel"] != "parcel-"+c.order || result.Output["mail"] != "mailed" {
			t.Fatalf("%s: %+v, result %s", c.id, j, j.Result)
		}
		var steps []struct {
			StepID string `json:"step_id"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal([]byte(do(admin, "JOB.STEPS", c.id)), &steps); err != nil {
			t.Fatal(err)
		}
		if len(steps) != 3 || steps[0].StepID != "charge" || steps[1].StepID != "ship" || steps[2].StepID != "mail" {
			t.Fatalf("%s: steps %+v", c.id, steps)
		}
		for _, s := range steps {
			if s.Status != "completed" {
				t.Errorf("%s: step %+v", c.id, s)
			}
		}
	}
	p.waitLog(t, 5*time.Second, "charge of order-1: done in an earlier delivery")
	for _, c := range []struct {
		line []string
		n    int
	}{
		{[]string{"charging 1250 cents for o-1"}, 0},
		{[]string{"charging 990 cents for o-2"}, 1},
		{[]string{"shipping o-1"}, 1},
		{[]string{"mailing the receipt of o-1"}, 1},
		{[]string{"shipping o-2"}, 1},
	} {
		if got := p.logCount(c.line...); got != c.n {
			t.Errorf("the worker logged %q %d times, want %d", c.line, got, c.n)
		}
	}
}
