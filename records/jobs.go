package records

import (
	"encoding/json"
	"time"
)

// Job statuses.
const (
	StatusQueued    = "queued"
	StatusScheduled = "scheduled"
	StatusRunning   = "running"
	StatusRetrying  = "retrying"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	// StatusSnoozed is a report's status, never a job's: the job goes back
	// to scheduled.
	StatusSnoozed = "snoozed"
	// StatusPending is a job waiting for its parents.
	StatusPending = "pending"
	// StatusAwaiting is a job whose step waits for a signal or other jobs
	// (STEP.WAIT): it holds no worker until the wait ends.
	StatusAwaiting = "awaiting"
)

// Statuses are a job's statuses in the order listings show them.
var Statuses = []string{StatusPending, StatusQueued, StatusScheduled, StatusRunning, StatusRetrying, StatusAwaiting,
	StatusCompleted, StatusFailed, StatusCancelled}

// IsTerminal reports whether a job in this status never moves again
// without JOB.RETRY.
func IsTerminal(status string) bool {
	return status == StatusCompleted || status == StatusFailed || status == StatusCancelled
}

// What a parent's failure or cancellation does to a pending child.
const (
	ParentFailureCancel = "cancel"
	ParentFailureRun    = "run"
)

// Limits of after.
const (
	// MaxParents bounds one job's after.
	MaxParents = 10000
	// MaxAfterEntries bounds the after entries of one submission.
	MaxAfterEntries = 100000
)

// MaxLogLines bounds the lines kept of one attempt's log.
const MaxLogLines = 1000

// MaxGroup is the most requests one statement serves together: a group's
// arrays and its reply fan-out (for pops, the jobs they ask for).
const MaxGroup = 500

// Job is a job as stored.
type Job struct {
	// Namespace is the namespace the job belongs to; its ID is unique
	// only there.
	Namespace           string
	ID                  string
	Seq                 int64 // submission order
	Queue               string
	Type                string
	Requires            []string
	Plan                json.RawMessage
	Inputs              json.RawMessage
	Payload             json.RawMessage
	Priority            int
	Status              string
	Attempt             int
	MaxAttempts         int
	RetryBackoffSeconds float64
	TimeoutSeconds      int
	RunAt               time.Time
	UniqueKey           *string
	WorkerID            *string
	// Delivery is the token of the latest delivery.
	Delivery        *string
	AckDeadline     *time.Time
	LeaseExpiresAt  *time.Time
	DeadlineAt      *time.Time
	CancelRequested bool
	Progress        json.RawMessage
	Result          json.RawMessage
	Errors          json.RawMessage
	CreatedAt       time.Time
	StartedAt       *time.Time
	FinishedAt      *time.Time
	UpdatedAt       time.Time
	// Snoozes counts the times its holder put it back for later.
	Snoozes int
	// Steps counts its steps and sleeps; only JobGet reads it.
	Steps int
	// After names the job's parents, nil for a job without any.
	After           []string
	OnParentFailure string
	// PendingParents counts the parents not yet ended (JobGet only).
	PendingParents int
	// Parents are the parents' statuses and results (a delivery's only);
	// ParentsTruncated says the results did not fit.
	Parents          map[string]ParentState
	ParentsTruncated bool
	// TraceParent and TraceState are the job's W3C trace context; a
	// delivery's only.
	TraceParent, TraceState string
	// FairKey and FairWeight place the job among its queue's keys (the
	// key "" for jobs without one).
	FairKey    string
	FairWeight int
	// SubmittedBy is the worker principal whose key submitted the job, ""
	// when another kind of key did (JobGet only).
	SubmittedBy string
}

// ParentState is a parent as its child sees it.
type ParentState struct {
	Status string          `json:"status"`
	Result json.RawMessage `json:"result"`
}

// The bounds of a job's fair_key (bytes) and fair_weight.
const (
	MaxFairKey    = 128
	MaxFairWeight = 1000
)

// NewJob is a validated submission.
type NewJob struct {
	// Namespace is the namespace the job is submitted in (the engine's to
	// set, from the submitting key's).
	Namespace string
	ID        string
	// GeneratedID is set when agq made ID up (a UUIDv7): no job can hold
	// it already, so its submission looks for none in history.
	GeneratedID         bool
	Queue               string
	Type                string
	Requires            []string
	Plan                json.RawMessage
	Inputs              json.RawMessage
	Payload             json.RawMessage
	Priority            int
	MaxAttempts         int
	RetryBackoffSeconds float64
	TimeoutSeconds      int
	// RunAt is the zero time for "now".
	RunAt     time.Time
	UniqueKey string
	// After names the jobs that must end before this one runs; with
	// OnParentFailure (ParentFailureCancel when empty, ParentFailureRun)
	// saying what a parent's failure or cancellation does to it.
	After           []string
	OnParentFailure string
	// FairKey (none: "") and FairWeight (0: 1) share the queue among
	// keys in proportion to their weights.
	FairKey    string
	FairWeight int
	// TraceParent and TraceState are the W3C trace context the job is
	// stored with; not part of its contents (a re-sent job with another
	// one is the same job).
	TraceParent, TraceState string
	// SubmittedBy is the worker principal whose key submits the job (a
	// parent spawning children), "" for any other key; not part of its
	// contents. Jobs that set it go in by the statement that sorts out
	// every job, never the fast ways in.
	SubmittedBy string
	// Hand, when set, offers the job to a worker blocked in a pop: the
	// engine's to set, never the caller's.
	Hand *Handoff
}

