package worker

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// newClient connects as the worker: Username is the worker id and Password
// its key, so every pooled connection authenticates as this worker. agw
// uses two clients: one whose poolSize connections block in BRPOP, closed
// when popping stops so that no blocked pop takes a job after a shutdown
// began, and one for everything else (registration, heartbeats, reports).
func newClient(cfg Config, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:        cfg.Addr,
		TLSConfig:   cfg.TLS,
		Username:    cfg.WorkerID,
		Password:    cfg.Key,
		ClientName:  cfg.WorkerID,
		PoolSize:    poolSize,
		DialTimeout: cfg.DialTimeout,
		// agw retries by itself, on the 1s…60s schedule, and must see
		// every lost connection: the server may have restarted or
		// declared this worker dead meanwhile, so agw registers again
		// before its next pop. go-redis's own silent retries would hide
		// that.
		MaxRetries: -1,
		// agq sends no maintenance notifications; skip asking for them.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// outcome classifies the result of a command for the retry logic.
type outcome int

const (
	outcomeOK            outcome = iota
	outcomeNil                   // BRPOP timed out with nothing to do
	outcomeConn                  // connection trouble or a transient reply: retry later
	outcomeNotRegistered         // the server does not know this worker: register again
	outcomeCancelled             // -CANCELLED: the job was cancelled
	outcomeRefused               // any other error reply: retrying the same command will not help
)

// transientCodes are error replies that mean "try again later" rather than "no".
var transientCodes = []string{"LOADING ", "TRYAGAIN ", "BUSY ", "MASTERDOWN ", "CLUSTERDOWN "}

func classify(err error) outcome {
	if err == nil {
		return outcomeOK
	}
	if errors.Is(err, redis.Nil) {
		return outcomeNil
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return outcomeConn // network errors, EOF, pool timeouts, context ends
	}
	msg := rerr.Error()
	switch {
	case strings.HasPrefix(msg, "CANCELLED"):
		return outcomeCancelled
	case strings.Contains(strings.ToLower(msg), "not registered"):
		return outcomeNotRegistered
	}
	for _, code := range transientCodes {
		if strings.HasPrefix(msg, code) {
			return outcomeConn
		}
	}
	return outcomeRefused
}

// Commands of the worker protocol. The replies are status strings whose
// tokens replies.go parses.

func (w *Worker) cmdRegister(ctx context.Context, body []byte) (string, error) {
	return w.rdb.Do(ctx, "WORKER.REGISTER", body).Text()
}

func (w *Worker) cmdHeartbeat(ctx context.Context, stats []byte) (string, error) {
	return w.rdb.Do(ctx, "WORKER.HEARTBEAT", w.cfg.WorkerID, stats).Text()
}

func (w *Worker) cmdUnregister(ctx context.Context) error {
	return w.rdb.Do(ctx, "WORKER.UNREGISTER", w.cfg.WorkerID).Err()
}

func (w *Worker) cmdUpdate(ctx context.Context, jobID string, body []byte) error {
	return w.rdb.Do(ctx, "JOB.UPDATE", jobID, body).Err()
}
