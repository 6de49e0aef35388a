package engine

import (
	"fmt"
	"time"

	"github.com/agq/agq/records"
)

// Decisions are the engine's rules the store applies in its transactions:
// what a report does to its job, and when a failed attempt runs again.
type Decisions struct {
	Retry RetryPolicy
}

var _ records.Rules = Decisions{}

// NextRetry is r.Retry's decision.
func (r Decisions) NextRetry(f records.Failure) (bool, time.Duration) { return r.Retry.NextRetry(f) }

// Report is DecideReport.
func (Decisions) Report(j records.JobNow, p records.Report) (records.ReportVerdict, error) {
	return DecideReport(j, p)
}

// DecideReport decides what report p does to job j as it stands. Clients
// send reports again after timeouts, so a report that took effect before
// is recognised and answered as it was, changing nothing; otherwise it
// applies only to the job running for it (records.JobNow.Hold).
func DecideReport(j records.JobNow, p records.Report) (records.ReportVerdict, error) {
	if snoozedAgain(j, p) {
		return records.ReportRepeated, nil
	}
	hold := j.Hold(records.Caller{WorkerID: p.WorkerID, Admin: p.Admin, Delivery: p.Delivery, Attempt: p.Attempt})
	switch hold {
	case records.HoldOtherAttempt:
		// A report about an earlier delivery, sent again late: it must
		// not touch the current one. Its own outcome, if recorded, was
		// this very report.
		for _, e := range j.Errors {
			if e.Attempt == p.Attempt && e.WorkerID == p.WorkerID && retryableFailure(p) {
				return records.ReportRepeated, nil
			}
		}
		return records.ReportRefused, &records.StateError{Status: fmt.Sprintf("at attempt %d, not %d", j.Attempt, p.Attempt)}
	case records.HoldStale:
		// The job was delivered again since, or the claim that made this
		// delivery was lost in a database crash.
		return records.ReportRefused, &records.StaleDeliveryError{Attempt: j.Attempt}
	}
	if records.IsTerminal(j.Status) && !p.Admin && j.Worker != "" && j.Worker != p.WorkerID {
		return records.ReportRefused, &records.NotOwnerError{Owner: j.Worker}
	}
	switch hold {
	case records.HoldCancelled:
		// The holder's own cancellation, reported again (a job JOB.CANCEL
		// ended has its request set, or no holder).
		if p.Status == records.StatusCancelled && !j.CancelRequested && j.Worker != "" {
			return records.ReportRepeated, nil
		}
		return records.ReportFindsCancelled, records.ErrJobCancelled
	case records.HoldNotRunning:
		if records.IsTerminal(j.Status) && p.Status == j.Status || failedAgain(j, p) {
			return records.ReportRepeated, nil
		}
		return records.ReportRefused, &records.StateError{Status: j.Status}
	case records.HoldOtherWorker:
		return records.ReportRefused, &records.NotOwnerError{Owner: j.Worker}
	case records.HoldCancelAsked:
		return records.ReportCancels, records.ErrJobCancelled
	}
	if p.Status == records.StatusSnoozed && j.Snoozes >= p.MaxSnoozes {
		return records.ReportSnoozeFails, &records.SnoozeLimitError{Snoozes: j.Snoozes}
	}
	return records.ReportApplies, nil
}

// snoozedAgain reports whether p is the snooze that put j back to wait,
// sent again before the job was delivered again.
func snoozedAgain(j records.JobNow, p records.Report) bool {
	return p.Status == records.StatusSnoozed && j.Status == records.StatusScheduled && j.Worker == "" && j.Snoozes > 0 &&
		(p.Delivery != "" && records.SameDelivery(j.Delivery, p.Delivery) || p.Delivery == "" && p.Attempt == j.Attempt+1)
}

// failedAgain reports whether p is the failure that left j waiting for a
// retry, sent again by the same worker.
func failedAgain(j records.JobNow, p records.Report) bool {
	if j.Status != records.StatusRetrying || !retryableFailure(p) || len(j.Errors) == 0 {
		return false
	}
	last := j.Errors[len(j.Errors)-1]
	return last.Attempt == j.Attempt && last.WorkerID == p.WorkerID
}

// retryableFailure reports whether failure report p may repeat the failure
// that ended its delivery, now that the job waits for a retry or runs
// again: only a retryable one. A failure not retryable asked that the job
// never run again; answering it OK would say it took effect, while the job
// still retries.
func retryableFailure(p records.Report) bool {
	return p.Status == records.StatusFailed && p.Retryable
}
