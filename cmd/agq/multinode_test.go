package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/auth"
)

// TestTwoNodesShareOneDatabase runs a real agq process and an in-process
// node on one database: work crosses between them, only one leads, and
// when the leader is killed the other takes over its recoveries.
func TestTwoNodesShareOneDatabase(t *testing.T) {
	bin := buildAgq(t)
	dbURL := agqtest.NewDatabase(t)
	adminKey := auth.GenerateKey()
	addrA := agqtest.StableAddr(t)
	logPath := filepath.Join(t.TempDir(), "agq-a.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	t.Cleanup(func() {
		if t.Failed() {
			dumpLog(t, logPath)
		}
	})
	procA := exec.Command(bin, "--listen", addrA, "--http-listen", "off", "--database-url", dbURL,
		"--data-dir", t.TempDir(), "--admin-key", adminKey, "--heartbeat-interval", "1s", "--log-level", "info")
	procA.Env = withoutAgqEnv(os.Environ())
	procA.Stdout, procA.Stderr = logFile, logFile
	if err := procA.Start(); err != nil {
		t.Fatal(err)
	}
	exitedA := make(chan struct{})
	go func() { procA.Wait(); close(exitedA) }()
	t.Cleanup(func() {
		procA.Process.Kill()
		<-exitedA
	})
	ctx := context.Background()
	adminA := redis.NewClient(&redis.Options{Addr: addrA, Password: adminKey})
	defer adminA.Close()
	// A starts alone, so it becomes the leader.
	agqtest.Eventually(t, 30*time.Second, func() error {
		info, err := adminA.Info(ctx, "leader").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "is_leader:1") {
			return fmt.Errorf("A does not lead yet: %s", info)
		}
		return nil
	})

	cfgB := agqtest.DefaultConfig(t)
	cfgB.DatabaseURL = dbURL
	cfgB.AdminKey = adminKey
	cfgB.HeartbeatInterval = time.Second
	b := agqtest.StartConfig(t, cfgB)
	adminB := b.Admin(t)

	workerKey := mustText(ctx, t, adminA, "KEY.CREATE", "worker", "fleet")
	register := func(addr, id string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: id, Password: workerKey})
		t.Cleanup(func() { c.Close() })
		doc, _ := json.Marshal(map[string]any{"worker_id": id, "hostname": "h", "agw_version": "1", "capabilities": map[string]any{"tools": []string{"t"}}})
		if err := c.Do(ctx, "WORKER.REGISTER", string(doc)).Err(); err != nil {
			t.Fatalf("registering %s: %v", id, err)
		}
		return c
	}

	t.Run("OnlyOneNodeLeads", func(t *testing.T) {
		time.Sleep(2 * time.Second) // B campaigns every second; give it a chance to (wrongly) win
		if b.Node.IsLeader() {
			t.Fatal("both nodes lead")
		}
		info, err := adminB.Info(ctx, "leader").Result()
		if err != nil || !strings.Contains(info, "is_leader:0") || strings.Contains(info, "leader_node_id:"+b.Node.ID) {
			t.Fatalf("B's INFO leader = %q, %v", info, err)
		}
	})

	t.Run("JobSubmittedOnOneIsPoppedOnTheOther", func(t *testing.T) {
		wB := register(b.Addr, "on-b")
		got := make(chan []string, 1)
		go func() {
			res, _ := wB.Do(ctx, "BRPOP", "queue:cross", "10").StringSlice()
			got <- res
		}()
		agqtest.Eventually(t, 5*time.Second, func() error {
			list, _ := adminB.ClientList(ctx).Result()
			if !strings.Contains(list, "cmd=brpop") {
				return fmt.Errorf("not blocked yet")
			}
			return nil
		})
		start := time.Now()
		mustText(ctx, t, adminA, "JOB.SUBMIT", `{"job_id":"cross-1","queue":"cross","type":"t"}`)
		select {
		case res := <-got:
			if len(res) != 2 || !strings.Contains(res[1], `"job_id":"cross-1"`) {
				t.Fatalf("BRPOP on B = %v", res)
			}
			t.Logf("a job submitted on A reached the worker blocked on B in %v", time.Since(start))
		case <-time.After(10 * time.Second):
			t.Fatal("the worker blocked on B was not woken by a job submitted on A")
		}
		wB.Do(ctx, "WORKER.UNREGISTER", "on-b")
	})

	// Under load, with wake-ups sent after commits: workers blocked on B
	// get jobs submitted on A, and JOB.WAITs on A return when B's workers
	// complete them. Every wait is shorter than the blocked clients'
	// periodic re-check, so only a wake-up can end it in time.
	t.Run("UnderLoadPopsAndWaitsCrossNodes", func(t *testing.T) {
		const jobs, producers, workers = 400, 4, 6
		loadCtx, stop := context.WithCancel(ctx)
		defer stop()
		var completed sync.WaitGroup
		completed.Add(jobs)
		var wg sync.WaitGroup
		for i := range workers {
			c := register(b.Addr, fmt.Sprintf("load-b-%d", i))
			wg.Go(func() {
				for loadCtx.Err() == nil {
					res, err := c.BRPop(loadCtx, time.Second, "queue:load").Result()
					if err != nil {
						continue
					}
					var j struct {
						JobID    string `json:"job_id"`
						Attempt  int    `json:"attempt"`
						Delivery string `json:"delivery"`
					}
					if err := json.Unmarshal([]byte(res[1]), &j); err != nil {
						t.Errorf("delivery %q: %v", res[1], err)
						return
					}
					doc := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, j.Attempt, j.Delivery)
					if err := c.Do(loadCtx, "JOB.UPDATE", j.JobID, doc).Err(); err != nil {
						t.Errorf("completing %s: %v", j.JobID, err)
						return
					}
					completed.Done()
				}
			})
		}
		waits := make(chan error, jobs)
		var submitters sync.WaitGroup
		for p := range producers {
			submitters.Go(func() {
				for i := p; i < jobs; i += producers {
					id := fmt.Sprintf("load-%d", i)
					if err := adminA.Do(ctx, "JOB.SUBMIT", fmt.Sprintf(`{"job_id":%q,"queue":"load","type":"t"}`, id)).Err(); err != nil {
						t.Errorf("submitting %s on A: %v", id, err)
						return
					}
					if i%10 == 0 {
						go func() {
							raw, err := adminA.Do(ctx, "JOB.WAIT", id, "10").Text()
							if err == nil && !strings.Contains(raw, `"status":"completed"`) {
								err = fmt.Errorf("JOB.WAIT %s on A = %s", id, raw)
							}
							waits <- err
						}()
					}
				}
			})
		}
		submitters.Wait()
		for range jobs / 10 {
			if err := <-waits; err != nil {
				t.Errorf("JOB.WAIT on A for a job completed through B: %v", err)
			}
		}
		done := make(chan struct{})
		go func() { completed.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("not every job submitted on A was completed by the workers on B")
		}
		stop()
		wg.Wait()
	})

	t.Run("KilledLeaderIsReplacedAndItsRecoveriesHappen", func(t *testing.T) {
		silent := register(addrA, "silent-on-a")
		mustText(ctx, t, adminA, "JOB.SUBMIT", `{"job_id":"orphan-1","queue":"recover","type":"t"}`)
		res, err := silent.Do(ctx, "BRPOP", "queue:recover", "5").StringSlice()
		if err != nil || !strings.Contains(res[1], "orphan-1") {
			t.Fatalf("pop on A: %v %v", res, err)
		}
		if err := silent.Do(ctx, "JOB.UPDATE", "orphan-1", `{"status":"running"}`).Err(); err != nil {
			t.Fatal(err)
		}
		killedAt := time.Now()
		procA.Process.Signal(syscall.SIGKILL)
		<-exitedA
		agqtest.Eventually(t, 10*time.Second, func() error {
			if !b.Node.IsLeader() {
				return fmt.Errorf("B has not taken over")
			}
			return nil
		})
		t.Logf("B leads %v after A was killed", time.Since(killedAt))
		rescuer := register(b.Addr, "rescuer")
		stop := make(chan struct{})
		defer close(stop)
		go func() { // the rescuer stays alive while it waits
			for {
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Millisecond):
					rescuer.Do(ctx, "WORKER.HEARTBEAT", "rescuer")
				}
			}
		}()
		res, err = rescuer.Do(ctx, "BRPOP", "queue:recover", "15").StringSlice()
		if err != nil || !strings.Contains(res[1], `"job_id":"orphan-1"`) || !strings.Contains(res[1], `"attempt":2`) {
			t.Fatalf("rescued job: %v %v", res, err)
		}
		t.Logf("the dead worker's job was re-delivered %v after A was killed", time.Since(killedAt))
		dead, err := adminB.Do(ctx, "WORKER.LIST", "DEAD").StringSlice()
		if err != nil || !slices.Contains(dead, "silent-on-a") {
			t.Fatalf("WORKER.LIST DEAD = %v, %v", dead, err)
		}
	})
}
