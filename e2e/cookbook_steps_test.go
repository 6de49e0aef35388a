package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
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

	// An earlier process of shipper-1 took order-3, began charging it and
	// was killed: its registration and the job stay while nobody says
	// otherwise. The worker's first registration (running_jobs: []) sends
	// order-3 back at once instead of after its timeout.
	shipperKey := a.CreateKey(t, "worker", "shipper-1")
	earlier := a.Client(t, redis.Options{Username: "shipper-1", Password: shipperKey})
	do(admin, "JOB.SUBMIT", `{"job_id":"order-3","type":"order","queue":"orders","priority":1,"payload":{"order":"o-3","cents":500}}`)
	do(earlier, "WORKER.REGISTER", `{"worker_id":"shipper-1","hostname":"h","agw_version":"1","capabilities":{"tools":[],"types":["order"]}}`)
	var taken struct {
		ID       string `json:"job_id"`
		Delivery string `json:"delivery"`
	}
	if err := json.Unmarshal([]byte(do(earlier, "RPOP", "queue:orders")), &taken); err != nil || taken.ID != "order-3" {
		t.Fatalf("the earlier process took %q (%v), want order-3", taken.ID, err)
	}
	do(earlier, "STEP.BEGIN", "order-3", "charge", `{"input":{"order":"o-3","cents":500}}`, "DELIVERY", taken.Delivery)

	cmd := exec.Command(worker)
	cmd.Env = append(cleanEnv(), "AGQ_ADDR="+a.Addr, "AGQ_WORKER_ID=shipper-1", "AGQ_KEY="+shipperKey)
	p := startProcess(t, "steps-worker.go", cmd)
	do(admin, "JOB.SUBMIT", `{"job_id":"order-2","type":"order","queue":"orders","payload":{"order":"o-2","cents":990}}`)

	for _, c := range []struct{ id, order string }{{"order-1", "o-1"}, {"order-2", "o-2"}, {"order-3", "o-3"}} {
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

// TestCookbookPythonStepsWorkerRunsAsPrinted runs the cookbook's Python
// workers, as printed, with Debian's python3-redis: the one written with
// agq's Python package and the one in bare redis-py. Each is killed
// (SIGKILL) while it books the courier: the next worker finds the charge
// done and does not make it again, runs the interrupted ship step as its
// second attempt, and mails once.
func TestCookbookPythonStepsWorkerRunsAsPrinted(t *testing.T) {
	for _, c := range []struct {
		title      string
		pythonPath bool // the script imports agq
	}{
		{"steps-worker.py", true},
		{"steps-worker-redis-py.py", false},
	} {
		t.Run(c.title, func(t *testing.T) {
			var env []string
			if c.pythonPath {
				env = append(env, "PYTHONPATH="+pythonPackage(t))
			}
			testPythonStepsWorker(t, c.title, env)
		})
	}
}

// testPythonStepsWorker runs the cookbook's script of that title, with env
// added to its environment, through an order whose worker is killed.
func testPythonStepsWorker(t *testing.T, title string, env []string) {
	script := filepath.Join(t.TempDir(), title)
	if err := os.WriteFile(script, []byte(fencedBlock(t, readPage(t, "cookbook.md"), "```python title=\""+title+"\"")), 0o644); err != nil {
		t.Fatal(err)
	}
	a := agqtest.Start(t, heartbeatEvery(time.Second))
	admin := a.Admin(t)
	ctx := context.Background()
	worker := func(id string) *process {
		t.Helper()
		cmd := exec.Command(python, script)
		cmd.Env = append(cleanEnv(), "AGQ_ADDR="+a.Addr, "AGQ_WORKER_ID="+id, "AGQ_KEY="+a.CreateKey(t, "worker", id))
		cmd.Env = append(cmd.Env, env...)
		return startProcess(t, id, cmd)
	}
	steps := func() map[string]stepView {
		t.Helper()
		raw, err := admin.Do(ctx, "JOB.STEPS", "order-3").Text()
		if err != nil {
			t.Fatal(err)
		}
		var list []stepView
		if err := json.Unmarshal([]byte(raw), &list); err != nil {
			t.Fatal(err)
		}
		byID := map[string]stepView{}
		for _, s := range list {
			byID[s.StepID] = s
		}
		return byID
	}

	first := worker("shipper-1")
	if err := admin.Do(ctx, "JOB.SUBMIT", `{"job_id":"order-3","type":"order","queue":"orders","payload":{"order":"o-3","cents":4200}}`).Err(); err != nil {
		t.Fatal(err)
	}
	first.waitLog(t, 20*time.Second, "shipping o-3")
	first.signal(t, syscall.SIGKILL)
	first.waitExit(t, 5*time.Second)
	if s := steps(); s["charge"].Status != "completed" || s["ship"].Status == "completed" || len(s) != 2 {
		t.Fatalf("steps when the first worker was killed: %+v", s)
	}

	second := worker("shipper-2")
	raw, err := admin.Do(ctx, "JOB.WAIT", "order-3", 30).Text()
	if err != nil {
		t.Fatal(err)
	}
	j := decodeJob(t, raw)
	var result struct {
		Output map[string]string `json:"output"`
	}
	if err := json.Unmarshal(j.Result, &result); err != nil || j.Status != "completed" || j.worker() != "shipper-2" ||
		result.Output["receipt"] != "receipt-o-3" || result.Output["parcel"] != "parcel-o-3" || result.Output["mail"] != "mailed" {
		t.Fatalf("order-3: %+v, result %s (%v)", j, j.Result, err)
	}
	s := steps()
	for id, attempts := range map[string]int{"charge": 1, "ship": 2, "mail": 1} {
		if s[id].Status != "completed" || s[id].Attempts != attempts {
			t.Errorf("step %s: %+v, want completed in %d attempts", id, s[id], attempts)
		}
	}
	for _, c := range []struct {
		p    *process
		line string
		n    int
	}{
		{first, "charging 4200 cents for o-3", 1},
		{first, "shipping o-3", 1},
		{first, "mailing the receipt of o-3", 0},
		{second, "charge of order-3: done in an earlier delivery", 1},
		{second, "charging 4200 cents for o-3", 0},
		{second, "shipping o-3", 1},
		{second, "mailing the receipt of o-3", 1},
	} {
		if got := c.p.logCount(c.line); got != c.n {
			t.Errorf("%s logged %q %d times, want %d", c.p.name, c.line, got, c.n)
		}
	}
}

// stepView is a step as JOB.STEPS shows it.
type stepView struct {
	StepID   string `json:"step_id"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
}
