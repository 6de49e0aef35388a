package engine

import (
	"github.com/agq/agq/engine/api"
)

// The records the engine's callers read and write: the API's, named here
// for the engine's own code and tests. The store keeps its own copies;
// convert.go turns one into the other at the engine's edge.
type (
	Job            = api.Job
	NewJob         = api.NewJob
	JobState       = api.JobState
	JobTemplate    = api.JobTemplate
	SubmitResult   = api.SubmitResult
	Worker         = api.Worker
	Queue          = api.Queue
	QueueSummary   = api.QueueSummary
	Limits         = api.Limits
	LimitsChange   = api.LimitsChange
	Rate           = api.Rate
	Schedule       = api.Schedule
	MinuteCount    = api.MinuteCount
	ReadyNote      = api.ReadyNote
	Freed          = api.Freed
	Moved          = api.Moved
	KeyspaceJob    = api.KeyspaceJob
	KeyspaceWorker = api.KeyspaceWorker

	JobListParams      = api.JobListParams
	QueueJobsParams    = api.QueueJobsParams
	FailedJobsParams   = api.FailedJobsParams
	WorkerPageParams   = api.WorkerPageParams
	KeyspaceJobsParams = api.KeyspaceJobsParams
)

// Job statuses.
const (
	StatusQueued    = api.StatusQueued
	StatusScheduled = api.StatusScheduled
	StatusRunning   = api.StatusRunning
	StatusRetrying  = api.StatusRetrying
	StatusCompleted = api.StatusCompleted
	StatusFailed    = api.StatusFailed
	StatusCancelled = api.StatusCancelled
	// StatusSnoozed is a report's status, never a job's: the job goes back
	// to scheduled.
	StatusSnoozed = api.StatusSnoozed
)

// Worker states.
const (
	WorkerActive       = api.WorkerActive
	WorkerDraining     = api.WorkerDraining
	WorkerDead         = api.WorkerDead
	WorkerUnregistered = api.WorkerUnregistered
)

// MaxLogLines bounds the lines kept of one attempt's log.
const MaxLogLines = api.MaxLogLines

// IsTerminal reports whether a job in this status never moves again
// without JOB.RETRY.
func IsTerminal(status string) bool { return api.IsTerminal(status) }
