package engine_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/records"
)

// What each report does to a job as it stands, decided without a
// database: the same rule the store applies in its transactions.
func TestDecideReport(t *testing.T) {
	const d1, d2 = "0b5c7a52-8c53-4b59-9f4e-1d1f2c8c0a01", "0b5c7a52-8c53-4b59-9f4e-1d1f2c8c0a02"
	running := records.JobNow{Status: records.StatusRunning, Worker: "w-a", Delivery: d1, Attempt: 1}
	with := func(j records.JobNow, change func(*records.JobNow)) records.JobNow {
		change(&j)
		return j
	}
	failedBefore := []records.AttemptError{{Attempt: 1, WorkerID: "w-a", Error: "boom"}}
	report := func(status string) records.Report {
		return records.Report{ID: "j", WorkerID: "w-a", Status: status, Delivery: d1, Retryable: true, MaxSnoozes: 3}
	}
	change := func(p records.Report, f func(*records.Report)) records.Report {
		f(&p)
		return p
	}
	for _, c := range []struct {
		name    string
		job     records.JobNow
		report  records.Report
		verdict records.ReportVerdict
		err     error
	}{
		{"its holder completes it", running, report(records.StatusCompleted), records.ReportApplies, nil},
		{"its holder acknowledges it", running, report(""), records.ReportApplies, nil},
		{"an admin completes it", running, change(report(records.StatusCompleted), func(p *records.Report) { p.WorkerID, p.Admin, p.Delivery = "", true, "" }),
			records.ReportApplies, nil},
		{"its cancellation was asked", with(running, func(j *records.JobNow) { j.CancelRequested = true }), report(""),
			records.ReportCancels, records.ErrJobCancelled},
		{"another worker reports", running, change(report(records.StatusCompleted), func(p *records.Report) { p.WorkerID = "w-b" }),
			records.ReportRefused, &records.NotOwnerError{Owner: "w-a"}},
		{"a stale delivery", running, change(report(records.StatusCompleted), func(p *records.Report) { p.Delivery = d2 }),
			records.ReportRefused, &records.StaleDeliveryError{Attempt: 1}},
		{"another attempt", running, change(report(records.StatusCompleted), func(p *records.Report) { p.Attempt = 2 }),
			records.ReportRefused, &records.StateError{Status: "at attempt 1, not 2"}},
		{"an earlier attempt's failure again",
			with(running, func(j *records.JobNow) { j.Attempt, j.Delivery, j.Errors = 2, d2, failedBefore }),
			change(report(records.StatusFailed), func(p *records.Report) { p.Attempt = 1 }), records.ReportRepeated, nil},
		{"a completion sent again", with(running, func(j *records.JobNow) { j.Status = records.StatusCompleted }),
			report(records.StatusCompleted), records.ReportRepeated, nil},
		{"a failure after its completion", with(running, func(j *records.JobNow) { j.Status = records.StatusCompleted }),
			report(records.StatusFailed), records.ReportRefused, &records.StateError{Status: records.StatusCompleted}},
		{"another worker on an ended job", with(running, func(j *records.JobNow) { j.Status = records.StatusCompleted }),
			change(report(records.StatusCompleted), func(p *records.Report) { p.WorkerID = "w-b" }),
			records.ReportRefused, &records.NotOwnerError{Owner: "w-a"}},
		{"its holder's cancellation again", with(running, func(j *records.JobNow) { j.Status = records.StatusCancelled }),
			report(records.StatusCancelled), records.ReportRepeated, nil},
		{"a report on a job JOB.CANCEL ended",
			with(running, func(j *records.JobNow) { j.Status, j.CancelRequested = records.StatusCancelled, true }),
			report(records.StatusCompleted), records.ReportFindsCancelled, records.ErrJobCancelled},
		{"a retryable failure again", with(running, func(j *records.JobNow) { j.Status, j.Errors = records.StatusRetrying, failedBefore }),
			report(records.StatusFailed), records.ReportRepeated, nil},
		{"a final failure after a retryable one",
			with(running, func(j *records.JobNow) { j.Status, j.Errors = records.StatusRetrying, failedBefore }),
			change(report(records.StatusFailed), func(p *records.Report) { p.Retryable = false }),
			records.ReportRefused, &records.StateError{Status: records.StatusRetrying}},
		{"a waiting job", with(running, func(j *records.JobNow) { j.Status, j.Worker = records.StatusQueued, "" }),
			change(report(""), func(p *records.Report) { p.Delivery = "" }), records.ReportRefused, &records.StateError{Status: records.StatusQueued}},
		{"a snooze sent again", with(running, func(j *records.JobNow) { j.Status, j.Worker, j.Snoozes = records.StatusScheduled, "", 1 }),
			report(records.StatusSnoozed), records.ReportRepeated, nil},
		{"a snooze sent again without its delivery",
			with(running, func(j *records.JobNow) { j.Status, j.Worker, j.Snoozes, j.Attempt = records.StatusScheduled, "", 1, 0 }),
			change(report(records.StatusSnoozed), func(p *records.Report) { p.Delivery, p.Attempt = "", 1 }), records.ReportRepeated, nil},
		{"a snooze", running, report(records.StatusSnoozed), records.ReportApplies, nil},
		{"a snooze past the limit", with(running, func(j *records.JobNow) { j.Snoozes = 3 }), report(records.StatusSnoozed),
			records.ReportSnoozeFails, &records.SnoozeLimitError{Snoozes: 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			verdict, err := engine.DecideReport(c.job, c.report)
			if verdict != c.verdict || fmt.Sprint(err) != fmt.Sprint(c.err) || (c.err != nil && !sameKind(err, c.err)) {
				t.Fatalf("got %v, %v; want %v, %v", verdict, err, c.verdict, c.err)
			}
		})
	}
}

// sameKind reports whether err is want, or of want's type.
func sameKind(err, want error) bool {
	return errors.Is(err, want) || fmt.Sprintf("%T", err) == fmt.Sprintf("%T", want)
}
