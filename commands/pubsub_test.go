package commands_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

type statusMsg struct {
	JobID    string `json:"job_id"`
	Event    string `json:"event"`
	Status   string `json:"status"`
	Attempt  int    `json:"attempt"`
	WorkerID string `json:"worker_id"`
}

// runJob submits a job with the given id and has w run it to completion.
func runJob(t *testing.T, a *agqtest.Agq, w *testWorker, id, queue string) {
	t.Helper()
	ctx := context.Background()
	submit(t, a.Admin(t), map[string]any{"job_id": id, "type": "t", "queue": queue})
	if _, d, ok := w.pop(t, "5", queue); !ok || d.JobID != id {
		t.Fatalf("pop: %+v %v", d, ok)
	}
	if err := w.update(ctx, id, map[string]any{"status": "running"}); err != nil {
		t.Fatal(err)
	}
	if err := w.update(ctx, id, map[string]any{"status": "completed"}); err != nil {
		t.Fatal(err)
	}
}

// receiveStatuses reads job status messages until the job completed.
func receiveStatuses(t *testing.T, ch <-chan *redis.Message) []string {
	t.Helper()
	var seen []string
	for {
		select {
		case m := <-ch:
			var s statusMsg
			if err := json.Unmarshal([]byte(m.Payload), &s); err != nil {
				t.Fatalf("message %q: %v", m.Payload, err)
			}
			seen = append(seen, s.Event+"/"+s.Status)
			if s.Status == "completed" {
				return seen
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no completion among the messages: %v", seen)
		}
	}
}

// A subscriber sees each transition of a job, in order, ending with its
// completion — on the node that ran it (go-redis, RESP3) and on another
// node sharing the database; a pattern subscriber sees the queue's events.
func TestSubscribersSeeAJobsTransitions(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	b := agqtest.Start(t, func(c *config.Config) { c.DatabaseURL = a.DatabaseURL })
	ctx := ctxT(t)
	w := registerWorker(t, a, "ps-worker", "t")

	here := a.Admin(t).Subscribe(ctx, "job.ps-1.status")
	defer here.Close()
	there := b.Admin(t).Subscribe(ctx, "job.ps-1.status")
	defer there.Close()
	pattern := b.Admin(t).PSubscribe(ctx, "queue.ps-*.events")
	defer pattern.Close()
	for _, s := range []*redis.PubSub{here, there, pattern} {
		if _, err := s.Receive(ctx); err != nil { // the confirmation
			t.Fatal(err)
		}
	}
	runJob(t, a, w, "ps-1", "ps-q")
	want := []string{"submitted/queued", "started/running", "completed/completed"}
	for name, s := range map[string]*redis.PubSub{"this node": here, "the other node": there} {
		if got := receiveStatuses(t, s.Channel()); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("on %s: %v, want %v", name, got, want)
		}
	}
	var events []string
	for len(events) < 3 {
		select {
		case m := <-pattern.Channel():
			if m.Channel != "queue.ps-q.events" || m.Pattern != "queue.ps-*.events" {
				t.Fatalf("pattern message %+v", m)
			}
			var e struct{ Event, JobID string }
			json.Unmarshal([]byte(m.Payload), &e)
			events = append(events, e.Event)
		case <-time.After(10 * time.Second):
			t.Fatalf("queue events: %v", events)
		}
	}
	if strings.Join(events, " ") != "submitted started completed" {
		t.Errorf("queue events %v", events)
	}
}

// redis-cli SUBSCRIBE (RESP2) prints the transitions as they happen.
func TestRedisCLISubscribePrintsTransitions(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	w := registerWorker(t, a, "cli-worker", "t")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := a.RedisCLICommand(ctx, t, "--no-auth-warning", "-a", a.AdminKey, "SUBSCRIBE", "job.cli-1.status")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("redis-cli exited")
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("redis-cli printed nothing more")
		}
		return ""
	}
	// The confirmation: subscribe, the channel, the count.
	for _, want := range []string{"subscribe", "job.cli-1.status", "1"} {
		for l := next(); l != want; l = next() {
			if !strings.HasPrefix(l, "Reading messages") {
				t.Fatalf("redis-cli printed %q before %q", l, want)
			}
		}
	}
	runJob(t, a, w, "cli-1", "cli-q")
	var statuses []string
	for len(statuses) == 0 || statuses[len(statuses)-1] != "completed" {
		if l := next(); strings.HasPrefix(l, "{") {
			var s statusMsg
			if err := json.Unmarshal([]byte(l), &s); err != nil || s.JobID != "cli-1" {
				t.Fatalf("message %q: %v", l, err)
			}
			statuses = append(statuses, s.Status)
		} else if l != "message" && l != "job.cli-1.status" {
			t.Fatalf("unexpected line %q", l)
		}
	}
	if strings.Join(statuses, " ") != "queued running completed" {
		t.Fatalf("statuses %v", statuses)
	}
	_ = exec.ErrNotFound
}

