package records

import (
	"time"

	"github.com/google/uuid"
)

// JobNow is a job as a transition finds it, its row locked: what decides
// whether a call about one of its deliveries applies.
type JobNow struct {
	Status string
	// Worker is the job's holder and Delivery its latest delivery's
	// token, "" for none.
	Worker, Delivery string
	Attempt          int
	CancelRequested  bool
	Snoozes          int
	// Errors is the job's error history, oldest first.
	Errors []AttemptError
}

// AttemptError is one element of a job's error history.
type AttemptError struct {
	Attempt  int       `json:"attempt"`
	WorkerID string    `json:"worker_id,omitempty"`
	Error    string    `json:"error"`
	At       time.Time `json:"at"`
}

// Caller is who calls about a delivery of a job: a worker, or an admin.
// Delivery and Attempt name the delivery, "" and 0 when not given.
type Caller struct {
	WorkerID string
	Admin    bool
	Delivery string
	Attempt  int
}

// Hold is how a call about a job's delivery finds the job.
type Hold int

const (
	// Held: the job runs for this delivery, at this worker (or the caller
	// is an admin), its cancellation not asked. The call applies.
	Held Hold = iota
	// HoldOtherAttempt: the call names another attempt than the job's.
	HoldOtherAttempt
	// HoldStale: the call names a delivery that is not the job's latest.
	HoldStale
	// HoldCancelled: the job was cancelled.
	HoldCancelled
	// HoldNotRunning: the job is not running.
	HoldNotRunning
	// HoldOtherWorker: another worker holds the job.
	HoldOtherWorker
	// HoldCancelAsked: the job's cancellation was asked. Its holder now
	// knows: the call ends the job cancelled.
	HoldCancelAsked
)

// Hold says how c's call finds j: the one rule of who may act on a
// running job. The grouped statements apply their calls only where the
// store's SQL form of Held holds (heldBy), which a test keeps equal to it.
func (j JobNow) Hold(c Caller) Hold {
	switch {
	case c.Attempt != 0 && c.Attempt != j.Attempt:
		return HoldOtherAttempt
	case c.Delivery != "" && !SameDelivery(c.Delivery, j.Delivery):
		return HoldStale
	case j.Status == StatusCancelled:
		return HoldCancelled
	case j.Status != StatusRunning:
		return HoldNotRunning
	case !c.Admin && c.WorkerID != j.Worker:
		return HoldOtherWorker
	case j.CancelRequested:
		return HoldCancelAsked
	}
	return Held
}

// SameDelivery reports whether delivery tokens a and b name the same
// delivery: both are UUIDs, equal as UUIDs however each is spelled. A
// token that is no UUID names no delivery.
func SameDelivery(a, b string) bool {
	ua, err := uuid.Parse(a)
	if err != nil {
		return false
	}
	ub, err := uuid.Parse(b)
	return err == nil && ua == ub
}

// ReportVerdict is what a report does to its job.
type ReportVerdict int

const (
	// ReportRefused: nothing changes, and the report is refused.
	ReportRefused ReportVerdict = iota
	// ReportRepeated: the report took effect before, and is sent again.
	// Nothing changes, and it succeeds.
	ReportRepeated
	// ReportFindsCancelled: the job was cancelled. Nothing changes, and
	// its holder is told (ErrJobCancelled).
	ReportFindsCancelled
	// ReportCancels: the job's cancellation was asked. It ends cancelled
	// now, and its holder is told (ErrJobCancelled).
	ReportCancels
	// ReportApplies: the job runs for this report, which applies its
	// status: an acknowledgement or progress, a snooze, an end.
	ReportApplies
	// ReportSnoozeFails: a snooze past the limit fails the job instead
	// (SnoozeLimitError).
	ReportSnoozeFails
)
