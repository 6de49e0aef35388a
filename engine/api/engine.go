package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agq/agq/records"
)

// Engine is what the wire layer and the dashboard ask of the job engine:
// every transition, and the reads that change nothing. package engine
// implements it.
type Engine interface {
	Reads

	// In is the engine acting in namespace ns; Namespace names the one it
	// acts in.
	In(ns string) Engine
	Namespace() string

	// Jobs.
	NewJob(spec records.JobSpec, defaultQueue string) (records.NewJob, error)
	SubmitBatch(ctx context.Context, jobs []records.NewJob) ([]records.SubmitResult, error)
	// Submit, Report, StepBegin and StepComplete join their groups at
	// once and answer how to await their outcomes, so that a pipeline of
	// them shares commits.
	Submit(job records.NewJob) (wait func(context.Context) (records.SubmitResult, error))
	Push(ctx context.Context, queue string, jobs []records.NewJob) (int64, error)
	PushDepths(ctx context.Context, queue string, pushes []records.Pushed) ([]int64, error)
	Claim(ctx context.Context, w records.Worker, queues []string, limit int) (string, []records.Job, error)
	PopWaiting(ctx context.Context, w records.Worker, refresh func() (records.Worker, error), queues []string, limit int, wait Wait) (string, []records.Job, error)
	WaitJob(ctx context.Context, id string, wait JobWait) (records.Job, bool, error)
	Report(p records.Report) (wait func(context.Context) error)
	CancelJob(ctx context.Context, id string) error
	CancelJobCascade(ctx context.Context, id string) error
	RetryJob(ctx context.Context, id string) error
	RetryJobFrom(ctx context.Context, id, stepID string) error
	AppendLog(ctx context.Context, id, worker, channel string, line []byte) error
	JobParents(ctx context.Context, worker, id, cursor string) (page map[string]records.ParentState, next string, err error)

	// Steps.
	StepBegin(p records.StepBeginParams) (wait func(context.Context) (records.StepBeginResult, error))
	StepComplete(p records.StepParams, output json.RawMessage, next *records.StepBeginParams) (wait func(context.Context) (records.StepBeginResult, error))
	StepFail(ctx context.Context, p records.StepFailParams) (records.StepFailResult, error)
	StepSleep(ctx context.Context, p records.StepSleepParams) (records.StepSleepResult, error)
	JobSteps(ctx context.Context, p records.JobStepsParams) ([]records.Step, error)
	StepWait(ctx context.Context, p records.StepWaitParams) (records.StepWaitResult, error)
	JobSignal(ctx context.Context, p records.SignalParams) error
	JobSignals(ctx context.Context, id string, limit int) ([]records.Signal, error)

	// Workers.
	ParseRegistration(raw []byte) (records.Worker, []string, error)
	RegisterWorker(ctx context.Context, w records.Worker, running []string) error
	Heartbeat(ctx context.Context, id string, stats []byte) (records.HeartbeatResult, error)
	UnregisterWorker(ctx context.Context, id string) error
	DrainWorker(ctx context.Context, id string) error
	CheckWorkerAccess(ctx context.Context, principal string, admin bool, id string) error
	// WorkerConnected and WorkerDisconnected count the connections
	// authenticated as a worker's principal: a worker none of whose
	// connections is left is soon lost.
	WorkerConnected(principal string)
	WorkerDisconnected(principal string)
	HeartbeatInterval() time.Duration

	// Queues and types.
	PauseQueue(ctx context.Context, name string, paused bool) error
	ConfigureQueue(ctx context.Context, name string, change records.LimitsChange) (records.Limits, error)
	ConfigureType(ctx context.Context, name string, change records.LimitsChange) (records.Limits, error)

	// Schedules.
	ParseCron(text, timezone string) (records.CronSpec, error)
	CreateSchedule(ctx context.Context, sc records.Schedule) error
	UpdateSchedule(ctx context.Context, name string, change func(*records.Schedule) error) error
	DeleteSchedule(ctx context.Context, name string) error
	PauseSchedule(ctx context.Context, name string) error
	ResumeSchedule(ctx context.Context, name string, catchup bool) error
	TriggerSchedule(ctx context.Context, name string) (string, error)

	// DashboardSecret is the dashboard's signing secret, shared by every
	// node: the one stored, or fresh when none is.
	// NamespaceExists says whether a namespace exists and is not being
	// deleted, as this node saw it within the last second.
	NamespaceExists(ctx context.Context, name string) (bool, error)
	NamespaceCreate(ctx context.Context, name string) error
	Namespaces(ctx context.Context) ([]records.Namespace, error)
	NamespaceConfig(ctx context.Context, name string, change *records.NamespaceChange) (records.Namespace, records.NamespaceCounts, error)
	NamespaceDelete(ctx context.Context, name string) error

	DashboardSecret(ctx context.Context, fresh []byte) ([]byte, error)
	// DropIdleConns closes the database pool's idle connections: a
	// command that failed on a broken one runs again on a fresh one.
	DropIdleConns()
}

