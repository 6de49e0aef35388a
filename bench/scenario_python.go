package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// pythonSlots is the Python package worker's concurrency in its burn-down:
// its threads, each running a no-op handler.
const pythonSlots = 64

// pythonInterpreter is Debian's, which has python3-redis.
const pythonInterpreter = "/usr/bin/python3"

// agqBurnDownPython works off n pre-submitted jobs with one Python process:
// kind "package" is a worker of agq's Python package (python/), "steps"
// the same running three job.step calls a job, "loop" a hand-written
// redis-py loop of one job at a time (python_burn.py).
func agqBurnDownPython(ctx context.Context, cl *cluster, s *agqServer, kind string, n int, run int) (measure, error) {
	queue := "burn-python-" + kind
	if err := s.submitBatches(ctx, queue, n, 1000); err != nil {
		return measure{}, err
	}
	id := fmt.Sprintf("python-%s-%d", kind, run)
	key, err := s.admin.Do(ctx, "KEY.CREATE", "worker", id).Text()
	if err != nil {
		return measure{}, err
	}
	pkg, err := filepath.Abs(filepath.Join("..", "python"))
	if err != nil {
		return measure{}, err
	}
	cmd := exec.CommandContext(ctx, pythonInterpreter, "python_burn.py", kind)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pkg, "AGQ_ADDR="+s.addr, "AGQ_WORKER_ID="+id, "AGQ_KEY="+key,
		"BENCH_QUEUE="+queue, fmt.Sprintf("PYTHON_SLOTS=%d", pythonSlots))
	return burnDownByProcess(ctx, cl, s, cmd, "the Python worker", queue, n, 20*time.Millisecond)
}

// pythonRows measures a Python worker of the package beside the
// hand-written redis-py loop of one job at a time.
func pythonRows(ctx context.Context, o options, cl *cluster, s *agqServer, r *report, say func(string, ...any)) error {
	say("burn-down of %d jobs by one Python package worker of %d slots, and by a redis-py loop", o.jobs, pythonSlots)
	p, err := agqBurnDownPython(ctx, cl, s, "package", o.jobs, 0)
	if err != nil {
		return fmt.Errorf("Python package burn-down: %w", err)
	}
	l, err := agqBurnDownPython(ctx, cl, s, "loop", o.jobs, 0)
	if err != nil {
		return fmt.Errorf("redis-py loop burn-down: %w", err)
	}
	st, err := agqBurnDownPython(ctx, cl, s, "steps", o.jobs, 0)
	if err != nil {
		return fmt.Errorf("Python package burn-down of three-step jobs: %w", err)
	}
	say("jobs/s: Python package %.0f (three-step jobs %.0f), redis-py loop %.0f", p.rate(), st.rate(), l.rate())
	r.add(fmt.Sprintf("burn-down, Python package worker (one process, %d slots, no-op handler), %d jobs", pythonSlots, o.jobs),
		perSecond(p.rate()), "—", "")
	r.add(fmt.Sprintf("burn-down, hand-written redis-py loop (one job at a time: BRPOP, JOB.UPDATE), %d jobs", o.jobs),
		perSecond(l.rate()), "—", "")
	r.add("burn-down Python package: CPU per job, agq / PostgreSQL",
		micros(p.cost.agqCPU)+" / "+micros(p.cost.pgCPU), "", "")
	r.add(fmt.Sprintf("burn-down, Python package worker running three job.step calls a job, %d jobs", o.jobs),
		perSecond(st.rate()), "—", fmt.Sprintf("%.2f of the package's plain", st.rate()/p.rate()))
	r.add("burn-down Python package, three-step jobs: CPU per job, agq / PostgreSQL",
		micros(st.cost.agqCPU)+" / "+micros(st.cost.pgCPU), "", "")
	return nil
}
