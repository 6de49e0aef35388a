package records

import (
	"encoding/json"
	"time"
)

// MaxSteps is how many steps and sleeps one job may have.
const MaxSteps = 10000

// StepParams names the step a holder's call is about.
type StepParams struct {
	// Namespace is the job's namespace, the caller's (the engine's to
	// set): its JobID names a job only there.
	Namespace     string
	JobID, StepID string
	WorkerID      string // the calling worker; ignored when Admin
	Admin         bool
	// Delivery is the token of the delivery the call is about, "" when
	// not given.
	Delivery string
}

// StepBeginParams is one STEP.BEGIN.
type StepBeginParams struct {
	StepParams
	// Input is the step's input as sent, nil for none (JSON null).
	Input json.RawMessage
	// MaxAttempts and BackoffSeconds, when given, replace the step's.
	MaxAttempts    *int
	BackoffSeconds *float64
}

// StepBeginResult says whether to run the step: its attempt when it runs,
// its output when it completed before with an equal input.
type StepBeginResult struct {
	Execute bool
	Attempt int
	Output  json.RawMessage
}

// StepFailParams is one STEP.FAIL.
type StepFailParams struct {
	StepParams
	Message      string
	NonRetryable bool
	// RetryAfter, when given, replaces the step's backoff.
	RetryAfter *time.Duration
}

// StepFailResult is what a STEP.FAIL did: the job waits until RetryAt, or
// failed.
type StepFailResult struct {
	Retry   bool
	RetryAt time.Time
}

// StepSleepParams is one STEP.SLEEP.
type StepSleepParams struct {
	StepParams
	For time.Duration
}

// StepSleepResult is what a STEP.SLEEP did: the job sleeps until WakeAt, or
// it woke in an earlier delivery and the worker carries on.
type StepSleepResult struct {
	Sleeping bool
	WakeAt   time.Time
}

// Limits of waits and signals.
const (
	// MaxSignals bounds the signals one job holds.
	MaxSignals = 10000
	// MaxAwaited bounds the jobs one STEP.WAIT JOBS names.
	MaxAwaited = 10000
)

// SignalParams is one JOB.SIGNAL.
type SignalParams struct {
	JobID, Name string
	Payload     json.RawMessage
	// Token, when given, makes a signal sent again one signal.
	Token string
}

// SignalResult is what a JOB.SIGNAL did: whether it stored a new signal,
// and the wait it ended, if any.
type SignalResult struct {
	Stored bool
	Woke   string // the step id of the wait it ended
}

// Signal is a signal stored for a job, as the dashboard shows it.
type Signal struct {
	Name    string
	Payload json.RawMessage
	// TakenBy is the wait that took it, nil while none has.
	TakenBy *string
	At      time.Time
}

// StepWaitParams is one STEP.WAIT: for the signal Signal, or for the jobs
// Jobs, until Timeout (0: no deadline).
type StepWaitParams struct {
	StepParams
	Signal  string
	Jobs    []string
	Timeout time.Duration
	// ResultBudget bounds the awaited jobs' results in the output, bytes.
	ResultBudget int64
}

// StepWaitResult is what a STEP.WAIT did: the job awaits until Deadline
// (nil: none), or the wait ended with Output.
type StepWaitResult struct {
	Awaiting bool
	Deadline *time.Time
	Output   json.RawMessage
}

// Step is a step as JOB.STEPS shows it.
type Step struct {
	StepID, Kind, Status string
	Attempts             int
	Input, Output        json.RawMessage
	Errors               json.RawMessage
	BeganAt              time.Time
	CompletedAt, WakeAt  *time.Time
	// Deadline is a wait's deadline; Signal and Jobs what it waits for.
	Deadline *time.Time
	Signal   *string
	Jobs     []string
	// History is a step's attempts, oldest first; sleeps and waits have
	// none.
	History []StepAttempt
}

