package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// WorkerConfig configures one worker process.
type WorkerConfig struct {
	Addr, ID, Key, Queue string
	Heartbeat            time.Duration
	// Work is how long each job runs.
	Work time.Duration
	// TLSCACertFile, when set, connects over TLS to a server whose
	// certificate that CA signed, presenting TLSCertFile/TLSKeyFile.
	TLSCACertFile, TLSCertFile, TLSKeyFile string
}

// RunWorker is a worker process as a go-redis user would write one:
// register, heartbeat, pop, report completion naming the delivery, and
// after an error carry on (registering again when told to). It prints
// one line per event to out, before acting on it, so that what it did is
// known even if it is killed right after:
//
//	exec <job> <attempt> <delivery>      it runs the job now
//	done <job> <delivery> ok             its completion was accepted
//	done <job> <delivery> refused <why>  the server refused it
//	err <what> <error>                   a client-side error
func RunWorker(ctx context.Context, cfg WorkerConfig, out io.Writer) {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	tlsConf, err := clientTLS(cfg.TLSCACertFile, cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		say("err tls %s", oneLine(err))
		return
	}
	c := redis.NewClient(&redis.Options{
		Addr: cfg.Addr, Username: cfg.ID, Password: cfg.Key, MaxRetries: -1, PoolSize: 4, TLSConfig: tlsConf,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
	defer c.Close()
	reg := fmt.Sprintf(`{"worker_id":%q,"hostname":"chaos","agw_version":"0.0.0","capabilities":{"tools":["chaos"]}}`, cfg.ID)
	var registered sync.Mutex // held while (re-)registering
	register := func() {
		registered.Lock()
		defer registered.Unlock()
		for wait := time.Duration(0); sleep(ctx, wait); wait = backoff(wait) {
			err := c.Do(ctx, "WORKER.REGISTER", reg).Err()
			if err == nil {
				return
			}
			say("err register %s", oneLine(err))
		}
	}
	register()
	go func() {
		for sleep(ctx, cfg.Heartbeat) {
			err := c.Do(ctx, "WORKER.HEARTBEAT", cfg.ID).Err()
			if err != nil {
				say("err heartbeat %s", oneLine(err))
				if strings.Contains(err.Error(), "not registered") {
					register()
				}
			}
		}
	}()
	for wait := time.Duration(0); sleep(ctx, wait); {
		res, err := c.BRPop(ctx, time.Second, "queue:"+cfg.Queue).Result()
		if errors.Is(err, redis.Nil) {
			wait = 0
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			say("err pop %s", oneLine(err))
			if strings.Contains(err.Error(), "register") || strings.Contains(err.Error(), "not active") {
				register()
			}
			wait = backoff(wait)
			continue
		}
		wait = 0
		var job struct {
			JobID    string `json:"job_id"`
			Attempt  int    `json:"attempt"`
			Delivery string `json:"delivery"`
		}
		if err := json.Unmarshal([]byte(res[1]), &job); err != nil || job.JobID == "" || job.Delivery == "" {
			say("err delivery %q", res[1])
			continue
		}
		say("exec %s %d %s", job.JobID, job.Attempt, job.Delivery)
		time.Sleep(cfg.Work)
		doc := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, job.Attempt, job.Delivery)
		// The same final report is re-sent until answered: twice is once.
	report:
		for wait := time.Duration(0); sleep(ctx, wait); wait = backoff(wait) {
			err := c.Do(ctx, "JOB.UPDATE", job.JobID, doc).Err()
			var refused redis.Error
			switch {
			case err == nil:
				say("done %s %s ok", job.JobID, job.Delivery)
				break report
			case errors.As(err, &refused) && !strings.HasPrefix(err.Error(), "TRYAGAIN"):
				say("done %s %s refused %s", job.JobID, job.Delivery, oneLine(err))
				break report
			}
			say("err update %s", oneLine(err))
		}
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
