package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/auth"
)

// TestBehindPgBouncer runs two agq processes whose pools go through
// PgBouncer in transaction mode, with LISTEN and the leader's lock on
// connections straight to PostgreSQL: the job flow crosses the nodes,
// one leads, and without a direct URL agq refuses to start.
func TestBehindPgBouncer(t *testing.T) {
	bin := buildAgq(t)
	bouncer := agqtest.StartPgBouncer(t, agqtest.Cluster(t))
	direct := agqtest.NewDatabase(t)
	dc, err := pgconn.ParseConfig(direct)
	if err != nil {
		t.Fatal(err)
	}
	pooled := bouncer.URL(dc.Database)
	adminKey := auth.GenerateKey()
	ctx := context.Background()

	t.Run("RefusedWithoutADirectURL", func(t *testing.T) {
		out := refusedStart(t, bin, "--database-url", pooled)
		if !strings.Contains(out, "leads to a connection pooler") || !strings.Contains(out, "AGQ_DIRECT_DATABASE_URL") {
			t.Fatalf("agq's refusal does not say to set AGQ_DIRECT_DATABASE_URL:\n%s", out)
		}
	})
	t.Run("RefusedWithADirectURLThroughPgBouncer", func(t *testing.T) {
		out := refusedStart(t, bin, "--database-url", pooled, "--direct-database-url", pooled)
		if !strings.Contains(out, "direct database URL (AGQ_DIRECT_DATABASE_URL) leads to a connection pooler") {
			t.Fatalf("agq's refusal does not name the direct URL:\n%s", out)
		}
	})

	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, adminA := startBehindPgBouncer(startCtx, t, bin, pooled, direct, adminKey)
	agqtest.Eventually(t, 30*time.Second, func() error { return isLeader(ctx, adminA) })
	b, adminB := startBehindPgBouncer(startCtx, t, bin, pooled, direct, adminKey)
	addrs, admins := []string{a.addr, b.addr}, []*redis.Client{adminA, adminB}

	workerKey := mustText(ctx, t, adminA, "KEY.CREATE", "worker", "fleet")
	register := func(t *testing.T, addr, id string) *redis.Client {
		c := client(t, addr, id, workerKey)
		doc, _ := json.Marshal(map[string]any{"worker_id": id, "hostname": "h", "agw_version": "1", "capabilities": map[string]any{"tools": []string{"t"}}})
		if err := c.Do(ctx, "WORKER.REGISTER", string(doc)).Err(); err != nil {
			t.Fatalf("registering %s: %v", id, err)
		}
		return c
	}
	wB := register(t, b.addr, "on-b")

	t.Run("OnlyOneNodeLeads", func(t *testing.T) {
		time.Sleep(2 * time.Second) // B campaigns every second: give it the chance to (wrongly) win
		if err := isLeader(ctx, adminA); err != nil {
			t.Fatal(err)
		}
		info, err := adminB.Info(ctx, "leader").Result()
		if err != nil || !strings.Contains(info, "is_leader:0") {
			t.Fatalf("B's INFO leader = %q, %v", info, err)
		}
	})

	t.Run("PopBlockedOnBIsWokenBySubmissionOnA", func(t *testing.T) {
		got := popLater(ctx, wB, "queue:cross", 10)
		waitBlocked(ctx, t, adminB, 1)
		start := time.Now()
		mustText(ctx, t, adminA, "JOB.SUBMIT", `{"job_id":"cross-1","queue":"cross","type":"t"}`)
		j := receive(t, got, 5*time.Second) // the nodes' periodic re-check is 15 s away: only LISTEN is this quick
		if j.JobID != "cross-1" {
			t.Fatalf("BRPOP on B got %+v", j)
		}
		t.Logf("a job submitted on A woke the pop blocked on B in %v", time.Since(start))

		waited := make(chan string, 1)
		go func() {
			raw, err := adminA.Do(ctx, "JOB.WAIT", "cross-1", "10").Text()
			waited <- fmt.Sprint(raw, err)
		}()
		waitBlocked(ctx, t, adminA, 1)
		complete(ctx, t, wB, j, `"result":{"ok":true}`)
		select {
		case raw := <-waited:
			if !strings.Contains(raw, `"status":"completed"`) {
				t.Fatalf("JOB.WAIT on A = %s", raw)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("JOB.WAIT on A did not return when B's worker completed the job")
		}
	})

	t.Run("DelayedScheduledAndDependentJobsArrive", func(t *testing.T) {
		submitted := time.Now()
		mustText(ctx, t, adminA, "JOB.SUBMIT", `{"job_id":"later-1","queue":"later","type":"t","delay_seconds":1}`)
		j := receive(t, popLater(ctx, wB, "queue:later", 10), 10*time.Second)
		if j.JobID != "later-1" || time.Since(submitted) < time.Second {
			t.Fatalf("delayed job %+v popped after %v", j, time.Since(submitted))
		}
		complete(ctx, t, wB, j, "")
		// The leader's scheduler sweeps through PgBouncer too.
		mustText(ctx, t, adminB, "SCHEDULE.CREATE", `{"name":"tick","cron":"@every 1s","queue":"ticks","job":{"type":"t"}}`)
		j = receive(t, popLater(ctx, wB, "queue:ticks", 10), 10*time.Second)
		complete(ctx, t, wB, j, "")
		mustText(ctx, t, adminB, "SCHEDULE.DELETE", "tick")
		// A graph: the child is released when its parent completes.
		graph := `[{"job_id":"parent-1","queue":"graph","type":"t"},{"job_id":"child-1","queue":"graph","type":"t","after":["parent-1"]}]`
		if err := adminA.Do(ctx, "JOB.SUBMIT", graph).Err(); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"parent-1", "child-1"} {
			j = receive(t, popLater(ctx, wB, "queue:graph", 10), 10*time.Second)
			if j.JobID != want {
				t.Fatalf("popped %s, want %s", j.JobID, want)
			}
			complete(ctx, t, wB, j, "")
		}
	})

	t.Run("HundredsOfJobsAcrossNodesAreAllCompleted", func(t *testing.T) {
		const jobs, producers, workers = 400, 4, 6
		loadCtx, stop := context.WithCancel(ctx)
		defer stop()
		var mu sync.Mutex
		completions := map[string]int{}
		var wg sync.WaitGroup
		for i := range workers {
			c := register(t, addrs[i%2], fmt.Sprintf("load-%d", i))
			wg.Go(func() {
				for loadCtx.Err() == nil {
					res, err := c.BRPop(loadCtx, time.Second, "queue:load").Result()
					if err != nil {
						continue
					}
					var j delivered
					if err := json.Unmarshal([]byte(res[1]), &j); err != nil {
						t.Errorf("delivery %q: %v", res[1], err)
						return
					}
					complete(loadCtx, t, c, j, "")
					mu.Lock()
					completions[j.JobID]++
					mu.Unlock()
				}
			})
		}
		var submitters sync.WaitGroup
		for p := range producers {
			submitters.Go(func() {
				for i := p; i < jobs; i += producers {
					doc := fmt.Sprintf(`{"job_id":"load-%d","queue":"load","type":"t"}`, i)
					if err := admins[i%2].Do(ctx, "JOB.SUBMIT", doc).Err(); err != nil {
						t.Errorf("submitting load-%d: %v", i, err)
					}
				}
			})
		}
		submitters.Wait()
		agqtest.Eventually(t, 30*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(completions) < jobs {
				return fmt.Errorf("%d of %d jobs completed", len(completions), jobs)
			}
			return nil
		})
		stop()
		wg.Wait()
		for id, n := range completions {
			if n != 1 {
				t.Errorf("%s was completed %d times", id, n)
			}
		}
		for i := range jobs {
			raw := mustText(ctx, t, admins[i%2], "JOB.GET", fmt.Sprintf("load-%d", i))
			if !strings.Contains(raw, `"status":"completed"`) {
				t.Fatalf("load-%d: %s", i, raw)
			}
		}
	})

	t.Run("TheStatementsWentThroughPgBouncer", func(t *testing.T) {
		// Its totals are refreshed every stats_period (1 s here).
		agqtest.Eventually(t, 5*time.Second, func() error {
			rows, err := bouncer.Show(ctx, "STATS")
			if err != nil {
				return err
			}
			for _, r := range rows {
				if r["database"] == dc.Database {
					if n, _ := strconv.Atoi(r["total_xact_count"]); n < 400 {
						return fmt.Errorf("PgBouncer counted %d transactions", n)
					}
					return nil
				}
			}
			return fmt.Errorf("PgBouncer has no statistics for %s: %v", dc.Database, rows)
		})
	})

	t.Run("KilledLeaderIsReplaced", func(t *testing.T) {
		killed := time.Now()
		a.kill()
		agqtest.Eventually(t, 10*time.Second, func() error { return isLeader(ctx, adminB) })
		t.Logf("B leads %v after A was killed", time.Since(killed))
	})
}

// startBehindPgBouncer starts agq with its pool on pooled and its direct
// connections on direct, and returns an admin client of it.
func startBehindPgBouncer(ctx context.Context, t *testing.T, bin, pooled, direct, adminKey string) (*agqProcess, *redis.Client) {
	t.Helper()
	p := newAgqProcess(t, bin, pooled)
	p.adminKey = adminKey
	p.extraArgs = []string{"--direct-database-url", direct}
	p.start(ctx)
	return p, client(t, p.addr, "", adminKey)
}

// client is a go-redis client whose reads wait out the tests' blocking
// commands.
func client(t *testing.T, addr, user, key string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: key, ReadTimeout: 15 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// refusedStart runs agq with args and returns its output, failing unless
// it exits with an error.
func refusedStart(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(args, "--listen", "127.0.0.1:0", "--http-listen", "off", "--data-dir", t.TempDir(), "--log-format", "console")
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = withoutAgqEnv(os.Environ())
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("agq %v: %v, want exit status 1; output:\n%s", args, err, out)
	}
	return string(out)
}

func isLeader(ctx context.Context, admin *redis.Client) error {
	info, err := admin.Info(ctx, "leader").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "is_leader:1") {
		return fmt.Errorf("not the leader: %s", info)
	}
	return nil
}

