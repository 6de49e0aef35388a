package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/auth"
)

// The crash test runs the real agq binary as a subprocess, feeds it jobs
// and works them off with plain go-redis clients, and kills it with SIGKILL
// partway through. Whatever a client was told was submitted must exist
// afterwards and end completed: submissions are re-sent by id after errors,
// and deliveries lost with the process come back after the ack timeout.
const (
	crashJobs       = 5000
	crashKillAfter  = 2000 // acknowledged submissions before the kill
	crashSubmitters = 8
	crashWorkers    = 8
	crashBatchSize  = 10 // every crashBatchEvery-th submission is a batch
	crashBatchEvery = 8
	crashQueue      = "crash"
	crashAckTimeout = 2 * time.Second
)

func TestKillDuringSubmitAndWorkLosesNoJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	srv := newAgqProcess(t, buildAgq(t), agqtest.NewDatabase(t))
	srv.start(ctx)
	admin := redis.NewClient(srv.clientOptions("", srv.adminKey))
	defer admin.Close()
	producerKey := mustText(ctx, t, admin, "KEY.CREATE", "producer", "p")
	workerKey := mustText(ctx, t, admin, "KEY.CREATE", "worker", "w")

	l := &ledger{acked: map[string]bool{}, completedBy: map[string][]string{}, errs: map[string]int{}}
	killNow := make(chan struct{})
	var killOnce sync.Once
	l.onAck = func(n int) {
		if n >= crashKillAfter {
			killOnce.Do(func() { close(killNow) })
		}
	}

	// Workers run until every job is completed; submitters until every
	// chunk of ids was acknowledged.
	workCtx, stopWork := context.WithCancel(ctx)
	var workers sync.WaitGroup
	defer func() {
		stopWork()
		workers.Wait()
	}()
	for i := range crashWorkers {
		id := fmt.Sprintf("w-%d", i)
		workers.Go(func() { runCrashWorker(workCtx, srv.clientOptions(id, workerKey), id, l) })
	}
	chunks := crashChunks()
	var submitters sync.WaitGroup
	defer func() {
		cancel()
		submitters.Wait()
	}()
	for range crashSubmitters {
		submitters.Go(func() { runSubmitter(ctx, t, srv.clientOptions("", producerKey), chunks, l) })
	}

	select {
	case <-killNow:
	case <-ctx.Done():
		t.Fatalf("only %d submissions acknowledged before the deadline", l.ackedCount())
	}
	ackedAtKill, completedAtKill := l.ackedCount(), l.completedCount()
	srv.kill()
	killedAt := time.Now()
	srv.start(ctx)
	t.Logf("killed agq with %d jobs acknowledged and %d completed; it answered PING again after %v",
		ackedAtKill, completedAtKill, time.Since(killedAt).Round(time.Millisecond))

	submitters.Wait()
	if n := l.ackedCount(); n != crashJobs {
		t.Fatalf("%d of %d submissions acknowledged", n, crashJobs)
	}
	submittedAt := time.Now()

	// Completed is final, so each round asks only about the jobs not yet
	// seen completed. The ack timeout bounds how long a delivery lost in
	// the crash stays running; allow it many times over.
	pending := l.ackedIDs()
	byStatus := map[string]int{}
	var pollErr error
	deadline := time.Now().Add(45 * time.Second)
	for len(pending) > 0 {
		rest, counts, err := notCompleted(ctx, admin, pending)
		if err == nil {
			pending, byStatus = rest, counts
		}
		pollErr = err // the server may be busy; the deadline decides
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs not completed 45s after the last submission: by status %v (e.g. %s), last poll error %v",
				len(pending), byStatus, pending[0], pollErr)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("deadline: %d jobs not completed, by status %v", len(pending), byStatus)
		}
	}
	t.Logf("all %d jobs completed %v after the last submission", crashJobs, time.Since(submittedAt).Round(time.Millisecond))
	stopWork()
	workers.Wait()

	// The final word: every acknowledged id exists and is completed, and
	// no submission was stored twice.
	if rest, byStatus, err := notCompleted(ctx, admin, l.ackedIDs()); err != nil || len(rest) > 0 {
		t.Fatalf("final check: %d jobs not completed (%v), err %v", len(rest), byStatus, err)
	}
	db, err := pgx.Connect(ctx, srv.databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM jobs_all`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != crashJobs {
		t.Fatalf("jobs table holds %d rows, want %d: a re-sent submission was stored twice", rows, crashJobs)
	}
	l.report(t)
	srv.stop(t)
}

// crashChunks splits the job ids into submissions: mostly single jobs,
// every crashBatchEvery-th a batch.
func crashChunks() chan []string {
	var all [][]string
	for i := 0; i < crashJobs; {
		n := 1
		if len(all)%crashBatchEvery == crashBatchEvery-1 {
			n = min(crashBatchSize, crashJobs-i)
		}
		ids := make([]string, n)
		for k := range ids {
			ids[k] = fmt.Sprintf("crash-%05d", i+k)
		}
		all = append(all, ids)
		i += n
	}
	ch := make(chan []string, len(all))
	for _, c := range all {
		ch <- c
	}
	close(ch)
	return ch
}

// runSubmitter submits chunks until none is left, re-sending a chunk after
// any error: a job id makes submission idempotent.
func runSubmitter(ctx context.Context, t *testing.T, opts *redis.Options, chunks chan []string, l *ledger) {
	c := redis.NewClient(opts)
	defer c.Close()
	for ids := range chunks {
		for wait := time.Duration(0); ; wait = nextBackoff(wait) {
			if !pause(ctx, wait) {
				return
			}
			got, err := submitChunk(ctx, c, ids)
			if err != nil {
				l.noteErr("submit", err)
				continue
			}
			if !slices.Equal(got, ids) {
				t.Errorf("JOB.SUBMIT of %v answered %v", ids, got)
				return
			}
			l.ack(ids)
			break
		}
	}
}

func submitChunk(ctx context.Context, c *redis.Client, ids []string) ([]string, error) {
	docs := make([]string, len(ids))
	for i, id := range ids {
		docs[i] = fmt.Sprintf(`{"job_id":%q,"queue":%q,"type":"crash","payload":{"n":%d}}`, id, crashQueue, i)
	}
	if len(ids) == 1 {
		id, err := c.Do(ctx, "JOB.SUBMIT", docs[0]).Text()
		return []string{id}, err
	}
	return c.Do(ctx, "JOB.SUBMIT", "["+strings.Join(docs, ",")+"]").StringSlice()
}

// runCrashWorker is a worker as a go-redis user would write one: register,
// pop, report completion; after an error, reconnect, register again and
// carry on.
func runCrashWorker(ctx context.Context, opts *redis.Options, id string, l *ledger) {
	c := redis.NewClient(opts)
	defer c.Close()
	reg := fmt.Sprintf(`{"worker_id":%q,"hostname":"crash-test","agw_version":"0.0.0","capabilities":{"tools":["crash"]}}`, id)
	registered := false
	for wait := time.Duration(0); pause(ctx, wait); {
		if !registered {
			if err := c.Do(ctx, "WORKER.REGISTER", reg).Err(); err != nil {
				l.noteErr("register", err)
				wait = nextBackoff(wait)
				continue
			}
			registered = true
		}
		res, err := c.BRPop(ctx, time.Second, "queue:"+crashQueue).Result()
		if errors.Is(err, redis.Nil) {
			wait = 0
			continue
		}
		if err != nil {
			l.noteErr("pop", err)
			registered = false
			wait = nextBackoff(wait)
			continue
		}
		var job struct {
			JobID    string `json:"job_id"`
			Attempt  int    `json:"attempt"`
			Delivery string `json:"delivery"`
		}
		if err := json.Unmarshal([]byte(res[1]), &job); err != nil || job.JobID == "" || job.Delivery == "" {
			l.noteErr("delivery", fmt.Errorf("job json %q: %v", res[1], err))
			continue
		}
		wait = 0
		completeJob(ctx, c, id, job.JobID, job.Attempt, job.Delivery, l)
	}
}

// completeJob reports a job completed, naming its delivery, re-sending the
// same update after a connection error (the same terminal update twice is
// one transition). A refusal from the server means the job moved on
// without this worker, the at-least-once case after a lost delivery: the
// worker drops it.
func completeJob(ctx context.Context, c *redis.Client, workerID, jobID string, attempt int, delivery string, l *ledger) {
	doc := fmt.Sprintf(`{"status":"completed","by":%q,"attempt":%d,"delivery":%q}`, workerID, attempt, delivery)
	for wait := time.Duration(0); pause(ctx, wait); wait = nextBackoff(wait) {
		err := c.Do(ctx, "JOB.UPDATE", jobID, doc).Err()
		if err == nil {
			l.complete(jobID, workerID+" "+delivery)
			return
		}
		var refused redis.Error
		if errors.As(err, &refused) {
			l.noteErr("update refused", err)
			return
		}
		l.noteErr("update", err)
	}
}

// notCompleted asks JOB.GET about ids, in pipelines of a few hundred, and
// returns those not completed, with a count by status ("missing" for no
// such job).
func notCompleted(ctx context.Context, c *redis.Client, ids []string) ([]string, map[string]int, error) {
	var rest []string
	byStatus := map[string]int{}
	for chunk := range slices.Chunk(ids, 500) {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(chunk))
		for i, id := range chunk {
			cmds[i] = pipe.Do(ctx, "JOB.GET", id)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		for i, cmd := range cmds {
			raw, err := cmd.Text()
			var status string
			switch {
			case errors.Is(err, redis.Nil):
				status = "missing"
			case err != nil:
				return nil, nil, fmt.Errorf("%s: %w", chunk[i], err)
			default:
				var j struct {
					Status string `json:"status"`
				}
				if err := json.Unmarshal([]byte(raw), &j); err != nil {
					return nil, nil, fmt.Errorf("%s: %q: %w", chunk[i], raw, err)
				}
				status = j.Status
			}
			byStatus[status]++
			if status != "completed" {
				rest = append(rest, chunk[i])
			}
		}
	}
	return rest, byStatus, nil
}

// ledger is what the clients were told.
type ledger struct {
	mu          sync.Mutex
	acked       map[string]bool
	completedBy map[string][]string // job id → "<worker> <delivery>" whose completion got +OK
	errs        map[string]int      // client-side errors by kind
	sample      map[string]string   // one error text per kind
	onAck       func(acked int)
}

func (l *ledger) ack(ids []string) {
	l.mu.Lock()
	for _, id := range ids {
		l.acked[id] = true
	}
	n := len(l.acked)
	l.mu.Unlock()
	l.onAck(n)
}

// complete records a completion answered OK; the same delivery's report
// answered OK again (a re-send) counts once.
func (l *ledger) complete(jobID, delivery string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.completedBy[jobID], delivery) {
		l.completedBy[jobID] = append(l.completedBy[jobID], delivery)
	}
}

func (l *ledger) noteErr(kind string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs[kind]++
	if l.sample == nil {
		l.sample = map[string]string{}
	}
	if _, ok := l.sample[kind]; !ok {
		l.sample[kind] = err.Error()
	}
}

func (l *ledger) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *ledger) completedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.completedBy)
}

func (l *ledger) ackedIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.acked))
	for id := range l.acked {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// report logs the client-side errors the crash caused, and fails the test
// for a job more than one worker was told it completed: a delivery lost in
// the crash may run again (at-least-once), but its token lets only one
// delivery's completion through.
func (l *ledger) report(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for kind, n := range l.errs {
		t.Logf("client errors %-15s %5d  e.g. %s", kind, n, l.sample[kind])
	}
	twice := 0
	for id, by := range l.completedBy {
		if len(by) > 1 {
			twice++
			t.Logf("job %s reported completed by %v", id, by)
		}
	}
	t.Logf("%d jobs acknowledged, %d reported completed, %d by more than one report", len(l.acked), len(l.completedBy), twice)
	if twice > 0 {
		t.Errorf("%d jobs were completed by more than one delivery", twice)
	}
}

// agqProcess is the agq binary run as a subprocess, restartable on the
// same address and database.
type agqProcess struct {
	t           *testing.T
	bin         string
	addr        string
	databaseURL string
	adminKey    string
	dataDir     string
	runs        int
	extraArgs   []string
	cmd         *exec.Cmd
	exited      chan error
}

func newAgqProcess(t *testing.T, bin, databaseURL string) *agqProcess {
	p := &agqProcess{t: t, bin: bin, addr: agqtest.StableAddr(t), databaseURL: databaseURL, adminKey: auth.GenerateKey(), dataDir: t.TempDir()}
	t.Cleanup(func() {
		if p.cmd != nil {
			p.kill()
		}
	})
	return p
}

// start runs agq and waits until it answers PING.
func (p *agqProcess) start(ctx context.Context) {
	t := p.t
	t.Helper()
	p.runs++
	logPath := filepath.Join(p.dataDir, fmt.Sprintf("agq-%d.log", p.runs))
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
	cmd := exec.Command(p.bin,
		"--listen", p.addr, "--http-listen", "off", "--database-url", p.databaseURL,
		"--data-dir", p.dataDir, "--admin-key", p.adminKey,
		"--ack-timeout", crashAckTimeout.String(), "--log-level", "warn", "--log-format", "json")
	cmd.Args = append(cmd.Args, p.extraArgs...)
	cmd.Env = withoutAgqEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting agq: %v", err)
	}
	p.cmd = cmd
	p.exited = make(chan error, 1)
	go func() { p.exited <- cmd.Wait() }()

	c := redis.NewClient(&redis.Options{Addr: p.addr, Protocol: 2, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return
		}
		select {
		case exitErr := <-p.exited:
			p.cmd = nil
			t.Fatalf("agq exited before answering PING: %v", exitErr)
		case <-ctx.Done():
			t.Fatalf("agq did not answer PING: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// kill ends agq with SIGKILL: no shutdown code runs.
func (p *agqProcess) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.cmd = nil
}

// stop ends agq with SIGTERM and expects a clean exit.
func (p *agqProcess) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.cmd = nil
		if err != nil {
			t.Errorf("agq exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("agq did not stop within 15s of SIGTERM")
	}
}

// clientOptions are go-redis options for agq as a user would set them,
// except that go-redis's own retries are off: the test decides what is
// re-sent.
func (p *agqProcess) clientOptions(user, key string) *redis.Options {
	return &redis.Options{
		Addr: p.addr, Username: user, Password: key,
		MaxRetries: -1, PoolSize: 4,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	}
}

// buildAgq builds the agq binary from this package once per test.
func buildAgq(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build agq: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "agq")
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// withoutAgqEnv drops AGQ_* variables so that only the flags configure agq.
func withoutAgqEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "AGQ_") })
}

func dumpLog(t *testing.T, path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		t.Logf("%s: %s", filepath.Base(path), sc.Text())
	}
}

func mustText(ctx context.Context, t *testing.T, c *redis.Client, args ...any) string {
	t.Helper()
	s, err := c.Do(ctx, args...).Text()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return s
}

// pause waits d unless ctx ends first; it reports whether to go on.
func pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// nextBackoff doubles a retry delay from 20ms up to 320ms.
func nextBackoff(d time.Duration) time.Duration {
	return min(max(2*d, 20*time.Millisecond), 320*time.Millisecond)
}
