package engine

import (
	"context"
	"time"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/store"
)

// The reads change nothing: each asks the store and converts its answer.

var _ api.Engine = (*Engine)(nil)

func (e *Engine) JobGet(ctx context.Context, id string) (api.Job, error) {
	j, err := e.store.JobGet(ctx, id)
	return apiJob(j), apiError(err)
}

func (e *Engine) JobList(ctx context.Context, p api.JobListParams) ([]api.Job, error) {
	jobs, err := e.store.JobList(ctx, store.JobListParams(p))
	return apiJobs(jobs), apiError(err)
}

func (e *Engine) JobStates(ctx context.Context, ids []string) ([]api.JobState, error) {
	states, err := e.store.JobStates(ctx, ids)
	return apiJobStates(states), apiError(err)
}

func (e *Engine) JobLogs(ctx context.Context, id string, attempt int) ([]string, int, error) {
	lines, n, err := e.store.JobLogs(ctx, id, attempt)
	return lines, n, apiError(err)
}

func (e *Engine) JobChildren(ctx context.Context, id string, limit int) ([]api.JobState, error) {
	states, err := e.store.JobChildren(ctx, id, limit)
	return apiJobStates(states), apiError(err)
}

func (e *Engine) JobCounts(ctx context.Context) (map[string]int64, error) {
	counts, err := e.store.JobCounts(ctx)
	return counts, apiError(err)
}

func (e *Engine) RunningJobs(ctx context.Context, limit int) ([]api.Job, error) {
	jobs, err := e.store.RunningJobs(ctx, limit)
	return apiJobs(jobs), apiError(err)
}

func (e *Engine) FailedJobs(ctx context.Context, p api.FailedJobsParams) ([]api.Job, error) {
	jobs, err := e.store.FailedJobs(ctx, store.FailedJobsParams(p))
	return apiJobs(jobs), apiError(err)
}

func (e *Engine) FinishedPerMinute(ctx context.Context, since time.Time, countCap int) ([]api.MinuteCount, error) {
	counts, err := e.store.FinishedPerMinute(ctx, since, countCap)
	return apiMinuteCounts(counts), apiError(err)
}

func (e *Engine) QueueStats(ctx context.Context, name string) ([]api.Queue, error) {
	qs, err := e.store.QueueStats(ctx, name)
	return apiQueues(qs), apiError(err)
}

func (e *Engine) QueueDepth(ctx context.Context, queue string) (int64, error) {
	n, err := e.store.QueueDepth(ctx, queue)
	return n, apiError(err)
}

func (e *Engine) QueuePeek(ctx context.Context, queue string, offset, limit int64) ([]api.Job, error) {
	jobs, err := e.store.QueuePeek(ctx, queue, offset, limit)
	return apiJobs(jobs), apiError(err)
}

func (e *Engine) QueueJobs(ctx context.Context, p api.QueueJobsParams) ([]api.Job, error) {
	jobs, err := e.store.QueueJobs(ctx, store.QueueJobsParams(p))
	return apiJobs(jobs), apiError(err)
}

func (e *Engine) QueueSummaries(ctx context.Context, maxQueues, countCap int) ([]api.QueueSummary, error) {
	qs, err := e.store.QueueSummaries(ctx, maxQueues, countCap)
	return apiQueueSummaries(qs), apiError(err)
}

func (e *Engine) QueueLimitsGet(ctx context.Context, name string) (api.Limits, error) {
	l, err := e.store.QueueLimitsGet(ctx, name)
	return apiLimits(l), apiError(err)
}

func (e *Engine) TypeLimitsGet(ctx context.Context, name string) (api.Limits, error) {
	l, err := e.store.TypeLimitsGet(ctx, name)
	return apiLimits(l), apiError(err)
}

func (e *Engine) WorkerGet(ctx context.Context, id string) (api.Worker, error) {
	w, err := e.store.WorkerGet(ctx, id)
	return api.Worker(w), apiError(err)
}

func (e *Engine) WorkerOfPrincipal(ctx context.Context, principal string) (api.Worker, error) {
	w, err := e.store.WorkerOfPrincipal(ctx, principal)
	return api.Worker(w), apiError(err)
}

func (e *Engine) WorkerList(ctx context.Context, state string) ([]api.Worker, error) {
	ws, err := e.store.WorkerList(ctx, state)
	return apiWorkers(ws), apiError(err)
}

func (e *Engine) WorkerPage(ctx context.Context, p api.WorkerPageParams) ([]api.Worker, error) {
	ws, err := e.store.WorkerPage(ctx, store.WorkerPageParams(p))
	return apiWorkers(ws), apiError(err)
}

func (e *Engine) WorkerCounts(ctx context.Context) (map[string]int64, error) {
	counts, err := e.store.WorkerCounts(ctx)
	return counts, apiError(err)
}

func (e *Engine) WorkersHeldJobs(ctx context.Context, workers []string, perWorker int) (map[string][]string, error) {
	held, err := e.store.WorkersHeldJobs(ctx, workers, perWorker)
	return held, apiError(err)
}

func (e *Engine) ScheduleGet(ctx context.Context, name string) (api.Schedule, error) {
	sc, err := e.store.ScheduleGet(ctx, name)
	return apiSchedule(sc), apiError(err)
}

func (e *Engine) ScheduleList(ctx context.Context) ([]api.Schedule, error) {
	ss, err := e.store.ScheduleList(ctx)
	return apiSchedules(ss), apiError(err)
}

func (e *Engine) Leader(ctx context.Context) (string, time.Time, error) {
	node, since, err := e.store.Leader(ctx)
	return node, since, apiError(err)
}

func (e *Engine) KeyspaceJobs(ctx context.Context, p api.KeyspaceJobsParams) ([]api.KeyspaceJob, error) {
	js, err := e.store.KeyspaceJobs(ctx, store.KeyspaceJobsParams(p))
	return apiKeyspaceJobs(js), apiError(err)
}

func (e *Engine) KeyspaceJobProbe(ctx context.Context, id string) (api.KeyspaceJob, error) {
	j, err := e.store.KeyspaceJobProbe(ctx, id)
	return api.KeyspaceJob(j), apiError(err)
}

func (e *Engine) KeyspaceJobCounts(ctx context.Context) (jobs, held int64, err error) {
	jobs, held, err = e.store.KeyspaceJobCounts(ctx)
	return jobs, held, apiError(err)
}

func (e *Engine) KeyspaceQueues(ctx context.Context, namePrefix string) ([]string, error) {
	qs, err := e.store.KeyspaceQueues(ctx, namePrefix)
	return qs, apiError(err)
}

func (e *Engine) KeyspaceWorker(ctx context.Context, id string) (api.KeyspaceWorker, error) {
	w, err := e.store.KeyspaceWorker(ctx, id)
	return api.KeyspaceWorker(w), apiError(err)
}

func (e *Engine) KeyspaceWorkers(ctx context.Context, idPrefix string) ([]api.KeyspaceWorker, error) {
	ws, err := e.store.KeyspaceWorkers(ctx, idPrefix)
	return apiKeyspaceWorkers(ws), apiError(err)
}

func (e *Engine) KeyspaceCapabilityMembers(ctx context.Context, capability string) ([]string, error) {
	ids, err := e.store.KeyspaceCapabilityMembers(ctx, capability)
	return ids, apiError(err)
}
