package engine

import (
	"context"
	"time"

	"github.com/agq/agq/store"
)

// The records the engine's callers read and write. They are the store's
// own, named here so that the wire layer and the dashboard depend on the
// engine alone.
type (
	Job            = store.Job
	NewJob         = store.NewJob
	JobState       = store.JobState
	JobTemplate    = store.JobTemplate
	SubmitResult   = store.SubmitResult
	Worker         = store.Worker
	Queue          = store.Queue
	QueueSummary   = store.QueueSummary
	Limits         = store.Limits
	LimitsChange   = store.LimitsChange
	Rate           = store.Rate
	Schedule       = store.Schedule
	MinuteCount    = store.MinuteCount
	ReadyNote      = store.ReadyNote
	Freed          = store.Freed
	Moved          = store.Moved
	KeyspaceJob    = store.KeyspaceJob
	KeyspaceWorker = store.KeyspaceWorker

	JobListParams      = store.JobListParams
	QueueJobsParams    = store.QueueJobsParams
	FailedJobsParams   = store.FailedJobsParams
	WorkerPageParams   = store.WorkerPageParams
	KeyspaceJobsParams = store.KeyspaceJobsParams
)

// Job statuses.
const (
	StatusQueued    = store.StatusQueued
	StatusScheduled = store.StatusScheduled
	StatusRunning   = store.StatusRunning
	StatusRetrying  = store.StatusRetrying
	StatusCompleted = store.StatusCompleted
	StatusFailed    = store.StatusFailed
	StatusCancelled = store.StatusCancelled
	// StatusSnoozed is a report's status, never a job's: the job goes back
	// to scheduled.
	StatusSnoozed = store.StatusSnoozed
)

// Worker states.
const (
	WorkerActive       = store.WorkerActive
	WorkerDraining     = store.WorkerDraining
	WorkerDead         = store.WorkerDead
	WorkerUnregistered = store.WorkerUnregistered
)

// MaxLogLines bounds the lines kept of one attempt's log.
const MaxLogLines = store.MaxLogLines

// IsTerminal reports whether a job in this status never moves again
// without JOB.RETRY.
func IsTerminal(status string) bool { return store.IsTerminal(status) }

// Reads are the queries that change nothing: the wire layer and the
// dashboard call them as they are.
type Reads interface {
	JobGet(ctx context.Context, id string) (Job, error)
	JobList(ctx context.Context, p JobListParams) ([]Job, error)
	JobStates(ctx context.Context, ids []string) ([]JobState, error)
	JobLogs(ctx context.Context, id string, attempt int) ([]string, int, error)
	JobChildren(ctx context.Context, id string, limit int) ([]JobState, error)
	JobCounts(ctx context.Context) (map[string]int64, error)
	RunningJobs(ctx context.Context, limit int) ([]Job, error)
	FailedJobs(ctx context.Context, p FailedJobsParams) ([]Job, error)
	FinishedPerMinute(ctx context.Context, since time.Time, countCap int) ([]MinuteCount, error)

	QueueStats(ctx context.Context, name string) ([]Queue, error)
	QueueDepth(ctx context.Context, queue string) (int64, error)
	QueuePeek(ctx context.Context, queue string, offset, limit int64) ([]Job, error)
	QueueJobs(ctx context.Context, p QueueJobsParams) ([]Job, error)
	QueueSummaries(ctx context.Context, maxQueues, countCap int) ([]QueueSummary, error)
	QueueLimitsGet(ctx context.Context, name string) (Limits, error)
	TypeLimitsGet(ctx context.Context, name string) (Limits, error)

	WorkerGet(ctx context.Context, id string) (Worker, error)
	WorkerOfPrincipal(ctx context.Context, principal string) (Worker, error)
	WorkerList(ctx context.Context, state string) ([]Worker, error)
	WorkerPage(ctx context.Context, p WorkerPageParams) ([]Worker, error)
	WorkerCounts(ctx context.Context) (map[string]int64, error)
	WorkersHeldJobs(ctx context.Context, workers []string, perWorker int) (map[string][]string, error)

	ScheduleGet(ctx context.Context, name string) (Schedule, error)
	ScheduleList(ctx context.Context) ([]Schedule, error)
	Leader(ctx context.Context) (string, time.Time, error)

	KeyspaceJobs(ctx context.Context, p KeyspaceJobsParams) ([]KeyspaceJob, error)
	KeyspaceJobProbe(ctx context.Context, id string) (KeyspaceJob, error)
	KeyspaceJobCounts(ctx context.Context) (jobs, held int64, err error)
	KeyspaceQueues(ctx context.Context, namePrefix string) ([]string, error)
	KeyspaceWorker(ctx context.Context, id string) (KeyspaceWorker, error)
	KeyspaceWorkers(ctx context.Context, idPrefix string) ([]KeyspaceWorker, error)
	KeyspaceCapabilityMembers(ctx context.Context, capability string) ([]string, error)
}
