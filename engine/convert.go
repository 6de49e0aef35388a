package engine

import (
	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/store"
)

// The store's records and the API's have the same fields (convert_test.go
// fails when they drift apart). Records of builtin fields convert as Go
// struct conversions, which cost nothing; those holding another record
// are copied field by field; slices are converted into slices made once
// at their final length.

func apiJob(j store.Job) api.Job {
	return api.Job{
		ID: j.ID, Seq: j.Seq, Queue: j.Queue, Type: j.Type, Requires: j.Requires,
		Plan: j.Plan, Inputs: j.Inputs, Payload: j.Payload, Priority: j.Priority, Status: j.Status,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, RetryBackoffSeconds: j.RetryBackoffSeconds,
		TimeoutSeconds: j.TimeoutSeconds, RunAt: j.RunAt, UniqueKey: j.UniqueKey, WorkerID: j.WorkerID,
		Delivery: j.Delivery, AckDeadline: j.AckDeadline, LeaseExpiresAt: j.LeaseExpiresAt, DeadlineAt: j.DeadlineAt,
		CancelRequested: j.CancelRequested, Progress: j.Progress, Result: j.Result, Errors: j.Errors,
		CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt, UpdatedAt: j.UpdatedAt,
		Snoozes: j.Snoozes, Steps: j.Steps, After: j.After, OnParentFailure: j.OnParentFailure,
		PendingParents: j.PendingParents, Parents: apiParents(j.Parents), ParentsTruncated: j.ParentsTruncated,
		TraceParent: j.TraceParent, TraceState: j.TraceState,
	}
}

func apiJobs(jobs []store.Job) []api.Job {
	if jobs == nil {
		return nil
	}
	out := make([]api.Job, len(jobs))
	for i := range jobs {
		out[i] = apiJob(jobs[i])
	}
	return out
}

func apiParents(m map[string]store.ParentState) map[string]api.ParentState {
	if m == nil {
		return nil
	}
	out := make(map[string]api.ParentState, len(m))
	for id, p := range m {
		out[id] = api.ParentState(p)
	}
	return out
}

func storeNewJob(j api.NewJob) store.NewJob {
	return store.NewJob{
		ID: j.ID, Queue: j.Queue, Type: j.Type, Requires: j.Requires, Plan: j.Plan, Inputs: j.Inputs,
		Payload: j.Payload, Priority: j.Priority, MaxAttempts: j.MaxAttempts,
		RetryBackoffSeconds: j.RetryBackoffSeconds, TimeoutSeconds: j.TimeoutSeconds, RunAt: j.RunAt,
		UniqueKey: j.UniqueKey, After: j.After, OnParentFailure: j.OnParentFailure,
		TraceParent: j.TraceParent, TraceState: j.TraceState,
	}
}

func storeNewJobs(jobs []api.NewJob) []store.NewJob {
	out := make([]store.NewJob, len(jobs))
	for i := range jobs {
		out[i] = storeNewJob(jobs[i])
	}
	return out
}

func apiSubmitResult(r store.SubmitResult) api.SubmitResult {
	out := api.SubmitResult{ID: r.ID, Created: r.Created, Queue: r.Queue, Same: r.Same, Status: r.Status}
	if r.Delivered != nil {
		j := apiJob(*r.Delivered)
		out.Delivered = &j
	}
	return out
}

func apiSubmitResults(res []store.SubmitResult) []api.SubmitResult {
	if res == nil {
		return nil
	}
	out := make([]api.SubmitResult, len(res))
	for i := range res {
		out[i] = apiSubmitResult(res[i])
	}
	return out
}

func apiJobStates(states []store.JobState) []api.JobState {
	if states == nil {
		return nil
	}
	out := make([]api.JobState, len(states))
	for i := range states {
		out[i] = api.JobState(states[i])
	}
	return out
}

func apiWorkers(ws []store.Worker) []api.Worker {
	if ws == nil {
		return nil
	}
	out := make([]api.Worker, len(ws))
	for i := range ws {
		out[i] = api.Worker(ws[i])
	}
	return out
}

func apiLimits(l store.Limits) api.Limits {
	return api.Limits{MaxRunning: l.MaxRunning, Rate: api.Rate(l.Rate)}
}

func storeLimitsChange(c api.LimitsChange) store.LimitsChange {
	out := store.LimitsChange{MaxRunning: c.MaxRunning}
	if c.Rate != nil {
		r := store.Rate(*c.Rate)
		out.Rate = &r
	}
	return out
}

