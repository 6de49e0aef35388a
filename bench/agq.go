package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// agqServer is agq run as a subprocess on the benchmark's cluster.
type agqServer struct {
	cmd      *exec.Cmd
	addr     string
	adminKey string
	admin    *redis.Client
	dir      string
}

// buildAgq compiles the agq of this checkout, in its own module (the
// benchmark runs from bench/).
func buildAgq(ctx context.Context, dir string) (string, error) { return buildCommand(ctx, dir, "agq") }

// buildCommand compiles ./cmd/<name> of this checkout into dir.
func buildCommand(ctx context.Context, dir, name string) (string, error) {
	bin := filepath.Join(dir, name)
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "agq")); err != nil {
		return "", fmt.Errorf("run the benchmark from the bench directory: %w", err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+name)
	build.Dir = root
	out, err := build.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", name, err, out)
	}
	return bin, nil
}

func startAgq(ctx context.Context, bin, databaseURL string, maxClients int, args ...string) (*agqServer, error) {
	dir, err := os.MkdirTemp("", "agqb-agq")
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	rand.Read(key)
	s := &agqServer{addr: freeAddr(), adminKey: hex.EncodeToString(key), dir: dir}
	s.cmd = exec.Command(bin, "--listen", s.addr, "--http-listen", "off", "--database-url", databaseURL,
		"--data-dir", dir, "--admin-key", s.adminKey, "--log-level", "warn",
		"--max-clients", strconv.Itoa(maxClients))
	s.cmd.Args = append(s.cmd.Args, args...)
	log, err := os.Create(filepath.Join(dir, "agq.log"))
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.admin = redis.NewClient(&redis.Options{Addr: s.addr, Password: s.adminKey, PoolSize: 32})
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if err := s.admin.Ping(ctx).Err(); err == nil {
			return s, nil
		} else if time.Since(start) > 30*time.Second {
			s.stop()
			return nil, fmt.Errorf("agq did not answer: %v (log in %s)", err, log.Name())
		}
	}
}

func (s *agqServer) pid() int { return s.cmd.Process.Pid }

func (s *agqServer) stop() {
	s.admin.Close()
	s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(s.dir)
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// worker is one registered worker on one go-redis connection, as a user
// would write it.
type worker struct {
	id string
	c  *redis.Client
}

func (s *agqServer) newWorkers(ctx context.Context, prefix string, n int) ([]*worker, error) {
	out := make([]*worker, n)
	for i := range out {
		id := fmt.Sprintf("%s-%d", prefix, i)
		key, err := s.admin.Do(ctx, "KEY.CREATE", "worker", id).Text()
		if err != nil {
			return nil, err
		}
		c := redis.NewClient(&redis.Options{Addr: s.addr, Username: id, Password: key, PoolSize: 1,
			ReadTimeout: -1, MaxRetries: -1})
		doc, _ := json.Marshal(map[string]any{"worker_id": id, "hostname": "bench", "agw_version": "bench",
			"capabilities": map[string]any{"tools": []string{}, "types": []string{"bench"}}})
		if err := c.Do(ctx, "WORKER.REGISTER", string(doc)).Err(); err != nil {
			return nil, err
		}
		out[i] = &worker{id: id, c: c}
	}
	return out, nil
}

func workerIDs(ws []*worker) []string {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.id
	}
	return ids
}

// heartbeat sends every worker's heartbeat each interval until ctx ends;
// a worker not registered yet answers an error, which is fine.
func (s *agqServer) heartbeat(ctx context.Context, ids []string, every time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		for _, id := range ids {
			s.admin.Do(ctx, "WORKER.HEARTBEAT", id)
		}
	}
}

func closeWorkers(ws []*worker) {
	for _, w := range ws {
		w.c.Close()
	}
}

// delivered is the part of a delivered job a worker reports with.
type delivered struct {
	ID       string `json:"job_id"`
	Attempt  int    `json:"attempt"`
	Delivery string `json:"delivery"`
	Payload  struct {
		SentAt int64 `json:"sent_at"`
	} `json:"payload"`
}

// work pops a job from queue, waiting up to a second, and reports it, with
// a running report first when running is set. It returns false when the
// pop timed out.
func (w *worker) work(ctx context.Context, queue string, running bool) (delivered, bool, error) {
	return w.workWaiting(ctx, queue, running, time.Second, nil)
}

