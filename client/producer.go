package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ProducerOptions configure a Producer.
type ProducerOptions struct {
	Addr      string // host:port of agq
	Principal string // optional: the key's principal name
	Key       string // a producer's or an admin's key; or a worker's, for the jobs it spawns
	TLSConfig *tls.Config
	PoolSize  int // connections (10 per CPU)
	// Namespace is where a cluster admin's key acts (every connection
	// sends NAMESPACE when it opens); empty: the key's own namespace, or
	// default for a cluster key. A key bound to a namespace acts there
	// whatever this says, and naming another is refused.
	Namespace string
}

// Producer submits, reads and controls jobs.
type Producer struct {
	rdb *redis.Client
}

// NewProducer connects lazily to agq with opts.
func NewProducer(opts ProducerOptions) (*Producer, error) {
	if opts.Addr == "" {
		return nil, errors.New("client: no server address")
	}
	return &Producer{rdb: redis.NewClient(&redis.Options{
		Addr:      opts.Addr,
		Username:  opts.Principal,
		Password:  opts.Key,
		TLSConfig: opts.TLSConfig,
		PoolSize:  opts.PoolSize,
		// JOB.WAIT blocks as long as asked: the caller's ctx bounds it.
		ReadTimeout:              -1,
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		OnConnect:                enterNamespace(opts.Namespace),
	})}, nil
}

// enterNamespace moves each new connection into namespace ns; nil when
// ns is empty (the key's own).
func enterNamespace(ns string) func(context.Context, *redis.Conn) error {
	if ns == "" {
		return nil
	}
	return func(ctx context.Context, cn *redis.Conn) error {
		return cn.Do(ctx, "NAMESPACE", ns).Err()
	}
}

// Close closes the producer's connections.
func (p *Producer) Close() error { return p.rdb.Close() }

// JobSpec is a job to submit. Zero fields take agq's defaults.
type JobSpec struct {
	JobID        string        // the idempotency key; agq mints a UUIDv7 when empty
	Queue        string        // "ready"
	Type         string        // routes to workers offering it
	Requires     []string      // capabilities needed (default [Type])
	Priority     int           // higher first
	MaxAttempts  int           // 3
	RetryBackoff time.Duration // base of the exponential backoff (1s)
	Timeout      time.Duration // of one attempt (1h)
	RunAt        time.Time     // not before
	UniqueKey    string        // one unfinished job per key
	After        []string      // jobs that must end first
	FairKey      string        // the customer the job is for, sharing its queue fairly with others
	FairWeight   int           // the key's share (1 to 1000; 1)
	Payload      any           // encoded as JSON
}

func (s JobSpec) document() map[string]any {
	doc := map[string]any{}
	set := func(k string, v any, ok bool) {
		if ok {
			doc[k] = v
		}
	}
	set("job_id", s.JobID, s.JobID != "")
	set("queue", s.Queue, s.Queue != "")
	set("type", s.Type, s.Type != "")
	set("requires", s.Requires, s.Requires != nil)
	set("priority", s.Priority, s.Priority != 0)
	set("max_attempts", s.MaxAttempts, s.MaxAttempts != 0)
	set("retry_backoff_seconds", s.RetryBackoff.Seconds(), s.RetryBackoff != 0)
	set("timeout_seconds", s.Timeout.Seconds(), s.Timeout != 0)
	set("run_at", s.RunAt.UTC().Format(time.RFC3339Nano), !s.RunAt.IsZero())
	set("unique_key", s.UniqueKey, s.UniqueKey != "")
	set("after", s.After, len(s.After) > 0)
	set("fair_key", s.FairKey, s.FairKey != "")
	set("fair_weight", s.FairWeight, s.FairWeight != 0)
	set("payload", s.Payload, s.Payload != nil)
	return doc
}

// Submit submits one job and returns its id.
func (p *Producer) Submit(ctx context.Context, spec JobSpec) (string, error) {
	body, err := json.Marshal(spec.document())
	if err != nil {
		return "", fmt.Errorf("client: encoding the job: %w", err)
	}
	return p.rdb.Do(ctx, "JOB.SUBMIT", body).Text()
}

// SubmitMany submits jobs in one JOB.SUBMIT, one transaction: all or none.
// A job may name in After the ids of jobs before it, so that a whole graph
// goes in one call. It returns the ids in order.
func (p *Producer) SubmitMany(ctx context.Context, specs []JobSpec) ([]string, error) {
	docs := make([]map[string]any, len(specs))
	for i, s := range specs {
		docs[i] = s.document()
	}
	body, err := json.Marshal(docs)
	if err != nil {
		return nil, fmt.Errorf("client: encoding the jobs: %w", err)
	}
	return p.rdb.Do(ctx, "JOB.SUBMIT", body).StringSlice()
}