// Subscribing follows the roles; subscribed, a RESP2 client may only
// (un)subscribe and PING, and nobody may block.
func TestSubscribeRulesAndSubscribedMode(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	w := registerWorker(t, a, "rules-worker", "t")
	other := submit(t, a.Admin(t), map[string]any{"type": "t", "queue": "elsewhere"})
	for _, ch := range []string{"job." + other + ".status", "queue.elsewhere.events", "worker.someone.events"} {
		if err := w.c.Do(ctx, "SUBSCRIBE", ch).Err(); err == nil || err.Error() != fmt.Sprintf("NOPERM this key may not subscribe to '%s'", ch) {
			t.Errorf("a worker subscribing to %s: %v", ch, err)
		}
	}
	if err := w.c.Do(ctx, "PSUBSCRIBE", "job.*").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("a worker's pattern: %v", err)
	}
	// Its own job's channel is fine.
	mine := submit(t, a.Admin(t), map[string]any{"type": "t", "queue": "mine"})
	if _, d, ok := w.pop(t, "5", "mine"); !ok || d.JobID != mine {
		t.Fatalf("pop %+v", d)
	}
	ws := w.c.Subscribe(ctx, "job."+mine+".status", "job.cancel")
	defer ws.Close()
	if _, err := ws.Receive(ctx); err != nil {
		t.Fatalf("a worker subscribing to its job: %v", err)
	}

	// RESP2 by hand: only subscription commands and PING.
	conn, err := net.Dial("tcp", a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(conn)
	send := func(cmd string, lines int) string {
		t.Helper()
		if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
			t.Fatal(err)
		}
		var got []string
		for range lines {
			l, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: %v after %q", cmd, err, got)
			}
			got = append(got, strings.TrimRight(l, "\r\n"))
		}
		return strings.Join(got, " ")
	}
	send("AUTH "+a.AdminKey, 1)
	if got := send("SUBSCRIBE a b", 12); got != "*3 $9 subscribe $1 a :1 *3 $9 subscribe $1 b :2" {
		t.Fatalf("SUBSCRIBE a b = %q", got)
	}
	if got := send("PING", 5); got != "*2 $4 pong $0 " {
		t.Fatalf("PING = %q", got)
	}
	if got := send("GET x", 1); got != "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context" {
		t.Fatalf("GET while subscribed = %q", got)
	}
	if got := send("UNSUBSCRIBE a", 6); got != "*3 $11 unsubscribe $1 a :1" {
		t.Fatalf("UNSUBSCRIBE a = %q", got)
	}
	if got := send("UNSUBSCRIBE", 6); got != "*3 $11 unsubscribe $1 b :0" {
		t.Fatalf("UNSUBSCRIBE = %q", got)
	}
	// With nothing left, every command works again.
	if got := send("PING", 1); got != "+PONG" {
		t.Fatalf("PING after unsubscribing = %q", got)
	}
	if got := send("ECHO hi", 2); got != "$2 hi" {
		t.Fatalf("ECHO = %q", got)
	}
}

