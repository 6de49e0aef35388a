package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// WorkerConfig configures one worker process.
type WorkerConfig struct {
	Addr, ID, Key, Queue string
	Heartbeat            time.Duration
	// Work is how long each job runs (each step, in a workflow run).
	Work time.Duration
	// Workflows works the graphs of a workflow run (runFlow).
	Workflows bool
	// TLSCACertFile, when set, connects over TLS to a server whose
	// certificate that CA signed, presenting TLSCertFile/TLSKeyFile.
	TLSCACertFile, TLSCertFile, TLSKeyFile string
}

// RunWorker is a worker process as a go-redis user would write one:
// register (naming the job it runs, none at first), heartbeat, pop, report completion naming the delivery, and
// after an error carry on (registering again when told to). It prints
// one line per event to out, before acting on it, so that what it did is
// known even if it is killed right after:
//
//	exec <job> <attempt> <delivery>      it runs the job now
//	done <job> <delivery> ok             its completion was accepted
//	done <job> <delivery> refused <why>  the server refused it
//	err <what> <error>                   a client-side error
func RunWorker(ctx context.Context, cfg WorkerConfig, out io.Writer) {
	w := &chaosWorker{ctx: ctx, cfg: cfg, out: out}
	tlsConf, err := clientTLS(cfg.TLSCACertFile, cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		w.say("err tls %s", oneLine(err))
		return
	}
	w.c = redis.NewClient(&redis.Options{
		Addr: cfg.Addr, Username: cfg.ID, Password: cfg.Key, MaxRetries: -1, PoolSize: 4, TLSConfig: tlsConf,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
	defer w.c.Close()
	w.register()
	go w.heartbeat()
	w.work()
}

// chaosWorker is one RunWorker: its client and what its goroutines share.
type chaosWorker struct {
	ctx context.Context
	cfg WorkerConfig
	c   *redis.Client

	outMu sync.Mutex // one event line at a time
	out   io.Writer

	registering sync.Mutex // held while (re-)registering
	// running is the job this process runs now ("" none): a registration
	// names it in running_jobs, so that a job an earlier process of this
	// id held and acknowledged goes back to its queue at once.
	running atomic.Value
}

// chaosJob is the part of a delivery the worker reports against.
type chaosJob struct {
	JobID    string `json:"job_id"`
	Attempt  int    `json:"attempt"`
	Delivery string `json:"delivery"`
}

func (w *chaosWorker) say(format string, args ...any) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	fmt.Fprintf(w.out, format+"\n", args...)
}

// register registers the worker, retrying until it is accepted or ctx ends.
func (w *chaosWorker) register() {
	w.registering.Lock()
	defer w.registering.Unlock()
	running := []string{}
	if id, _ := w.running.Load().(string); id != "" {
		running = append(running, id)
	}
	names, _ := json.Marshal(running)
	reg := fmt.Sprintf(`{"worker_id":%q,"hostname":"chaos","agw_version":"0.0.0","capabilities":{"tools":["chaos"]},"running_jobs":%s}`,
		w.cfg.ID, names)
	for wait := time.Duration(0); sleep(w.ctx, wait); wait = backoff(wait) {
		err := w.c.Do(w.ctx, "WORKER.REGISTER", reg).Err()
		if err == nil {
			return
		}
		w.say("err register %s", oneLine(err))
	}
}

// heartbeat beats until ctx ends, registering again when the server has
// forgotten the worker.
func (w *chaosWorker) heartbeat() {
	for sleep(w.ctx, w.cfg.Heartbeat) {
		err := w.c.Do(w.ctx, "WORKER.HEARTBEAT", w.cfg.ID).Err()
		if err != nil {
			w.say("err heartbeat %s", oneLine(err))
			if strings.Contains(err.Error(), "not registered") {
				w.register()
			}
		}
	}
}

// work pops and runs jobs one at a time until ctx ends.
func (w *chaosWorker) work() {
	for wait := time.Duration(0); sleep(w.ctx, wait); {
		res, err := w.c.BRPop(w.ctx, time.Second, "queue:"+w.cfg.Queue).Result()
		if errors.Is(err, redis.Nil) {
			wait = 0
			continue
		}
		if err != nil {
			if w.ctx.Err() != nil {
				return
			}
			w.say("err pop %s", oneLine(err))
			if strings.Contains(err.Error(), "register") || strings.Contains(err.Error(), "not active") {
				w.register()
			}
			wait = backoff(wait)
			continue
		}
		wait = 0
		var job chaosJob
		if err := json.Unmarshal([]byte(res[1]), &job); err != nil || job.JobID == "" || job.Delivery == "" {
			w.say("err delivery %q", res[1])
			continue
		}
		w.say("exec %s %d %s", job.JobID, job.Attempt, job.Delivery)
		w.running.Store(job.JobID)
		if w.cfg.Workflows {
			w.runFlow(res[1], job)
		} else {
			time.Sleep(w.cfg.Work)
			w.complete(job)
		}
		w.running.Store("")
	}
}

// complete reports job completed until the server accepts or refuses it.
// The same final report is re-sent until answered: twice is once.
func (w *chaosWorker) complete(job chaosJob) {
	doc := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, job.Attempt, job.Delivery)
	for wait := time.Duration(0); sleep(w.ctx, wait); wait = backoff(wait) {
		err := w.c.Do(w.ctx, "JOB.UPDATE", job.JobID, doc).Err()
		var refused redis.Error
		switch {
		case err == nil:
			w.say("done %s %s ok", job.JobID, job.Delivery)
			return
		case errors.As(err, &refused) && !strings.HasPrefix(err.Error(), "TRYAGAIN"):
			w.say("done %s %s refused %s", job.JobID, job.Delivery, oneLine(err))
			return
		}
		w.say("err update %s", oneLine(err))
	}
}

// sleep waits d unless ctx ends first, and reports whether ctx is live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func backoff(d time.Duration) time.Duration {
	return min(max(2*d, 20*time.Millisecond), time.Second)
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }
