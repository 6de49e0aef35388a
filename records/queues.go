package records

import (
	"encoding/json"
	"strings"
	"time"
)

// Queue is one queue with its counts by status.
type Queue struct {
	Name      string
	Paused    bool
	Counts    map[string]int64
	OldestAge time.Duration // of the oldest claimable job, 0 when none
	// FairKeysReady counts the named fair keys with claimable jobs.
	FairKeysReady int64
}

// QueueSummary is one queue with capped counts of its unfinished and
// failed jobs, by stored status.
type QueueSummary struct {
	Name   string
	Paused bool
	// Counts by status (queued, scheduled, running, retrying, failed),
	// each at most the cap asked for.
	Counts map[string]int64
}

// QueueJobsParams pages through one queue's jobs of one stored status.
type QueueJobsParams struct {
	Queue, Status string
	// Before is the last id of the previous page ("" for the first page).
	Before string
	Limit  int
}

// FairKeyLoad is one fair key of a queue: its jobs ready now and running.
type FairKeyLoad struct {
	Key            string
	Ready, Running int64
}

// Limits are the flow-control limits of a queue or a job type; zero values
// mean none.
type Limits struct {
	MaxRunning int
	Rate       Rate
	// MaxRunningPerKey caps each named fair key's running jobs (queues
	// only).
	MaxRunningPerKey int
}

// LimitsChange says which limits to set: a nil field stays as it is;
// MaxRunning 0 or a zero Rate removes that limit.
type LimitsChange struct {
	MaxRunning       *int
	Rate             *Rate
	MaxRunningPerKey *int
}

// Rate is a limit on starts: at most Limit in any Period. The zero value
// is no limit.
type Rate struct {
	Limit  int
	Period time.Duration
}

// ReadyNote tells listeners that N jobs needing Requires became claimable
// in Queue of Namespace ("" is the default namespace), now or at At (unix
// milliseconds; 0 = now).
type ReadyNote struct {
	Namespace string   `json:"ns,omitempty"`
	Queue     string   `json:"q"`
	N         int      `json:"n"`
	Requires  []string `json:"r,omitempty"`
	At        int64    `json:"at,omitempty"`

	// Timed and Tries are the listener's own: a note that came due by a
	// timer, and how often it was re-armed.
	Timed bool `json:"-"`
	Tries int  `json:"-"`
}

// Room counts, per queue and per job type, the jobs that left running:
// room made where running jobs are limited. A name of a namespace other
// than the default one is kept as RoomKey makes it (AddIn).
type Room struct {
	Queues map[string]int `json:"q,omitempty"`
	Types  map[string]int `json:"t,omitempty"`
	// Namespaces counts room made in a namespace as a whole, by name: a
	// loosened MAXRUNNING.
	Namespaces map[string]int `json:"n,omitempty"`
}

// AddNamespace counts n jobs' room in namespace ns as a whole.
func (f *Room) AddNamespace(ns string, n int) {
	if f.Namespaces == nil {
		f.Namespaces = map[string]int{}
	}
	f.Namespaces[ns] += n
}

// Add counts n jobs of queue and of type typ (either may be empty).
func (f *Room) Add(queue, typ string, n int) {
	if queue != "" {
		if f.Queues == nil {
			f.Queues = map[string]int{}
		}
		f.Queues[queue] += n
	}
	if typ != "" {
		if f.Types == nil {
			f.Types = map[string]int{}
		}
		f.Types[typ] += n
	}
}

// AddIn counts n jobs of queue and of type typ of namespace ns.
func (f *Room) AddIn(ns, queue, typ string, n int) {
	f.Add(RoomKey(ns, queue), RoomKey(ns, typ), n)
}

// RoomKey is how a Room names a queue or a type of namespace ns: the name
// itself in the default namespace (as before namespaces), else the
// namespace, a NUL and the name. An empty name stays empty.
func RoomKey(ns, name string) string {
	if name == "" || ns == "" || ns == DefaultNamespace {
		return name
	}
	return ns + "\x00" + name
}

// SplitRoomKey is the namespace and the name a RoomKey names.
func SplitRoomKey(key string) (ns, name string) {
	if i := strings.IndexByte(key, 0); i >= 0 {
		return key[:i], key[i+1:]
	}
	return DefaultNamespace, key
}

// Merge adds o's counts to f.
func (f *Room) Merge(o Room) {
	for q, n := range o.Queues {
		f.Add(q, "", n)
	}
	for t, n := range o.Types {
		f.Add("", t, n)
	}
	for ns, n := range o.Namespaces {
		f.AddNamespace(ns, n)
	}
}

// Empty reports whether f counts nothing.
func (f Room) Empty() bool { return len(f.Queues) == 0 && len(f.Types) == 0 && len(f.Namespaces) == 0 }

// Schedule is a cron schedule.
type Schedule struct {
	// Namespace is the schedule's namespace, where its fires submit jobs;
	// its Name is unique only there.
	Namespace  string
	Name       string
	Cron       string
	Timezone   string
	Queue      string
	Job        JobTemplate
	Enabled    bool
	MaxCatchup int
	// NextFireAt is the first fire not yet submitted; nil when the spec
	// fires no more.
	NextFireAt *time.Time
	LastFireAt *time.Time
	Fires      int64
	Skipped    int64
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// JobTemplate is the job a schedule submits at each fire, with its defaults
// filled in: a NewJob without the id, queue and run time, which every fire
// supplies. Its JSON is what the schedules table keeps.
type JobTemplate struct {
	Type                string          `json:"type,omitempty"`
	Requires            []string        `json:"requires"`
	Plan                json.RawMessage `json:"plan,omitempty"`
	Inputs              json.RawMessage `json:"inputs,omitempty"`
	Payload             json.RawMessage `json:"payload,omitempty"`
	Priority            int             `json:"priority"`
	MaxAttempts         int             `json:"max_attempts"`
	RetryBackoffSeconds float64         `json:"retry_backoff_seconds"`
	TimeoutSeconds      int             `json:"timeout_seconds"`
	FairKey             string          `json:"fair_key,omitempty"`
	FairWeight          int             `json:"fair_weight,omitempty"`
}

// CronSpec is a parsed cron text in its time zone.
type CronSpec interface {
	// Next is the first fire after t.
	Next(t time.Time) time.Time
}

// KeyspaceJob is a job as the job:<id> and job:<id>:worker keys show it.
type KeyspaceJob struct {
	ID string
	// Holder is the worker running the job, "" unless the job is running
	// and its deadline (its timeout) has not passed.
	Holder string
	// UntilDeadline is deadline_at − now() by the database's clock when
	// Holder is set and the job has a deadline; nil otherwise.
	UntilDeadline *time.Duration
}

// KeyspaceWorker is a worker as the worker:<id>:… keys and the
// capability:<name>:workers sets show it.
type KeyspaceWorker struct {
	ID              string
	State           string
	Capabilities    []string
	HasStats        bool
	LastHeartbeatAt time.Time
	// SinceHeartbeat is now() − last_heartbeat_at by the database's clock,
	// the one every node shares.
	SinceHeartbeat time.Duration
	// Metadata and Stats are filled by KeyspaceWorker only.
	Metadata json.RawMessage
	Stats    json.RawMessage
}

// KeyspaceJobsParams selects a page of job ids in id order.
type KeyspaceJobsParams struct {
	IDPrefix string
	// RunningOnly lists only running jobs (for patterns that can match
	// nothing but job:<id>:worker keys).
	RunningOnly bool
	// After resumes a listing after the last id of the previous page; when
	// it is empty, Offset rows are skipped instead.
	After  string
	Offset int64
	Limit  int
}
