package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
	sub := a.RedisCLICommand(ctx, t, "SUBSCRIBE", "job.follow-1.status")
	sub.Env = append(sub.Env, "REDISCLI_AUTH="+producer)
	out, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); sub.Wait() }()
	lines := bufio.NewScanner(out)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("redis-cli SUBSCRIBE ended: %v", lines.Err())
		}
		return lines.Text()
	}
	for l := next(); l != "1"; l = next() { // the confirmation ends with the count
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
