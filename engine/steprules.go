package engine

import "github.com/agq/agq/records"

// StepBegin is DecideStepBegin.
func (Decisions) StepBegin(j records.JobNow, s records.StepNow, p records.StepBeginParams) (records.StepDecision, error) {
	return DecideStepBegin(j, s, p)
}

// StepComplete is DecideStepComplete.
func (Decisions) StepComplete(j records.JobNow, s records.StepNow, p records.StepParams) (records.StepDecision, error) {
	return DecideStepComplete(j, s, p)
}

// StepFail is DecideStepFail.
func (Decisions) StepFail(j records.JobNow, s records.StepNow, p records.StepParams) (records.StepDecision, error) {
	return DecideStepFail(j, s, p)
}

// StepSleep is DecideStepSleep.
func (Decisions) StepSleep(j records.JobNow, s records.StepNow, p records.StepParams) (records.StepDecision, error) {
	return DecideStepSleep(j, s, p)
}

// StepWait is DecideStepWait.
func (Decisions) StepWait(j records.JobNow, s records.StepNow, p records.StepParams) (records.StepDecision, error) {
	return DecideStepWait(j, s, p)
}

// stepHold applies the rule of holders (records.JobNow.Hold) to a step
// call, as JOB.UPDATE's: no error when the call goes on to the step's own
// rule; otherwise the decision and the error are the call's answer.
func stepHold(j records.JobNow, p records.StepParams) (d records.StepDecision, err error) {
	now := j.Hold(records.Caller{WorkerID: p.WorkerID, Admin: p.Admin, Delivery: p.Delivery})
	switch now {
	case records.Held:
		return d, nil
	case records.HoldStale:
		return d, &records.StaleDeliveryError{Attempt: j.Attempt}
	case records.HoldCancelled:
		return d, records.ErrJobCancelled
	case records.HoldOtherWorker:
		return d, &records.NotOwnerError{Owner: j.Worker}
	case records.HoldCancelAsked:
		return records.StepDecision{Verdict: records.StepCancels}, records.ErrJobCancelled
	}
	return d, &records.StateError{Status: "not running"}
}

// stale reports whether call p names a delivery that is not j's latest.
func stale(j records.JobNow, p records.StepParams) bool {
	return p.Delivery != "" && !records.SameDelivery(p.Delivery, j.Delivery)
}

// DecideStepBegin decides what STEP.BEGIN p does to step s of job j: a
// new step runs as attempt 1; a step completed with an equal input answers
// its output and runs no more; the same BEGIN again, by the delivery that
// began it, runs the same attempt; a step completed with another input
// runs anew as attempt 1; any other counts one attempt more, within its
// attempts (p's MaxAttempts, when given, replaces the step's), past which
// the job fails.
func DecideStepBegin(j records.JobNow, s records.StepNow, p records.StepBeginParams) (records.StepDecision, error) {
	if d, err := stepHold(j, p.StepParams); err != nil {
		return d, err
	}
	if !s.Found {
		if s.JobSteps >= records.MaxSteps {
			return records.StepDecision{}, &records.StepLimitError{}
		}
		return records.StepDecision{Verdict: records.StepBegins, Attempt: 1}, nil
	}
	if s.Kind != records.StepKindStep {
		return records.StepDecision{}, &records.StepKindError{StepID: p.StepID, Kind: s.Kind}
	}
	most := s.MaxAttempts
	if p.MaxAttempts != nil {
		most = *p.MaxAttempts
	}
	runs := func(attempt int) (records.StepDecision, error) {
		return records.StepDecision{Verdict: records.StepRuns, Attempt: attempt, MaxAttempts: most}, nil
	}
	switch {
	case s.Status == records.StepCompleted && s.SameInput:
		return records.StepDecision{Verdict: records.StepAnswersOutput}, nil
	case s.Status == records.StepRunning && s.Current:
		return runs(s.Attempts)
	case s.Status == records.StepCompleted:
		return runs(1)
	case s.Attempts >= most:
		return records.StepDecision{Verdict: records.StepExhausted},
			&records.StepAttemptsError{StepID: p.StepID, Attempts: s.Attempts}
	}
	return runs(s.Attempts + 1)
}