// pop takes a job from queue with BRPOP, waiting up to timeout (0: none);
// ok is false when none came.
func (w *worker) pop(ctx context.Context, queue string, timeout time.Duration) (d delivered, ok bool, err error) {
	res, err := w.c.BRPop(ctx, timeout, "queue:"+queue).Result()
	if err == redis.Nil {
		return d, false, nil
	}
	if err != nil {
		return d, false, err
	}
	if err := json.Unmarshal([]byte(res[1]), &d); err != nil {
		return d, false, err
	}
	return d, true, nil
}

// workWaiting is work with the pop's timeout (0: none). held, when set, is
// called as soon as the worker holds the job, before it reports anything:
// where a pickup latency ends, as River's is taken when its worker starts.
func (w *worker) workWaiting(ctx context.Context, queue string, running bool, timeout time.Duration, held func(delivered)) (delivered, bool, error) {
	d, ok, err := w.pop(ctx, queue, timeout)
	if !ok || err != nil {
		return d, false, err
	}
	if held != nil {
		held(d)
	}
	if running {
		doc := fmt.Sprintf(`{"status":"running","attempt":%d,"delivery":%q}`, d.Attempt, d.Delivery)
		if err := w.c.Do(ctx, "JOB.UPDATE", d.ID, doc).Err(); err != nil {
			return d, false, err
		}
	}
	doc := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, d.Attempt, d.Delivery)
	return d, true, w.c.Do(ctx, "JOB.UPDATE", d.ID, doc).Err()
}

// workPipelined reports the job the worker holds completed and takes the
// next one in the same round trip (JOB.UPDATE and RPOP in one pipeline);
// holding none, it waits for one in BRPOP, up to a second. It returns how
// many jobs it completed.
func (w *worker) workPipelined(ctx context.Context, queue string, held *delivered) (int, error) {
	var pop *redis.StringCmd
	var next []string
	completed := 0
	if held.ID == "" {
		res, err := w.c.BRPop(ctx, time.Second, "queue:"+queue).Result()
		if err != nil && err != redis.Nil {
			return 0, err
		}
		next = res
	} else {
		doc := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, held.Attempt, held.Delivery)
		pipe := w.c.Pipeline()
		report := pipe.Do(ctx, "JOB.UPDATE", held.ID, doc)
		pop = pipe.RPop(ctx, "queue:"+queue)
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return 0, err
		}
		if err := report.Err(); err != nil {
			return 0, err
		}
		completed = 1
		if v, err := pop.Result(); err == nil {
			next = []string{"", v}
		}
	}
	*held = delivered{}
	if len(next) == 2 {
		if err := json.Unmarshal([]byte(next[1]), held); err != nil {
			return completed, err
		}
	}
	return completed, nil
}

// workBatch pops up to count jobs from queue with BLMPOP, waiting up to a
// second, and reports them all completed in one pipeline; it returns how
// many it completed.
func (w *worker) workBatch(ctx context.Context, queue string, count int) (int, error) {
	res, err := w.c.Do(ctx, "BLMPOP", 1, 1, "queue:"+queue, "RIGHT", "COUNT", count).Slice()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	jobs, _ := res[1].([]any)
	pipe := w.c.Pipeline()
	for _, raw := range jobs {
		var d delivered
		if err := json.Unmarshal([]byte(raw.(string)), &d); err != nil {
			return 0, err
		}
		pipe.Do(ctx, "JOB.UPDATE", d.ID, fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, d.Attempt, d.Delivery))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	return len(jobs), nil
}

// jobDoc is one benchmark job.
func jobDoc(queue string, sentAt int64) string {
	return fmt.Sprintf(`{"queue":%q,"type":"bench","payload":{"sent_at":%d}}`, queue, sentAt)
}

// submitBatches submits n jobs in batches of size.
func (s *agqServer) submitBatches(ctx context.Context, queue string, n, size int) error {
	return s.submitDocs(ctx, n, size, func(int) string { return jobDoc(queue, 0) })
}

// submitDocs submits n jobs, the i-th doc(i), in batches of size.
func (s *agqServer) submitDocs(ctx context.Context, n, size int, doc func(i int) string) error {
	return submitDocsWith(ctx, s.admin, n, size, doc)
}