// StepAttempt is one attempt of a step, as JOB.STEPS' history shows it.
type StepAttempt struct {
	Attempt int       `json:"attempt"`
	BeganAt time.Time `json:"began_at"`
	// EndedAt is nil while it runs, and for an attempt whose delivery
	// ended otherwise than by the watchdog with the step open.
	EndedAt *time.Time `json:"ended_at"`
	// Outcome is StepCompleted, StepFailed, StepInterrupted or
	// StepTimedOut; "" while it runs.
	Outcome string `json:"outcome"`
	// Error is a failed attempt's message.
	Error *string `json:"error"`
}

// JobStepsParams pages through a job's steps in the order first begun.
type JobStepsParams struct {
	JobID string
	// After is how many steps the earlier pages held.
	After, Limit int
	// Holder, when set, must be the worker holding the job.
	Holder string
}

// StepNow is a job's step as a step call finds it, its job locked: what,
// with the job (JobNow), decides what the call does.
type StepNow struct {
	// Found is false for a step the job never began; JobSteps is then how
	// many steps the job has.
	Found    bool
	JobSteps int
	// Kind is StepKind…, Status the status its row stores.
	Kind, Status          string
	Attempts, MaxAttempts int
	// SameInput: its input equals the call's, compared as JSON values.
	SameInput bool
	// Current: it was begun (or put to sleep) by the job's latest delivery.
	Current bool
	// Waking: a sleep with its wake time recorded.
	Waking bool
	// LastErrorBy is the worker that recorded its last failure, "" for none.
	LastErrorBy string
}

// Step kinds and the statuses a step's row stores.
const (
	StepKindStep  = "step"
	StepKindSleep = "sleep"
	StepKindWait  = "wait"

	StepRunning   = "running"
	StepCompleted = "completed"
	StepFailed    = "failed"
	StepSleeping  = "sleeping"
	StepAwaiting  = "awaiting"
	// StepInterrupted is how JOB.STEPS shows a step still open when its
	// delivery ended; StepReplaced a step JOB.RETRY … FROM forgot.
	StepInterrupted = "interrupted"
	StepReplaced    = "replaced"
	// StepTimedOut is the outcome of an attempt its job's timeout ended.
	StepTimedOut = "timed_out"
)

// StepVerdict is what a step call does to its job and step.
type StepVerdict int

const (
	// StepRefused: nothing changes; the error says why.
	StepRefused StepVerdict = iota
	// StepRepeated: the call took effect before and is sent again by the
	// same delivery: it is answered as then, and nothing changes.
	StepRepeated
	// StepCancels: the job's cancellation was asked. It ends cancelled
	// now, and its holder is told (ErrJobCancelled).
	StepCancels
	// StepBegins: a new step, the job's next, runs as attempt 1.
	StepBegins
	// StepAnswersOutput: the step completed before with an equal input;
	// its output is the answer, and nothing is written.
	StepAnswersOutput
	// StepRuns: the step runs again as attempt Attempt, within
	// MaxAttempts.
	StepRuns
	// StepExhausted: the step is begun past its attempts: the job fails
	// (StepAttemptsError).
	StepExhausted
	// StepCompletes: the step running for this delivery completes.
	StepCompletes
	// StepFails: the step running for this delivery fails, and with it
	// the job's attempt.
	StepFails
	// StepSleeps: a new sleep puts the job to sleep.
	StepSleeps
	// StepWakes: the sleep ended; it completes, and the worker carries on.
	StepWakes
	// StepCarriesOn: the sleep completed in an earlier delivery; nothing
	// changes, and the worker carries on.
	StepCarriesOn
	// StepWaits: the wait goes on as the signals and jobs it names stand:
	// it takes a stored signal, answers its output, or the job awaits.
	StepWaits
)

// StepDecision is the rules' answer to a step call.
type StepDecision struct {
	Verdict StepVerdict
	// Attempt and MaxAttempts are the step's when it runs (StepBegins,
	// StepRuns).
	Attempt, MaxAttempts int
	// Retry: a failure sent again finds its job waiting for a retry.
	Retry bool
}
