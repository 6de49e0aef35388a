package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/config"
)

// restartableAgq is the config of a node on a fixed address, so that the
// node can be stopped and started again on the same port and database.
func restartableAgq(t *testing.T) config.Config {
	t.Helper()
	cfg := agqtest.DefaultConfig(t)
	cfg.Listen = agqtest.StableAddr(t)
	return cfg
}

// restart stops b's node and starts another on the same address and
// database once pause has passed.
func (b *testBundle) restart(t *testing.T, pause time.Duration) {
	t.Helper()
	cfg := b.agq.Config
	if err := b.agq.Node.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	b.startAgq(t, cfg)
}

// startAgq starts a node on cfg for b's worker, which stops before that
// node does when the test ends: a report whose reply a closing node never
// sent would otherwise be retried against no server until the worker's
// shutdown gave up on it.
func (b *testBundle) startAgq(t *testing.T, cfg config.Config) {
	t.Helper()
	b.agq = agqtest.StartConfig(t, cfg)
	b.admin = b.agq.Admin(t)
	t.Cleanup(func() { b.stopAtEnd(t) })
}

func TestWorkerRecovers(t *testing.T) {
	t.Parallel()

	t.Run("RegistersAgainWhenUnregistered", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, heartbeatEvery(time.Second))
		first := b.waitState(t, "ACTIVE").RegisteredAt
		if err := b.admin.Do(context.Background(), "WORKER.UNREGISTER", testWorkerID).Err(); err != nil {
			t.Fatal(err)
		}
		agqtest.Eventually(t, 10*time.Second, func() error {
			if w := b.workerState(t); w.State != "ACTIVE" || !w.RegisteredAt.After(first) {
				return fmt.Errorf("worker %s, registered at %v", w.State, w.RegisteredAt)
			}
			return nil
		})
		id := b.submit(t, `{"plan":{"tasks":[{"tool":"true"}]}}`)
		if j := b.wait(t, id, 10*time.Second); j.Status != "completed" {
			t.Fatalf("job %+v", j)
		}
	})

	t.Run("ReconnectsAfterAServerRestart", func(t *testing.T) {
		t.Parallel()
		cfg := restartableAgq(t)
		a := agqtest.StartConfig(t, cfg)
		b := run(t, a, testConfig(t, a.Addr, a.CreateKey(t, "worker", testWorkerID)))
		first := b.waitState(t, "ACTIVE").RegisteredAt
		b.restart(t, 500*time.Millisecond)
		agqtest.Eventually(t, 10*time.Second, func() error {
			if w := b.workerState(t); w.State != "ACTIVE" || !w.RegisteredAt.After(first) {
				return fmt.Errorf("worker %s, registered at %v", w.State, w.RegisteredAt)
			}
			return nil
		})
		id := b.submit(t, `{"plan":{"tasks":[{"tool":"true"}]}}`)
		if j := b.wait(t, id, 10*time.Second); j.Status != "completed" {
			t.Fatalf("job %+v", j)
		}
	})

	t.Run("RetriesAReportAcrossAnOutage", func(t *testing.T) {
		t.Parallel()
		cfg := restartableAgq(t)
		a := agqtest.StartConfig(t, cfg)
		b := run(t, a, testConfig(t, a.Addr, a.CreateKey(t, "worker", testWorkerID)))
		id := b.submit(t, `{"plan":{"tasks":[{"tool":"cat"},{"tool":"sleep","args":["1"]}]},"inputs":{"stdin":"x"}}`)
		b.waitStarted(t, id)
		cfg = b.agq.Config
		if err := b.agq.Node.Close(); err != nil {
			t.Fatal(err)
		}
		// The job ends while agq is down: its report is retried.
		agqtest.Eventually(t, 10*time.Second, func() error {
			if b.logs.count(`"message":"JOB.UPDATE failed"`) < 2 {
				return errors.New("the final report has not been retried yet")
			}
			return nil
		})
		b.startAgq(t, cfg)
		j := b.wait(t, id, 10*time.Second)
		if j.Status != "completed" || j.Attempt != 1 || j.result(t).Status != "completed" {
			t.Fatalf("job %+v, result %s", j, j.Result)
		}
	})

	// agq down for longer than three heartbeat intervals: the worker's
	// retries, on the production schedule (1s doubling to 60s), still come
	// at least once an interval, so that once agq is back the worker
	// registers before the watchdog's grace runs out. It is never declared
	// dead, and the job it runs through the outage, on its last attempt,
	// ends completed (declared dead, the worker would lose it: failed).
	t.Run("IsNotDeclaredDeadAfterALongOutage", func(t *testing.T) {
		t.Parallel()
		cfg := restartableAgq(t)
		cfg.HeartbeatInterval = time.Second
		a := agqtest.StartConfig(t, cfg)
		wcfg := testConfig(t, a.Addr, a.CreateKey(t, "worker", testWorkerID))
		wcfg.BackoffMin, wcfg.BackoffMax = time.Second, time.Minute
		b := run(t, a, wcfg)
		active := b.waitState(t, "ACTIVE").StateChangedAt
		id := b.submit(t, `{"max_attempts":1,"plan":{"tasks":[{"tool":"sleep","args":["24"]}]}}`)
		b.waitStarted(t, id)
		cfg = b.agq.Config
		if err := b.agq.Node.Close(); err != nil {
			t.Fatal(err)
		}
		// Past 1+2+4+8 s of retries: unlimited, the next would come 16 s
		// later, well after the grace of three 1 s intervals.
		time.Sleep(18 * time.Second)
		b.startAgq(t, cfg)
		j := b.wait(t, id, 30*time.Second)
		if j.Status != "completed" || j.Attempt != 1 {
			t.Fatalf("job %+v", j)
		}
		if w := b.workerState(t); w.State != "ACTIVE" || !w.StateChangedAt.Equal(active) {
			t.Fatalf("worker %s since %v after the outage (ACTIVE since %v before it): it was declared dead meanwhile",
				w.State, w.StateChangedAt, active)
		}
	})

	t.Run("GivesUpOnARefusedReport", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		id := b.submit(t, `{"plan":{"tasks":[{"tool":"sleep","args":["1"]}]}}`)
		b.waitStarted(t, id)
		// An operator ends the job meanwhile: agw's completed report is
		// refused ("job … is failed"), and agw moves on.
		if err := b.admin.Do(context.Background(), "JOB.UPDATE", id,
			`{"status":"failed","error":"stopped by an operator","retryable":false}`).Err(); err != nil {
			t.Fatal(err)
		}
		agqtest.Eventually(t, 10*time.Second, func() error {
			if b.logs.count("could not report the job's end") == 0 {
				return errors.New("the report has not been refused yet")
			}
			return nil
		})
		next := b.submit(t, `{"plan":{"tasks":[{"tool":"true"}]}}`)
		if j := b.wait(t, next, 10*time.Second); j.Status != "completed" {
			t.Fatalf("next job %+v", j)
		}
		if n, retries := b.logs.count("could not report the job's end"), b.logs.count(`"message":"JOB.UPDATE failed"`); n != 1 || retries != 0 {
			t.Fatalf("the refused report was logged %d times and retried %d times", n, retries)
		}
		if j := b.get(t, id); j.Status != "failed" || j.Errors[0].Error != "stopped by an operator" {
			t.Fatalf("job %+v", j)
		}
	})
}

