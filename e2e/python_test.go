package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
)

// python is Debian's interpreter, which has python3-redis; another python3
// earlier on PATH may lack redis-py.
const python = "/usr/bin/python3"

// pythonPackage is the Python package's directory, for PYTHONPATH.
func pythonPackage(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../python")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPythonPackage runs the Python package's tests (python/tests, with
// unittest) against an agq of their own: workers killed with SIGKILL and
// drained with SIGTERM, cancellations, graphs, retries and the error
// classes. AGQ_PYTHON_TESTS, when set, holds unittest -k patterns (space
// separated) to run some of them.
func TestPythonPackage(t *testing.T) {
	a := agqtest.Start(t, heartbeatEvery(time.Second))
	pkg := pythonPackage(t)
	args := []string{"-m", "unittest", "discover", "-v", "-s", filepath.Join(pkg, "tests"), "-t", pkg}
	for _, k := range strings.Fields(os.Getenv("AGQ_PYTHON_TESTS")) {
		args = append(args, "-k", k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(cleanEnv(), "PYTHONPATH="+pkg, "PYTHONDONTWRITEBYTECODE=1",
		"AGQ_ADDR="+a.Addr, "AGQ_ADMIN_KEY="+a.AdminKey, "AGQ_HTTP_ADDR="+a.HTTPAddr)
	cmd.Dir = pkg
	p := startProcess(t, "unittest", cmd)
	if code := p.waitExit(t, 5*time.Minute); code != 0 {
		t.Fatalf("the Python tests failed (exit code %d)", code)
	}
	if !p.logContains("OK") || p.logContains("Ran 0 tests") {
		t.Fatal("unittest ran no tests, or did not say OK")
	}
}

// TestPythonDocsFirstWorkerAndProducer runs the first worker and the first
// producer of docs/python.md as printed: the producer prints the worker's
// output, and the worker drains and exits 0 on SIGTERM.
func TestPythonDocsFirstWorkerAndProducer(t *testing.T) {
	page := readPage(t, "python.md")
	dir := t.TempDir()
	for _, name := range []string{"worker.py", "producer.py"} {
		body := fencedBlock(t, page, "```python title=\""+name+"\"")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := agqtest.Start(t, heartbeatEvery(time.Second))
	env := append(cleanEnv(), "PYTHONPATH="+pythonPackage(t), "AGQ_ADDR="+a.Addr)

	cmd := exec.Command(python, filepath.Join(dir, "worker.py"))
	cmd.Env = append(env, "AGQ_WORKER_ID=greeter-1", "AGQ_KEY="+a.CreateKey(t, "worker", "greeter-1"))
	worker := startProcess(t, "worker.py", cmd)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	producer := exec.CommandContext(ctx, python, filepath.Join(dir, "producer.py"))
	producer.Env = append(env, "AGQ_KEY="+a.CreateKey(t, "producer", "shop"))
	out, err := producer.CombinedOutput()
	if err != nil {
		t.Fatalf("producer.py: %v\n%s", err, out)
	}
	want := `completed {'greeting': 'Hello, Ada!'}`
	if got := strings.TrimSpace(string(out)); !strings.HasSuffix(got, want) {
		t.Fatalf("producer.py printed %q, want it to end with %q", got, want)
	}
	worker.waitLog(t, 5*time.Second, "greeting Ada")

	worker.signal(t, syscall.SIGTERM)
	if code := worker.waitExit(t, 20*time.Second); code != 0 {
		t.Fatalf("worker.py exited %d after SIGTERM", code)
	}
	if !worker.logContains("unregistered") {
		t.Error("worker.py did not unregister")
	}
}