// Handoff offers a job due now to a worker waiting for one: the job is
// inserted running for it, as a claim would leave it, when the worker may
// take it there and then — ACTIVE, able to run it, the queue holding no
// job claimable before it, no limits on the queue or on the job's type, the
// queue not paused. Otherwise the job is inserted as usual. One
// transaction instead of an insert and a claim.
type Handoff struct {
	Worker     string
	AckTimeout time.Duration
	Lease      time.Duration
}

// SubmitResult is the outcome of one submitted job.
type SubmitResult struct {
	ID      string
	Created bool
	Queue   string
	// Same is false when the id was taken by a different job: the
	// submission is refused, never silently merged.
	Same bool
	// Delivered is the job as handed to a worker waiting in a pop,
	// running; nil when it was not.
	Delivered *Job
	// Status is set when the job was created waiting for its parents
	// (pending) or cancelled because one of them failed: not claimable.
	Status string
}

// Pushed is one LPUSH whose jobs committed: the jobs and their results.
type Pushed struct {
	Jobs    []NewJob
	Results []SubmitResult
}

// JobState is where a job stands: what a status message says of it.
type JobState struct {
	Namespace         string
	ID, Queue, Status string
	Attempt           int
	WorkerID          *string
}

// Report is one JOB.UPDATE, read and checked: the job, the reporting
// worker (or an admin), the status reported, the delivery it is about,
// and the document as sent (progress or result).
type Report struct {
	// Namespace is the reporter's namespace, the job's.
	Namespace string
	ID        string
	WorkerID  string // the reporting worker; ignored when Admin
	Admin     bool
	// Status is "", "running", "completed", "failed", "cancelled" or
	// "snoozed".
	Status    string
	Error     string
	Retryable bool
	// Attempt is the delivery the report is about; 0 when not given.
	Attempt int
	// Delivery is the token of the delivery the report is about ("" when
	// not given): unlike the attempt, no later delivery repeats it.
	Delivery string
	// Raw is the update as sent: progress for running updates, the result
	// for completed ones.
	Raw json.RawMessage
	// SnoozeFor is how long a snoozed job waits; MaxSnoozes how many
	// snoozes a job may have before the next fails it.
	SnoozeFor  time.Duration
	MaxSnoozes int
}

// JobListParams filters JOB.LIST; Cursor is the last id of the previous page.
type JobListParams struct {
	Queue, Status, Type, Cursor string
	Limit                       int
}

// FailedJobsParams pages through failed jobs of every queue, the most
// recently failed first.
type FailedJobsParams struct {
	// BeforeFinished and BeforeID are the last job of the previous page
	// (zero for the first page).
	BeforeFinished time.Time
	BeforeID       string
	Limit          int
}

// MinuteCount is how many jobs finished in one minute, each count capped.
type MinuteCount struct {
	Minute    time.Time
	Completed int64
	Failed    int64
}

// JobSpec is a job as a submission asks for it: the JOB.SUBMIT document,
// its fields not yet checked, nil where it leaves the default.
type JobSpec struct {
	JobID               string          `json:"job_id"`
	Queue               string          `json:"queue"`
	Type                string          `json:"type"`
	Requires            *[]string       `json:"requires"`
	Plan                json.RawMessage `json:"plan"`
	Inputs              json.RawMessage `json:"inputs"`
	Payload             json.RawMessage `json:"payload"`
	Priority            int             `json:"priority"`
	MaxAttempts         *int            `json:"max_attempts"`
	RetryBackoffSeconds *float64        `json:"retry_backoff_seconds"`
	TimeoutSeconds      *int            `json:"timeout_seconds"`
	RunAt               *time.Time      `json:"run_at"`
	DelaySeconds        *float64        `json:"delay_seconds"`
	UniqueKey           string          `json:"unique_key"`
	After               *[]string       `json:"after"`
	OnParentFailure     string          `json:"on_parent_failure"`
	FairKey             *string         `json:"fair_key"`
	FairWeight          *int            `json:"fair_weight"`
	// TraceParent and TraceState are the submitter's W3C trace context:
	// not part of the job's contents.
	TraceParent string `json:"traceparent"`
	TraceState  string `json:"tracestate"`
}

// GraphNode is a job of a job's graph: its ancestors and descendants
// through after, with its own parents (After, as stored).
type GraphNode struct {
	ID, Queue, Status string
	After             []string
}

// JobGraph is a job's graph, bounded: the job, then up to a limit of its
// ancestors and of its descendants, nearest first. MoreAncestors and
// MoreDescendants say the limit cut one side short.
type JobGraph struct {
	Nodes                          []GraphNode
	MoreAncestors, MoreDescendants bool
}