// delivered is what a pop hands a worker, as far as these tests need it.
type delivered struct {
	JobID    string `json:"job_id"`
	Attempt  int    `json:"attempt"`
	Delivery string `json:"delivery"`
	err      error  // the pop's
}

// popLater starts a blocking pop and returns where its job will arrive.
func popLater(ctx context.Context, c *redis.Client, key string, seconds int) <-chan delivered {
	got := make(chan delivered, 1)
	go func() {
		var j delivered
		res, err := c.Do(ctx, "BRPOP", key, seconds).StringSlice()
		if err == nil {
			err = json.Unmarshal([]byte(res[1]), &j)
		}
		j.err = err
		got <- j
	}()
	return got
}

func receive(t *testing.T, got <-chan delivered, within time.Duration) delivered {
	t.Helper()
	select {
	case j := <-got:
		if j.err != nil {
			t.Fatalf("the pop returned no job: %v", j.err)
		}
		return j
	case <-time.After(within):
		t.Fatalf("no job within %v", within)
	}
	return delivered{}
}

// waitBlocked waits until n clients of the node are blocked.
func waitBlocked(ctx context.Context, t *testing.T, admin *redis.Client, n int) {
	t.Helper()
	agqtest.Eventually(t, 5*time.Second, func() error {
		info, err := admin.Info(ctx, "clients").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, fmt.Sprintf("blocked_clients:%d", n)) {
			return fmt.Errorf("not blocked yet: %s", info)
		}
		return nil
	})
}

// complete reports j completed, with extra fields added to the report.
func complete(ctx context.Context, t *testing.T, c *redis.Client, j delivered, extra string) {
	doc := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q`, j.Attempt, j.Delivery)
	if extra != "" {
		doc += "," + extra
	}
	if err := c.Do(ctx, "JOB.UPDATE", j.JobID, doc+"}").Err(); err != nil {
		t.Errorf("completing %s: %v", j.JobID, err)
	}
}