func TestWorkerStartup(t *testing.T) {
	t.Parallel()

	t.Run("WrongKeyIsFatal", func(t *testing.T) {
		t.Parallel()
		a := agqtest.Start(t)
		b := run(t, a, testConfig(t, a.Addr, strings.Repeat("0", 64)))
		select {
		case err := <-b.done:
			b.done <- err
			if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
				t.Fatalf("Run = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a worker with a wrong key kept trying")
		}
	})

	t.Run("WaitsForTheServer", func(t *testing.T) {
		t.Parallel()
		cfg := restartableAgq(t)
		key := auth.GenerateKey()
		cfg.Workers = map[string]string{testWorkerID: key}
		b := run(t, nil, testConfig(t, cfg.Listen, key))
		agqtest.Eventually(t, 10*time.Second, func() error {
			if b.logs.count(`"message":"registration failed"`) < 2 {
				return errors.New("not retried yet")
			}
			return nil
		})
		b.startAgq(t, cfg)
		b.waitState(t, "ACTIVE")
	})

	t.Run("TakesBackItsIDFromAnotherKey", func(t *testing.T) {
		t.Parallel()
		a := agqtest.Start(t)
		// Another key registers the id before the key minted for it exists.
		intruder := a.Client(t, redis.Options{Password: a.CreateKey(t, "worker", "intruder")})
		ctx := context.Background()
		if err := intruder.Do(ctx, "WORKER.REGISTER",
			`{"worker_id":"`+testWorkerID+`","hostname":"h","agw_version":"1","capabilities":{"tools":["sort"]}}`).Err(); err != nil {
			t.Fatal(err)
		}
		b := run(t, a, testConfig(t, a.Addr, a.CreateKey(t, "worker", testWorkerID)))
		agqtest.Eventually(t, 10*time.Second, func() error {
			if w := b.waitState(t, "ACTIVE"); w.Principal != testWorkerID {
				return fmt.Errorf("the id is held by %s", w.Principal)
			}
			return nil
		})
		if err := intruder.Do(ctx, "WORKER.HEARTBEAT", testWorkerID).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("the other key's heartbeat for the id: %v", err)
		}
	})
}