// A subscriber that never reads is cut off once its messages pile up, and
// the job flow does not wait for it.
func TestASubscriberThatNeverReadsIsCutOff(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	conn, err := net.DialTCP("tcp", nil, resolveTCP(t, a.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadBuffer(4096)
	fmt.Fprintf(conn, "AUTH %s\r\nPSUBSCRIBE *\r\n", a.AdminKey)
	rd := bufio.NewReader(conn)
	for range 7 { // +OK, then the confirmation
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	admin := a.Admin(t)
	start := time.Now()
	for batch := 0; batch < 20 && metric(t, a, "agq_slow_subscribers_total") == 0; batch++ {
		jobs := make([]string, 2000)
		for i := range jobs {
			jobs[i] = fmt.Sprintf(`{"type":"t","queue":"flood","payload":{"pad":%q}}`, strings.Repeat("x", 200))
		}
		if err := admin.Do(ctx, "JOB.SUBMIT", "["+strings.Join(jobs, ",")+"]").Err(); err != nil {
			t.Fatalf("submitting while a subscriber does not read: %v", err)
		}
	}
	if metric(t, a, "agq_slow_subscribers_total") == 0 {
		t.Fatal("the subscriber that does not read was never cut off")
	}
	t.Logf("cut off after %v of submissions", time.Since(start).Round(time.Millisecond))
	// The server closed its connection: only the admin's is left.
	agqtest.Eventually(t, 10*time.Second, func() error {
		list, _ := admin.ClientList(ctx).Result()
		if n := strings.Count(list, "\n"); n > 1 {
			return fmt.Errorf("%d connections: %s", n, list)
		}
		return nil
	})
}

func resolveTCP(t *testing.T, addr string) *net.TCPAddr {
	t.Helper()
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return ta
}

// The holder publishes its job's log lines: subscribers get them as they
// come, JOB.LOGS keeps them per attempt, and nobody else may publish.
func TestJobLogsArePublishedAndKept(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "log-worker", "t")
	other := registerWorker(t, a, "log-other", "t")
	id := submit(t, admin, map[string]any{"type": "t", "queue": "logs", "retry_backoff_seconds": 0})
	follow := admin.Subscribe(ctx, "job."+id+".logs")
	defer follow.Close()
	if _, err := follow.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if _, d, ok := w.pop(t, "5", "logs"); !ok || d.JobID != id {
		t.Fatalf("pop %+v", d)
	}
	channel := "job." + id + ".logs"
	for i := range 3 {
		n, err := w.c.Do(ctx, "PUBLISH", channel, fmt.Sprintf("line %d", i)).Int()
		if err != nil || n != 1 {
			t.Fatalf("PUBLISH: %d, %v", n, err)
		}
	}
	for i := range 3 {
		select {
		case m := <-follow.Channel():
			if m.Payload != fmt.Sprintf("line %d", i) {
				t.Fatalf("message %d: %q", i, m.Payload)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("log line %d never came", i)
		}
	}
	for _, tc := range []struct {
		who  *testWorker
		ch   string
		line string
		want string
	}{
		{other, channel, "not mine", "NOPERM only the worker holding job " + id + " publishes its logs"},
		{w, "queue.logs.events", "x", "NOPERM only a job's holder publishes, and only to job.<id>.logs"},
		{w, channel, "bad\x00line", "ERR invalid log line: must be UTF-8 text without NUL bytes"},
	} {
		if err := tc.who.c.Do(ctx, "PUBLISH", tc.ch, tc.line).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("PUBLISH %s %q by %s: %v, want %s", tc.ch, tc.line, tc.who.id, err, tc.want)
		}
	}
	// The attempt fails and is retried: its lines stay with attempt 1.
	if err := w.update(ctx, id, map[string]any{"status": "failed", "error": "boom"}); err != nil {
		t.Fatal(err)
	}
	if _, d, ok := w.pop(t, "5", "logs"); !ok || d.Attempt != 2 {
		t.Fatalf("second delivery %+v", d)
	}
	if err := w.c.Do(ctx, "PUBLISH", channel, "second attempt").Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.update(ctx, id, map[string]any{"status": "completed"}); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Do(ctx, "PUBLISH", channel, "too late").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("a line after completion: %v", err)
	}
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"JOB.LOGS", id, "1"}, "line 0|line 1|line 2"},
		{[]any{"JOB.LOGS", id}, "second attempt"},
		{[]any{"JOB.LOGS", id, "3"}, ""},
	} {
		lines, err := admin.Do(ctx, tc.args...).StringSlice()
		if err != nil || strings.Join(lines, "|") != tc.want {
			t.Errorf("%v = %q, %v; want %q", tc.args, lines, err, tc.want)
		}
	}
	if err := admin.Do(ctx, "JOB.LOGS", "nosuch").Err(); err == nil || err.Error() != "ERR no such job nosuch" {
		t.Errorf("JOB.LOGS nosuch: %v", err)
	}
}

// A subscriber whose key is revoked stops receiving: its connection ends.
func TestARevokedKeyEndsItsSubscriptions(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	key := a.CreateKey(t, "producer", "watcher")
	c := a.Client(t, redis.Options{Username: "watcher", Password: key, MaxRetries: -1})
	sub := c.Subscribe(ctx, "queue.revoked.events")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Admin(t).Do(ctx, "KEY.REVOKE", "watcher").Err(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		msg, err := sub.Receive(rctx)
		if err != nil {
			if rctx.Err() != nil {
				t.Fatal("the revoked subscriber's connection is still open")
			}
			return // the connection ended
		}
		t.Logf("received %v", msg)
	}
}

// worker.<id>.events says when a worker registers, drains and leaves.
func TestWorkerEventsArePublished(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	sub := admin.Subscribe(ctx, "worker.ev-worker.events")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	w := registerWorker(t, a, "ev-worker", "t")
	if err := admin.Do(ctx, "WORKER.DRAIN", "ev-worker").Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Do(ctx, "WORKER.UNREGISTER", "ev-worker").Err(); err != nil {
		t.Fatal(err)
	}
	if events := workerEventsUntil(t, sub, "ev-worker", "unregistered", 10*time.Second); strings.Join(events, " ") != "registered draining unregistered" {
		t.Fatalf("worker events %v", events)
	}
}