// runningFor decides a call ending step s: completed already (repeated
// true), or running for the job's latest delivery (nil); any other step —
// not begun, begun by an earlier delivery, a sleep or a wait — refuses it.
func runningFor(s records.StepNow, p records.StepParams) (repeated bool, err error) {
	switch {
	case !s.Found:
		return false, &records.StepNotBegunError{StepID: p.StepID}
	case s.Kind != records.StepKindStep:
		return false, &records.StepKindError{StepID: p.StepID, Kind: s.Kind}
	case s.Status == records.StepCompleted:
		return true, nil
	case s.Status != records.StepRunning || !s.Current:
		return false, &records.StepNotBegunError{StepID: p.StepID}
	}
	return false, nil
}

// DecideStepComplete decides what STEP.COMPLETE p does: the step running
// for the job's delivery completes; completing it again changes nothing.
func DecideStepComplete(j records.JobNow, s records.StepNow, p records.StepParams) (records.StepDecision, error) {
	return endRunning(j, s, p, records.StepCompletes, func() (records.StepDecision, error) {
		return records.StepDecision{Verdict: records.StepRepeated}, nil
	})
}

// endRunning decides a call that ends the step running for the job's
// delivery, as verdict, once the rule of holders let the call go on; a
// step completed already is answered by completed.
func endRunning(j records.JobNow, s records.StepNow, p records.StepParams, verdict records.StepVerdict,
	completed func() (records.StepDecision, error)) (records.StepDecision, error) {
	if d, err := stepHold(j, p); err != nil {
		return d, err
	}
	switch repeated, err := runningFor(s, p); {
	case err != nil:
		return records.StepDecision{}, err
	case repeated:
		return completed()
	}
	return records.StepDecision{Verdict: verdict}, nil
}

// DecideStepFail decides what STEP.FAIL p does: the step running for the
// job's delivery fails (the retry policy then decides the job's fate with
// the step's attempts). Sent again by the same delivery and worker after
// it ended the attempt, it is answered as the first time; a completed step
// fails no more.
func DecideStepFail(j records.JobNow, s records.StepNow, p records.StepParams) (records.StepDecision, error) {
	if !stale(j, p) && s.Found && s.Kind == records.StepKindStep && s.Status == records.StepFailed && s.Current &&
		(p.Admin || s.LastErrorBy == p.WorkerID) {
		switch j.Status {
		case records.StatusRetrying:
			return records.StepDecision{Verdict: records.StepRepeated, Retry: true}, nil
		case records.StatusFailed:
			return records.StepDecision{Verdict: records.StepRepeated}, nil
		}
	}
	return endRunning(j, s, p, records.StepFails, func() (records.StepDecision, error) {
		return records.StepDecision{}, &records.StepNotBegunError{StepID: p.StepID}
	})
}

// DecideStepSleep decides what STEP.SLEEP p does: a new sleep puts the
// job to sleep; sent again by the delivery that did, it answers the same
// wake time; in a later delivery the sleep ends and the worker carries on.
func DecideStepSleep(j records.JobNow, s records.StepNow, p records.StepParams) (records.StepDecision, error) {
	if !stale(j, p) && s.Found && s.Kind == records.StepKindSleep && s.Status == records.StepSleeping && s.Current &&
		j.Status == records.StatusScheduled && s.Waking {
		return records.StepDecision{Verdict: records.StepRepeated}, nil
	}
	if d, err := stepHold(j, p); err != nil {
		return d, err
	}
	switch {
	case s.Found && s.Kind != records.StepKindSleep:
		return records.StepDecision{}, &records.StepKindError{StepID: p.StepID, Kind: s.Kind}
	case s.Found && s.Status == records.StepCompleted:
		return records.StepDecision{Verdict: records.StepCarriesOn}, nil
	case s.Found:
		return records.StepDecision{Verdict: records.StepWakes}, nil
	case s.JobSteps >= records.MaxSteps:
		return records.StepDecision{}, &records.StepLimitError{}
	}
	return records.StepDecision{Verdict: records.StepSleeps}, nil
}

// DecideStepWait decides whether STEP.WAIT p goes on, by the rule of
// holders every step call follows: what the wait then does depends on the
// signals and jobs it names, which the store reads as it applies it.
func DecideStepWait(j records.JobNow, _ records.StepNow, p records.StepParams) (records.StepDecision, error) {
	if d, err := stepHold(j, p); err != nil {
		return d, err
	}
	return records.StepDecision{Verdict: records.StepWaits}, nil
}
