package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/records"
)

// decideStep is one of the rules of step calls, its call given.
type decideStep = func(records.JobNow, records.StepNow) (records.StepDecision, error)

// stepRule is rule deciding call p.
func stepRule(rule func(records.JobNow, records.StepNow, records.StepParams) (records.StepDecision, error),
	p records.StepParams) decideStep {
	return func(j records.JobNow, s records.StepNow) (records.StepDecision, error) { return rule(j, s, p) }
}

// beginRule is DecideStepBegin deciding call p.
func beginRule(p records.StepBeginParams) decideStep {
	return func(j records.JobNow, s records.StepNow) (records.StepDecision, error) {
		return engine.DecideStepBegin(j, s, p)
	}
}

// What each step call does to a job and its step as they stand, decided
// without a database: the rules the store applies, on its locked path
// and, in their SQL form, in its grouped statements.
func TestDecideStepCalls(t *testing.T) {
	const d1, d2 = "0b5c7a52-8c53-4b59-9f4e-1d1f2c8c0a01", "0b5c7a52-8c53-4b59-9f4e-1d1f2c8c0a02"
	running := records.JobNow{Status: records.StatusRunning, Worker: "w-a", Delivery: d1, Attempt: 1}
	job := func(change func(*records.JobNow)) records.JobNow {
		j := running
		change(&j)
		return j
	}
	call := records.StepParams{JobID: "j", StepID: "s", WorkerID: "w-a", Delivery: d1}
	with := func(change func(*records.StepParams)) records.StepParams {
		p := call
		change(&p)
		return p
	}
	step := func(status string, attempts int, current bool) records.StepNow {
		return records.StepNow{Found: true, JobSteps: 3, Kind: records.StepKindStep, Status: status, Attempts: attempts,
			MaxAttempts: 3, Current: current}
	}
	changed := func(s records.StepNow, change func(*records.StepNow)) records.StepNow {
		change(&s)
		return s
	}
	sleeping := records.StepNow{Found: true, JobSteps: 3, Kind: records.StepKindSleep, Status: records.StepSleeping,
		Current: true, Waking: true}
	none := records.StepNow{JobSteps: 3}
	failedBy := func(worker string) records.StepNow {
		return changed(step(records.StepFailed, 1, true), func(s *records.StepNow) { s.LastErrorBy = worker })
	}
	retrying := job(func(j *records.JobNow) { j.Status, j.Worker = records.StatusRetrying, "" })
	asleep := job(func(j *records.JobNow) { j.Status, j.Worker = records.StatusScheduled, "" })
	begin := beginRule(records.StepBeginParams{StepParams: call})
	beginBy := func(p records.StepParams) decideStep { return beginRule(records.StepBeginParams{StepParams: p}) }
	complete := stepRule(engine.DecideStepComplete, call)
	fail, sleep := stepRule(engine.DecideStepFail, call), stepRule(engine.DecideStepSleep, call)
	wait := stepRule(engine.DecideStepWait, call)
	one := 1
	runs := func(attempt int) records.StepDecision {
		return records.StepDecision{Verdict: records.StepRuns, Attempt: attempt, MaxAttempts: 3}
	}
	for _, c := range []struct {
		name   string
		decide decideStep
		job    records.JobNow
		step   records.StepNow
		want   records.StepDecision
		err    error
	}{
		{"BeginANewStep", begin, running, none, records.StepDecision{Verdict: records.StepBegins, Attempt: 1}, nil},
		{"BeginANewStepPastTheJobsSteps", begin, running, records.StepNow{JobSteps: records.MaxSteps},
			records.StepDecision{}, &records.StepLimitError{}},
		{"BeginAStepCompletedWithAnEqualInput", begin, running,
			changed(step(records.StepCompleted, 1, false), func(s *records.StepNow) { s.SameInput = true }),
			records.StepDecision{Verdict: records.StepAnswersOutput}, nil},
		{"BeginAStepCompletedWithAnotherInput", begin, running, step(records.StepCompleted, 2, false), runs(1), nil},
		{"BeginAgainByTheDeliveryThatBeganIt", begin, running, step(records.StepRunning, 2, true), runs(2), nil},
		{"BeginAfterItsDeliveryWasLost", begin, running, step(records.StepRunning, 2, false), runs(3), nil},
		{"BeginAfterItFailed", begin, running, step(records.StepFailed, 1, false), runs(2), nil},
		{"BeginPastItsAttempts", begin, running, step(records.StepFailed, 3, false),
			records.StepDecision{Verdict: records.StepExhausted}, &records.StepAttemptsError{StepID: "s", Attempts: 3}},
		{"BeginPastTheAttemptsTheCallGives", beginRule(records.StepBeginParams{StepParams: call, MaxAttempts: &one}),
			running, step(records.StepFailed, 1, false),
			records.StepDecision{Verdict: records.StepExhausted}, &records.StepAttemptsError{StepID: "s", Attempts: 1}},
		{"BeginASleepsID", begin, running, sleeping, records.StepDecision{},
			&records.StepKindError{StepID: "s", Kind: records.StepKindSleep}},
		{"BeginWithAStaleDelivery", beginBy(with(func(p *records.StepParams) { p.Delivery = d2 })), running, none,
			records.StepDecision{}, &records.StaleDeliveryError{Attempt: 1}},
		{"BeginWithItsTokenInCapitals", beginBy(with(func(p *records.StepParams) { p.Delivery = strings.ToUpper(d1) })),
			running, none, records.StepDecision{Verdict: records.StepBegins, Attempt: 1}, nil},
		{"BeginWithATokenThatIsNoUUID", beginBy(with(func(p *records.StepParams) { p.Delivery = "x" })), running, none,
			records.StepDecision{}, &records.StaleDeliveryError{Attempt: 1}},
		{"BeginByAnotherWorker", beginBy(with(func(p *records.StepParams) { p.WorkerID = "w-b" })), running, none,
			records.StepDecision{}, &records.NotOwnerError{Owner: "w-a"}},
		{"BeginByAnAdmin", beginBy(with(func(p *records.StepParams) { p.WorkerID, p.Admin, p.Delivery = "", true, "" })),
			running, none, records.StepDecision{Verdict: records.StepBegins, Attempt: 1}, nil},
		{"BeginWithItsCancellationAsked", begin, job(func(j *records.JobNow) { j.CancelRequested = true }), none,
			records.StepDecision{Verdict: records.StepCancels}, records.ErrJobCancelled},
		{"BeginACancelledJob", begin, job(func(j *records.JobNow) { j.Status = records.StatusCancelled }), none,
			records.StepDecision{}, records.ErrJobCancelled},
		{"BeginAJobNotRunning", begin, job(func(j *records.JobNow) { j.Status = records.StatusQueued }), none,
			records.StepDecision{}, &records.StateError{Status: "not running"}},

		{"CompleteAStepRunningForThisDelivery", complete, running, step(records.StepRunning, 1, true),
			records.StepDecision{Verdict: records.StepCompletes}, nil},
		{"CompleteAgain", complete, running, step(records.StepCompleted, 1, true),
			records.StepDecision{Verdict: records.StepRepeated}, nil},
		{"CompleteAStepBegunByAnEarlierDelivery", complete, running, step(records.StepRunning, 1, false),
			records.StepDecision{}, &records.StepNotBegunError{StepID: "s"}},
		{"CompleteAStepNeverBegun", complete, running, none, records.StepDecision{}, &records.StepNotBegunError{StepID: "s"}},
		{"CompleteASleep", complete, running, sleeping, records.StepDecision{},
			&records.StepKindError{StepID: "s", Kind: records.StepKindSleep}},
		{"CompleteWithAStaleDelivery", stepRule(engine.DecideStepComplete, with(func(p *records.StepParams) { p.Delivery = d2 })),
			running, step(records.StepRunning, 1, true), records.StepDecision{}, &records.StaleDeliveryError{Attempt: 1}},
		{"CompleteWithItsCancellationAsked", complete, job(func(j *records.JobNow) { j.CancelRequested = true }),
			step(records.StepRunning, 1, true), records.StepDecision{Verdict: records.StepCancels}, records.ErrJobCancelled},

		{"FailAStepRunningForThisDelivery", fail, running, step(records.StepRunning, 1, true),
			records.StepDecision{Verdict: records.StepFails}, nil},
		{"FailACompletedStep", fail, running, step(records.StepCompleted, 1, true),
			records.StepDecision{}, &records.StepNotBegunError{StepID: "s"}},
		{"FailAgainTheJobRetrying", fail, retrying, failedBy("w-a"),
			records.StepDecision{Verdict: records.StepRepeated, Retry: true}, nil},
		{"FailAgainTheJobFailed", fail, job(func(j *records.JobNow) { j.Status = records.StatusFailed }), failedBy("w-a"),
			records.StepDecision{Verdict: records.StepRepeated}, nil},
		{"FailAgainByAnotherWorker", fail, retrying, failedBy("w-b"),
			records.StepDecision{}, &records.StateError{Status: "not running"}},
		{"FailAgainByAnAdmin", stepRule(engine.DecideStepFail, with(func(p *records.StepParams) { p.WorkerID, p.Admin = "", true })),
			retrying, failedBy("w-a"), records.StepDecision{Verdict: records.StepRepeated, Retry: true}, nil},
		{"FailAgainWithAStaleDelivery", stepRule(engine.DecideStepFail, with(func(p *records.StepParams) { p.Delivery = d2 })),
			retrying, failedBy("w-a"), records.StepDecision{}, &records.StaleDeliveryError{Attempt: 1}},
		{"FailAStepBegunByAnEarlierDelivery", fail, running, step(records.StepRunning, 1, false),
			records.StepDecision{}, &records.StepNotBegunError{StepID: "s"}},

		{"SleepANewSleep", sleep, running, none, records.StepDecision{Verdict: records.StepSleeps}, nil},
		{"SleepPastTheJobsSteps", sleep, running, records.StepNow{JobSteps: records.MaxSteps},
			records.StepDecision{}, &records.StepLimitError{}},
		{"SleepAgainByTheDeliveryThatSlept", sleep, asleep, sleeping, records.StepDecision{Verdict: records.StepRepeated}, nil},
		{"SleepInTheDeliveryAfterIt", sleep, running, changed(sleeping, func(s *records.StepNow) { s.Current = false }),
			records.StepDecision{Verdict: records.StepWakes}, nil},
		{"SleepWokenBefore", sleep, running, changed(sleeping, func(s *records.StepNow) { s.Status = records.StepCompleted }),
			records.StepDecision{Verdict: records.StepCarriesOn}, nil},
		{"SleepAStepsID", sleep, running, step(records.StepCompleted, 1, false), records.StepDecision{},
			&records.StepKindError{StepID: "s", Kind: records.StepKindStep}},
		{"SleepAJobNotRunning", sleep, job(func(j *records.JobNow) { j.Status = records.StatusQueued }), none,
			records.StepDecision{}, &records.StateError{Status: "not running"}},

		{"WaitByItsHolder", wait, running, none, records.StepDecision{Verdict: records.StepWaits}, nil},
		{"WaitByAnAdmin", stepRule(engine.DecideStepWait, with(func(p *records.StepParams) { p.WorkerID, p.Admin, p.Delivery = "", true, "" })),
			running, none, records.StepDecision{Verdict: records.StepWaits}, nil},
		{"WaitWithAStaleDelivery", stepRule(engine.DecideStepWait, with(func(p *records.StepParams) { p.Delivery = d2 })),
			running, none, records.StepDecision{}, &records.StaleDeliveryError{Attempt: 1}},
		{"WaitByAnotherWorker", stepRule(engine.DecideStepWait, with(func(p *records.StepParams) { p.WorkerID = "w-b" })),
			running, none, records.StepDecision{}, &records.NotOwnerError{Owner: "w-a"}},
		{"WaitWithItsCancellationAsked", wait, job(func(j *records.JobNow) { j.CancelRequested = true }), none,
			records.StepDecision{Verdict: records.StepCancels}, records.ErrJobCancelled},
		{"WaitAJobNotRunning", wait, job(func(j *records.JobNow) { j.Status, j.Worker = records.StatusAwaiting, "" }), none,
			records.StepDecision{}, &records.StateError{Status: "not running"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := c.decide(c.job, c.step)
			if d != c.want || fmt.Sprint(err) != fmt.Sprint(c.err) || (c.err != nil && !sameKind(err, c.err)) {
				t.Fatalf("got %+v, %v; want %+v, %v", d, err, c.want, c.err)
			}
		})
	}
}