// workerEventsUntil reads sub's worker.<id>.events messages, all about
// worker id, until one says last, and returns their events in order.
func workerEventsUntil(t *testing.T, sub *redis.PubSub, id, last string, wait time.Duration) []string {
	t.Helper()
	var events []string
	for len(events) == 0 || events[len(events)-1] != last {
		select {
		case m := <-sub.Channel():
			var e struct {
				Event    string `json:"event"`
				WorkerID string `json:"worker_id"`
			}
			json.Unmarshal([]byte(m.Payload), &e)
			if e.WorkerID != id {
				t.Fatalf("message %q", m.Payload)
			}
			events = append(events, e.Event)
		case <-time.After(wait):
			t.Fatalf("worker events so far: %v", events)
		}
	}
	return events
}

// A worker the watchdog declares dead is published on worker.<id>.events,
// to subscribers of every node.
func TestAWorkersDeathIsPublished(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, fastHeartbeats)
	cfg := agqtest.DefaultConfig(t)
	cfg.DatabaseURL, cfg.AdminKey, cfg.HeartbeatInterval = a.DatabaseURL, a.AdminKey, time.Second
	b := agqtest.StartConfig(t, cfg)
	ctx := ctxT(t)
	var subs []*redis.PubSub
	for _, node := range []*agqtest.Agq{a, b} {
		sub := node.Admin(t).Subscribe(ctx, "worker.doomed.events")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	time.Sleep(200 * time.Millisecond)  // each node hears of the other's subscriber
	registerWorker(t, a, "doomed", "t") // and never heartbeats
	for i, sub := range subs {
		if events := workerEventsUntil(t, sub, "doomed", "dead", 15*time.Second); strings.Join(events, " ") != "registered dead" {
			t.Fatalf("node %d: worker events %v", i, events)
		}
	}
}

// A job the watchdog takes back from a silent worker is published too.
func TestTheWatchdogsMovesArePublished(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, fastHeartbeats)
	ctx := ctxT(t)
	sub := a.Admin(t).Subscribe(ctx, "job.wd-1.status")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	silent := registerWorker(t, a, "wd-silent", "t")
	submit(t, a.Admin(t), map[string]any{"job_id": "wd-1", "type": "t", "queue": "wd"})
	if _, d, ok := silent.pop(t, "5", "wd"); !ok || d.JobID != "wd-1" {
		t.Fatalf("pop %+v", d)
	}
	if err := silent.update(ctx, "wd-1", map[string]any{"status": "running"}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) == 0 || seen[len(seen)-1] != "requeued/queued" {
		select {
		case m := <-sub.Channel():
			var s statusMsg
			json.Unmarshal([]byte(m.Payload), &s)
			seen = append(seen, s.Event+"/"+s.Status)
		case <-time.After(15 * time.Second):
			t.Fatalf("no requeue among %v", seen)
		}
	}
	if strings.Join(seen, " ") != "submitted/queued started/running requeued/queued" {
		t.Fatalf("transitions %v", seen)
	}
}

// Workers subscribed to job.cancel alone hear cancellations from every
// node, while nothing builds jobs' status messages for them; a status
// subscription added later, on the node of those workers, gets the next
// job's every transition from the other node.
func TestJobCancelSubscribersAloneThenAStatusSubscriber(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	b := agqtest.Start(t, func(c *config.Config) { c.DatabaseURL = a.DatabaseURL })
	ctx := ctxT(t)
	w := registerWorker(t, a, "narrow-worker", "t")

	cancels := b.Admin(t).Subscribe(ctx, "job.cancel")
	defer cancels.Close()
	if _, err := cancels.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	submit(t, a.Admin(t), map[string]any{"job_id": "narrow-1", "type": "t", "queue": "narrow-q"})
	if _, d, ok := w.pop(t, "5", "narrow-q"); !ok || d.JobID != "narrow-1" {
		t.Fatalf("pop: %+v %v", d, ok)
	}
	if err := a.Admin(t).Do(ctx, "JOB.CANCEL", "narrow-1").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-cancels.Channel():
		if m.Payload != "narrow-1" {
			t.Fatalf("job.cancel said %q", m.Payload)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancellation did not reach the other node's job.cancel subscriber")
	}

	status := b.Admin(t).Subscribe(ctx, "job.narrow-2.status")
	defer status.Close()
	if _, err := status.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	runJob(t, a, w, "narrow-2", "narrow-q")
	want := []string{"submitted/queued", "started/running", "completed/completed"}
	if got := receiveStatuses(t, status.Channel()); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the later status subscriber saw %v, want %v", got, want)
	}
}