// JobInfo is a job as JOB.GET shows it.
type JobInfo struct {
	Namespace string          `json:"namespace"`
	ID        string          `json:"job_id"`
	Queue     string          `json:"queue"`
	Type      string          `json:"type"`
	Status    string          `json:"status"`
	Attempt   int             `json:"attempt"`
	WorkerID  string          `json:"worker_id"`
	Payload   json.RawMessage `json:"payload"`
	Result    json.RawMessage `json:"result"`
	Errors    []struct {
		Error   string `json:"error"`
		Attempt int    `json:"attempt"`
	} `json:"errors"`
	Steps      int    `json:"steps"`
	FairKey    string `json:"fair_key"`
	FairWeight int    `json:"fair_weight"`
	// Raw is the whole JSON, with the fields not named here.
	Raw json.RawMessage `json:"-"`
}

// Finished reports whether the job has ended: completed, failed or cancelled.
func (j *JobInfo) Finished() bool {
	return j.Status == "completed" || j.Status == "failed" || j.Status == "cancelled"
}

func parseJobInfo(raw string) (*JobInfo, error) {
	var j JobInfo
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		return nil, fmt.Errorf("client: reading a job: %w", err)
	}
	j.Raw = json.RawMessage(raw)
	return &j, nil
}

// Get reads a job; ErrNotFound when agq does not know it.
func (p *Producer) Get(ctx context.Context, id string) (*JobInfo, error) {
	raw, err := p.rdb.Do(ctx, "JOB.GET", id).Text()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return parseJobInfo(raw)
}

// Wait waits up to timeout (0: until ctx ends) for the job to end and
// returns it; ErrNotFinished when it did not end in time.
func (p *Producer) Wait(ctx context.Context, id string, timeout time.Duration) (*JobInfo, error) {
	raw, err := p.rdb.Do(ctx, "JOB.WAIT", id, strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64)).Text()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFinished
	}
	if err != nil {
		return nil, err
	}
	return parseJobInfo(raw)
}

// Cancel cancels a job: at once when it waits; through its worker when it
// runs.
func (p *Producer) Cancel(ctx context.Context, id string) error {
	return p.rdb.Do(ctx, "JOB.CANCEL", id).Err()
}

// Signal sends the signal name with payload (any JSON value) to a job,
// ending its wait for it (WaitSignal). A non-empty id makes the signal
// one however often it is sent, so a call may be repeated after an error.
func (p *Producer) Signal(ctx context.Context, jobID, name string, payload any, id string) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("client: signal %s: payload is not JSON: %w", name, err)
	}
	args := []any{"JOB.SIGNAL", jobID, name, string(body)}
	if id != "" {
		args = append(args, "ID", id)
	}
	return p.rdb.Do(ctx, args...).Err()
}

// Retry puts a failed or cancelled job back, with fresh attempts.
func (p *Producer) Retry(ctx context.Context, id string) error {
	return p.rdb.Do(ctx, "JOB.RETRY", id).Err()
}

// RetryFrom runs a failed, cancelled or completed job again from its step
// stepID (JOB.RETRY … FROM): that step and every step begun after it run
// again, the steps before it answer their outputs. A job that has not
// ended is refused (job … is <status>), and so is a step it never began.
func (p *Producer) RetryFrom(ctx context.Context, id, stepID string) error {
	return p.rdb.Do(ctx, "JOB.RETRY", id, "FROM", stepID).Err()
}

// Event is one transition of a job, from job.<id>.status.
type Event struct {
	JobID    string `json:"job_id"`
	Queue    string `json:"queue"`
	Event    string `json:"event"`
	Status   string `json:"status"`
	Attempt  int    `json:"attempt"`
	WorkerID string `json:"worker_id"`
	StepID   string `json:"step_id"`
	// Signal names the signal of a signal event.
	Signal string    `json:"signal"`
	At     time.Time `json:"at"`
}

// Finished reports whether the event ends the job.
func (e Event) Finished() bool {
	return e.Status == "completed" || e.Status == "failed" || e.Status == "cancelled"
}

// Follow returns the job's events as they happen; the channel closes after
// the event that ends the job, or when ctx ends. A job that has ended
// already gives one event, its status.
func (p *Producer) Follow(ctx context.Context, id string) (<-chan Event, error) {
	sub := p.rdb.Subscribe(ctx, "job."+id+".status")
	if _, err := sub.Receive(ctx); err != nil {
		sub.Close()
		return nil, err
	}
	messages := sub.Channel()
	// Subscribed: what the job did before is in JOB.GET, what it does
	// from now on in messages.
	j, err := p.Get(ctx, id)
	if err != nil {
		sub.Close()
		return nil, err
	}
	out := make(chan Event, 16)
	go func() {
		defer close(out)
		defer sub.Close()
		if j.Finished() {
			select {
			case out <- Event{JobID: id, Queue: j.Queue, Event: j.Status, Status: j.Status, Attempt: j.Attempt, WorkerID: j.WorkerID}:
			case <-ctx.Done():
			}
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-messages:
				if !ok {
					return
				}
				var e Event
				if json.Unmarshal([]byte(m.Payload), &e) != nil {
					continue
				}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
				if e.Finished() {
					return
				}
			}
		}
	}()
	return out, nil
}