// Reads are the queries that change nothing.
type Reads interface {
	JobGet(ctx context.Context, id string) (records.Job, error)
	JobList(ctx context.Context, p records.JobListParams) ([]records.Job, error)
	JobStates(ctx context.Context, ids []string) ([]records.JobState, error)
	JobLogs(ctx context.Context, id string, attempt int) ([]string, int, error)
	// JobChildren is a page of the jobs after job id, in id order, past
	// cursor ("" first).
	JobChildren(ctx context.Context, id, cursor string, limit int) ([]records.JobState, error)
	// JobGraph is job id with up to limit of its ancestors and of its
	// descendants, nearest first.
	JobGraph(ctx context.Context, id string, limit int) (records.JobGraph, error)
	JobCounts(ctx context.Context) (map[string]int64, error)
	RunningJobs(ctx context.Context, limit int) ([]records.Job, error)
	FailedJobs(ctx context.Context, p records.FailedJobsParams) ([]records.Job, error)
	FinishedPerMinute(ctx context.Context, since time.Time, countCap int) ([]records.MinuteCount, error)

	QueueStats(ctx context.Context, name string) ([]records.Queue, error)
	QueueNames(ctx context.Context) ([]string, error)
	QueueDepth(ctx context.Context, queue string) (int64, error)
	QueuePeek(ctx context.Context, queue string, offset, limit int64) ([]records.Job, error)
	QueueJobs(ctx context.Context, p records.QueueJobsParams) ([]records.Job, error)
	// QueueFairKeys lists a queue's named fair keys with the most jobs
	// ready, at most limit of them, with what each is running.
	QueueFairKeys(ctx context.Context, queue string, limit int) ([]records.FairKeyLoad, error)
	QueueSummaries(ctx context.Context, maxQueues, countCap int) ([]records.QueueSummary, error)
	QueueLimitsGet(ctx context.Context, name string) (records.Limits, error)
	TypeLimitsGet(ctx context.Context, name string) (records.Limits, error)

	WorkerGet(ctx context.Context, id string) (records.Worker, error)
	WorkerOfPrincipal(ctx context.Context, principal string) (records.Worker, error)
	WorkerList(ctx context.Context, state string) ([]records.Worker, error)
	WorkerPage(ctx context.Context, p records.WorkerPageParams) ([]records.Worker, error)
	WorkerCounts(ctx context.Context) (map[string]int64, error)
	WorkersHeldJobs(ctx context.Context, workers []string, perWorker int) (map[string][]string, error)

	ScheduleGet(ctx context.Context, name string) (records.Schedule, error)
	ScheduleList(ctx context.Context) ([]records.Schedule, error)
	Leader(ctx context.Context) (string, time.Time, error)

	KeyspaceJobs(ctx context.Context, p records.KeyspaceJobsParams) ([]records.KeyspaceJob, error)
	KeyspaceJobProbe(ctx context.Context, id string) (records.KeyspaceJob, error)
	KeyspaceJobCounts(ctx context.Context) (jobs, held int64, err error)
	KeyspaceQueues(ctx context.Context, namePrefix string) ([]string, error)
	KeyspaceWorker(ctx context.Context, id string) (records.KeyspaceWorker, error)
	KeyspaceWorkers(ctx context.Context, idPrefix string) ([]records.KeyspaceWorker, error)
	KeyspaceCapabilityMembers(ctx context.Context, capability string) ([]string, error)
}

// A Wait is how a blocked pop waits, given by the wire layer: its client's
// connection parks, and wake-ups unpark it.
type Wait interface {
	// Next waits for a note on c (returned), the periodic re-check (nil),
	// or the end of the wait: done at the timeout, or err.
	Next(c <-chan records.ReadyNote) (note *records.ReadyNote, done bool, err error)
	// Out waits out the timeout, wake-ups aside.
	Out() error
	// Gone reports whether the client was seen leaving.
	Gone() bool
	// OnWake is what a wake-up must call besides filling its channel.
	OnWake() func()
}

// A JobWait is how a JOB.WAIT waits, given by the wire layer.
type JobWait interface {
	// Next waits for a signal on c or the periodic re-check (false), or
	// the end of the wait (true, or err).
	Next(c <-chan struct{}) (done bool, err error)
	OnWake() func()
}

// PopRecheck and WaitRecheck are how long a blocked command trusts
// wake-ups alone before it looks at the database again. A pop's queues
// are re-checked by the hub every 15 s for notes that were lost, so its
// own re-check is the last resort for a job beyond what the hub reads; a
// JOB.WAIT has only its own (one lookup by id) for a completion notice
// lost with the node that sent it.
const (
	PopRecheck  = 5 * time.Minute
	WaitRecheck = 15 * time.Second
)