func apiSchedule(s store.Schedule) api.Schedule {
	return api.Schedule{
		Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, Queue: s.Queue, Job: api.JobTemplate(s.Job),
		Enabled: s.Enabled, MaxCatchup: s.MaxCatchup, NextFireAt: s.NextFireAt, LastFireAt: s.LastFireAt,
		Fires: s.Fires, Skipped: s.Skipped, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

func storeSchedule(s api.Schedule) store.Schedule {
	return store.Schedule{
		Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, Queue: s.Queue, Job: store.JobTemplate(s.Job),
		Enabled: s.Enabled, MaxCatchup: s.MaxCatchup, NextFireAt: s.NextFireAt, LastFireAt: s.LastFireAt,
		Fires: s.Fires, Skipped: s.Skipped, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

func apiSchedules(ss []store.Schedule) []api.Schedule {
	if ss == nil {
		return nil
	}
	out := make([]api.Schedule, len(ss))
	for i := range ss {
		out[i] = apiSchedule(ss[i])
	}
	return out
}

func apiQueues(qs []store.Queue) []api.Queue {
	if qs == nil {
		return nil
	}
	out := make([]api.Queue, len(qs))
	for i := range qs {
		out[i] = api.Queue(qs[i])
	}
	return out
}

func apiQueueSummaries(qs []store.QueueSummary) []api.QueueSummary {
	if qs == nil {
		return nil
	}
	out := make([]api.QueueSummary, len(qs))
	for i := range qs {
		out[i] = api.QueueSummary(qs[i])
	}
	return out
}

func apiMinuteCounts(ms []store.MinuteCount) []api.MinuteCount {
	if ms == nil {
		return nil
	}
	out := make([]api.MinuteCount, len(ms))
	for i := range ms {
		out[i] = api.MinuteCount(ms[i])
	}
	return out
}

func apiKeyspaceJobs(js []store.KeyspaceJob) []api.KeyspaceJob {
	if js == nil {
		return nil
	}
	out := make([]api.KeyspaceJob, len(js))
	for i := range js {
		out[i] = api.KeyspaceJob(js[i])
	}
	return out
}

func apiKeyspaceWorkers(ws []store.KeyspaceWorker) []api.KeyspaceWorker {
	if ws == nil {
		return nil
	}
	out := make([]api.KeyspaceWorker, len(ws))
	for i := range ws {
		out[i] = api.KeyspaceWorker(ws[i])
	}
	return out
}

func apiSteps(steps []store.Step) []api.Step {
	if steps == nil {
		return nil
	}
	out := make([]api.Step, len(steps))
	for i := range steps {
		out[i] = api.Step(steps[i])
	}
	return out
}

func apiReadyNotes(notes []store.ReadyNote) []api.ReadyNote {
	if notes == nil {
		return nil
	}
	out := make([]api.ReadyNote, len(notes))
	for i := range notes {
		out[i] = api.ReadyNote(notes[i])
	}
	return out
}

func storeStepBegin(p api.StepBeginParams) store.StepBeginParams {
	return store.StepBeginParams{StepParams: store.StepParams(p.StepParams), Input: p.Input,
		MaxAttempts: p.MaxAttempts, BackoffSeconds: p.BackoffSeconds}
}

func storeStepFail(p api.StepFailParams) store.StepFailParams {
	return store.StepFailParams{StepParams: store.StepParams(p.StepParams), Message: p.Message,
		NonRetryable: p.NonRetryable, RetryAfter: p.RetryAfter}
}

func storeStepSleep(p api.StepSleepParams) store.StepSleepParams {
	return store.StepSleepParams{StepParams: store.StepParams(p.StepParams), For: p.For}
}

func storeJob(j api.Job) store.Job {
	return store.Job{
		ID: j.ID, Seq: j.Seq, Queue: j.Queue, Type: j.Type, Requires: j.Requires,
		Plan: j.Plan, Inputs: j.Inputs, Payload: j.Payload, Priority: j.Priority, Status: j.Status,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, RetryBackoffSeconds: j.RetryBackoffSeconds,
		TimeoutSeconds: j.TimeoutSeconds, RunAt: j.RunAt, UniqueKey: j.UniqueKey, WorkerID: j.WorkerID,
		Delivery: j.Delivery, AckDeadline: j.AckDeadline, LeaseExpiresAt: j.LeaseExpiresAt, DeadlineAt: j.DeadlineAt,
		CancelRequested: j.CancelRequested, Progress: j.Progress, Result: j.Result, Errors: j.Errors,
		CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt, UpdatedAt: j.UpdatedAt,
		Snoozes: j.Snoozes, Steps: j.Steps, After: j.After, OnParentFailure: j.OnParentFailure,
		PendingParents: j.PendingParents, Parents: storeParents(j.Parents), ParentsTruncated: j.ParentsTruncated,
		TraceParent: j.TraceParent, TraceState: j.TraceState,
	}
}

func storeJobs(jobs []api.Job) []store.Job {
	out := make([]store.Job, len(jobs))
	for i := range jobs {
		out[i] = storeJob(jobs[i])
	}
	return out
}

func storeParents(m map[string]api.ParentState) map[string]store.ParentState {
	if m == nil {
		return nil
	}
	out := make(map[string]store.ParentState, len(m))
	for id, p := range m {
		out[id] = store.ParentState(p)
	}
	return out
}
