package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// agwConcurrency is agw's concurrency in its burn-down.
const agwConcurrency = 64

// agqBurnDownAgw works off n pre-submitted jobs with one agw process, each
// job a pipeline of one task, true: what agw moves when its tool costs
// only a fork and an exec.
func agqBurnDownAgw(ctx context.Context, cl *cluster, s *agqServer, bin string, n int, run int) (measure, error) {
	queue := "burn-agw"
	doc := fmt.Sprintf(`{"queue":%q,"type":"bench","plan":{"tasks":[{"tool":"true"}]}}`, queue)
	if err := s.submitDocs(ctx, n, 1000, func(int) string { return doc }); err != nil {
		return measure{}, err
	}
	id := fmt.Sprintf("agw-%d", run)
	key, err := s.admin.Do(ctx, "KEY.CREATE", "worker", id).Text()
	if err != nil {
		return measure{}, err
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "AGQ_ADDR="+s.addr, "AGQ_WORKER_ID="+id, "AGQ_KEY="+key, "AGW_QUEUES="+queue,
		fmt.Sprintf("AGW_CONCURRENCY=%d", agwConcurrency), "AGW_TOOLS=true", "AGW_LOG_LEVEL=warn", "AGW_SHUTDOWN_TIMEOUT=10s")
	return burnDownByProcess(ctx, cl, s, cmd, "agw", queue, n, 50*time.Millisecond)
}

// burnDownByProcess measures the worker process cmd working off the n jobs
// of queue, polling every interval, and stops it with SIGTERM (SIGKILL
// after 15 s) once they are done.
func burnDownByProcess(ctx context.Context, cl *cluster, s *agqServer, cmd *exec.Cmd, name, queue string, n int,
	interval time.Duration) (measure, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	exited := make(chan struct{})
	var waitErr error
	m, err := cl.measure(ctx, "agq", s.pid(), n, func() error {
		if err := cmd.Start(); err != nil {
			return err
		}
		go func() {
			waitErr = cmd.Wait()
			close(exited)
		}()
		return s.waitWorked(ctx, queue, interval, func() error {
			select {
			case <-exited:
				return fmt.Errorf("%s exited: %v", name, waitErr)
			default:
				return nil
			}
		})
	})
	if cmd.Process != nil {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	if err != nil {
		return m, fmt.Errorf("%w\n%s", err, out.String())
	}
	return m, nil
}

// waitWorked polls every interval until queue has no job queued or
// running; alive says whether the worker still runs.
func (s *agqServer) waitWorked(ctx context.Context, queue string, interval time.Duration, alive func() error) error {
	for _, status := range []string{"queued", "running"} {
		for {
			res, err := s.admin.Do(ctx, "JOB.LIST", "QUEUE", queue, "STATUS", status, "LIMIT", 1).Slice()
			if err != nil {
				return err
			}
			if len(res) != 2 {
				return errors.New("JOB.LIST answered no [cursor, jobs]")
			}
			if jobs, _ := res[1].([]any); len(jobs) == 0 {
				break
			}
			if err := alive(); err != nil {
				return err
			}
			time.Sleep(interval)
		}
	}
	return nil
}
