package commands

import (
	"context"
	"errors"
	"strings"

	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// errorReply turns a handler's error into the reply the client sees: the
// one table from the engine's errors to RESP error codes and texts. An
// error that is already a reply passes through; a failure that is not a
// refusal is logged and hidden behind a generic text.
func (s *Server) errorReply(sess *Session, name string, err error) resp.Reply {
	if e, ok := resp.AsError(err); ok {
		return e
	}
	if e := refusalReply(err); e != nil {
		return e
	}
	switch {
	case errors.Is(err, context.Canceled):
		return resp.CodeErrorf("TRYAGAIN", "server shutting down")
	case errors.Is(err, records.ErrUnavailable):
		s.log.Warn().Int64("conn", sess.ID).Str("command", name).Err(err).Msg("database unavailable")
		return resp.CodeErrorf("TRYAGAIN", "database unavailable, retry later")
	case errors.Is(err, context.DeadlineExceeded):
		// Its work ran out of time, the database answering: what it
		// committed stands (a graph walk it began is carried on by the
		// leader), what it did not was rolled back.
		s.log.Warn().Int64("conn", sess.ID).Str("command", name).Err(err).Msg("command timed out")
		return resp.Errorf("%s timed out after %s", strings.ToUpper(name), s.opts.CommandTimeout)
	}
	s.log.Error().Int64("conn", sess.ID).Str("principal", sess.principal().Name).Str("command", name).Err(err).Msg("command failed")
	return resp.Errorf("internal error while running '%s'", name)
}

// Explain words a refusal of the engine as its error reply, for the
// dashboard to say what redis-cli would; false for any other error.
func Explain(err error) (string, bool) {
	if e, ok := resp.AsError(err); ok {
		return e.Error(), true
	}
	if e := refusalReply(err); e != nil {
		return e.Error(), true
	}
	return "", false
}

// refusalReply words the engine's refusals; nil for any other error.
func refusalReply(err error) *resp.Error {
	var job *records.JobError
	if errors.As(err, &job) {
		if e := jobRefusal(job.JobID, job.Err); e != nil {
			return e
		}
	}
	var (
		notWorker  *records.WorkerNotRegisteredError
		otherOwner *records.WorkerOfAnotherPrincipalError
		badReg     *records.InvalidRegistrationError
		noSchedule *records.ScheduleNotFoundError
		cannotFire *records.ScheduleCannotFireError
		scheduleEx *records.ScheduleExistsError
		badName    *records.InvalidNameError
		exists     *records.JobExistsError
		noParent   *records.ParentNotFoundError
		noAwaited  *records.AwaitedNotFoundError
		quota      *records.QuotaError
		noSpace    *records.NoNamespaceError
	)
	switch {
	case errors.As(err, &quota) && quota.Rate:
		return resp.CodeErrorf("TRYAGAIN", "%s", quota.Error())
	case errors.As(err, &quota), errors.As(err, &noSpace):
		return resp.Errorf("%s", err.Error())
	case errors.As(err, &notWorker):
		return resp.Errorf("Worker not registered: %s", notWorker.ID)
	case errors.As(err, &otherOwner):
		return resp.CodeErrorf("NOPERM", "worker %s belongs to another principal", otherOwner.ID)
	case errors.Is(err, records.ErrWorkerTaken):
		return errWorkerTaken
	case errors.As(err, &badReg), errors.Is(err, records.ErrInvalidCapabilities), errors.Is(err, records.ErrInvalidWorkerID):
		return resp.Errorf("%s", err.Error())
	case errors.As(err, &noSchedule):
		return resp.Errorf("no such schedule '%s'", noSchedule.Name)
	case errors.As(err, &cannotFire), errors.As(err, &scheduleEx), errors.As(err, &badName):
		return resp.Errorf("%s", err.Error())
	case errors.As(err, &noParent), errors.As(err, &noAwaited):
		return resp.Errorf("%s", err.Error())
	case errors.As(err, &exists):
		// An id is one job: submitting it again is idempotent only with
		// the same contents.
		return resp.Errorf("%s", err.Error())
	case errors.Is(err, records.ErrConflict):
		return resp.CodeErrorf("TRYAGAIN", "%s", err)
	case errors.Is(err, records.ErrClientGone):
		return resp.Errorf("client disconnected")
	case errors.Is(err, records.ErrInvalidInput):
		return resp.Errorf("%s", strings.TrimPrefix(err.Error(), "invalid input: "))
	}
	return nil
}

// jobRefusal words a refusal about job id; nil when err is no refusal.
func jobRefusal(id string, err error) *resp.Error {
	var (
		owner    *records.NotOwnerError
		state    *records.StateError
		stale    *records.StaleDeliveryError
		snoozes  *records.SnoozeLimitError
		notBegun *records.StepNotBegunError
		attempts *records.StepAttemptsError
		kind     *records.StepKindError
		steps    *records.StepLimitError
		ended    *records.JobEndedError
		signals  *records.SignalLimitError
	)
	switch {
	case errors.As(err, &notBegun), errors.As(err, &attempts), errors.As(err, &kind):
		return resp.Errorf("%s", err.Error())
	case errors.As(err, &steps):
		return resp.Errorf("job %s %s", id, steps)
	case errors.As(err, &ended):
		return resp.Errorf("job %s %s", id, ended)
	case errors.As(err, &signals):
		return resp.Errorf("job %s %s", id, signals)
	case errors.Is(err, records.ErrStepsNotHolder):
		return resp.CodeErrorf("NOPERM", "only the worker holding job %s reads its steps", id)
	case errors.As(err, &snoozes):
		return resp.Errorf("job %s was %s", id, snoozes)
	case errors.Is(err, records.ErrNotFound):
		return resp.Errorf("no such job %s", id)
	case errors.Is(err, records.ErrUniqueKeyHeld):
		return resp.Errorf("job %s cannot be queued again: %s", id, records.ErrUniqueKeyHeld)
	case errors.Is(err, records.ErrJobCancelled):
		return resp.CodeErrorf("CANCELLED", "job %s was cancelled", id)
	case errors.As(err, &stale):
		// agq keeps no past tokens, so it cannot tell an earlier
		// delivery's from one never issued: it says both (clients look
		// for "was delivered again").
		return resp.Errorf("job %s is not running for this delivery token (its current attempt is %d): it was delivered again since, or never with this token", id, stale.Attempt)
	case errors.As(err, &owner):
		return resp.Errorf("job %s is owned by %s", id, owner.Owner)
	case errors.As(err, &state):
		return resp.Errorf("job %s is %s", id, state.Status)
	case errors.Is(err, records.ErrNotHolder):
		return resp.CodeErrorf("NOPERM", "only the worker holding job %s publishes its logs", id)
	}
	return nil
}

// errWorkerTaken keeps the seed's words.
var errWorkerTaken = resp.CodeErrorf("NOPERM", "Worker ID already registered by another principal")
