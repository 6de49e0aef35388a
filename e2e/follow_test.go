package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// A job run by agw, followed with redis-cli SUBSCRIBE: each transition is
// printed as it happens, ending with completed; the lines its pipeline
// wrote were published while it ran, and JOB.LOGS has them.
func TestFollowingAJobRunByAgw(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, heartbeatEvery(time.Second))
	startAgw(t, a.Addr, "agw-follow", a.CreateKey(t, "worker", "agw-follow"))
	producer := a.CreateKey(t, "producer", "follower")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lines := subscribeCLI(ctx, t, a, producer, "job.follow-1.status")
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("redis-cli SUBSCRIBE ended: %v", lines.Err())
		}
		return lines.Text()
	}

	job := `{"job_id":"follow-1","plan":{"tasks":[{"tool":"seq","args":["1","5"]},{"tool":"tail","args":["-n","3"]}]}}`
	if got := cli(t, a, producer, "JOB.SUBMIT", job); got != "follow-1" {
		t.Fatalf("JOB.SUBMIT printed %q", got)
	}
	var seen []string
	for len(seen) == 0 || seen[len(seen)-1] != "completed" {
		l := next()
		if !strings.HasPrefix(l, "{") {
			continue // "message" and the channel
		}
		var m struct{ Event, Status string }
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("message %q: %v", l, err)
		}
		seen = append(seen, m.Status)
	}
	if strings.Join(seen, " ") != "queued running completed" {
		t.Fatalf("redis-cli printed the statuses %v", seen)
	}
	// PUBLISH is refused once a job is finished: the lines were published
	// while it ran.
	if got := cli(t, a, producer, "JOB.LOGS", "follow-1"); got != "3\n4\n5" {
		t.Fatalf("JOB.LOGS printed %q", got)
	}
}

// The lines of a pipeline that writes one every 100 ms reach a redis-cli
// SUBSCRIBE on the worker's node, and a go-redis subscriber on another
// node, as they are written, not when the job ends.
func TestFollowingTheLogsOfASlowPipeline(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, heartbeatEvery(time.Second))
	cfg := agqtest.DefaultConfig(t)
	cfg.DatabaseURL, cfg.AdminKey, cfg.HeartbeatInterval = a.DatabaseURL, a.AdminKey, time.Second
	b := agqtest.StartConfig(t, cfg)
	startAgw(t, a.Addr, "agw-ticker", a.CreateKey(t, "worker", "agw-ticker"), "AGW_TOOLS=sh")
	producer := a.CreateKey(t, "producer", "log-follower")
	const lines = 12

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type arrival struct {
		line string
		at   time.Time
	}
	// redis-cli on the node agw works through.
	scanner := subscribeCLI(ctx, t, a, producer, "job.tick-1.logs")
	fromCLI := make(chan arrival, 64)
	go func() {
		for scanner.Scan() {
			if l := scanner.Text(); strings.HasPrefix(l, "tick ") {
				fromCLI <- arrival{l, time.Now()}
			}
		}
	}()
	// go-redis on the other node.
	other := b.Client(t, redis.Options{Password: producer})
	ps := other.Subscribe(ctx, "job.tick-1.logs")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	fromOther := ps.Channel()
	time.Sleep(200 * time.Millisecond) // the other node hears of its subscriber

	job := `{"job_id":"tick-1","plan":{"tasks":[{"tool":"sh","args":["-c","for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo tick $i; sleep 0.1; done"]}]}}`
	if got := cli(t, a, producer, "JOB.SUBMIT", job); got != "tick-1" {
		t.Fatalf("JOB.SUBMIT printed %q", got)
	}
	var cliGot, otherGot []arrival
	for len(cliGot) < lines || len(otherGot) < lines {
		select {
		case l := <-fromCLI:
			cliGot = append(cliGot, l)
		case m := <-fromOther:
			otherGot = append(otherGot, arrival{m.Payload, time.Now()})
		case <-ctx.Done():
			t.Fatalf("after 30s: redis-cli printed %v, the other node's subscriber got %v", cliGot, otherGot)
		}
	}
	for who, got := range map[string][]arrival{"redis-cli": cliGot, "go-redis on another node": otherGot} {
		for i, l := range got {
			if want := fmt.Sprintf("tick %d", i+1); l.line != want {
				t.Fatalf("%s: line %d is %q, want %q", who, i, l.line, want)
			}
		}
		// Written over 1.1 s: they came as written, not all at the end.
		if spread := got[lines-1].at.Sub(got[0].at); spread < 500*time.Millisecond {
			t.Fatalf("%s: %d lines written 100 ms apart arrived within %v", who, lines, spread)
		}
	}
	if j := decodeJob(t, cli(t, a, producer, "JOB.WAIT", "tick-1", "30")); j.Status != "completed" {
		t.Fatalf("the job ended %s", j.Status)
	}
}

// subscribeCLI starts redis-cli SUBSCRIBE channel with key, and returns
// the lines it prints once the subscription is confirmed. redis-cli stops
// when ctx ends, and the test waits for it.
func subscribeCLI(ctx context.Context, t *testing.T, a *agqtest.Agq, key, channel string) *bufio.Scanner {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	sub := a.RedisCLICommand(ctx, t, "SUBSCRIBE", channel)
	sub.Env = append(sub.Env, "REDISCLI_AUTH="+key)
	out, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); sub.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "1" { // the confirmation ends with the count
	}
	return lines
}
