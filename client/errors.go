package client

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrCancelled is returned by Step, Job.Sleep and Job.Progress when agq
	// answers that the job was cancelled: stop working on it.
	ErrCancelled = errors.New("client: the job was cancelled")
	// ErrSleeping is returned by Job.Sleep when the job went to sleep: the
	// handler returns it, and agq delivers the job again at its wake time.
	ErrSleeping = errors.New("client: the job is sleeping")
	// ErrDeliveryLost means agq no longer gives this delivery of the job to
	// this worker (it was delivered again, or it ended): stop working on it.
	ErrDeliveryLost = errors.New("client: this delivery of the job is over")
	// ErrStepFailed wraps a step's error once agq recorded it: the
	// delivery is over, and the job is retried or failed by agq.
	ErrStepFailed = errors.New("client: step failed")
	// ErrNotFinished is Producer.Wait's answer when the job did not end
	// within the timeout.
	ErrNotFinished = errors.New("client: the job did not end in time")
	// ErrNotFound is returned for a job agq does not know.
	ErrNotFound = errors.New("client: no such job")

	// ErrShuttingDown is the cause (context.Cause) of a handler's ctx
	// ending because the worker stops. A handler's error that wraps it is
	// reported as it is; any other is prefixed "worker shutting down: ".
	ErrShuttingDown = errors.New("worker shutting down")

	// Causes of a handler's ctx ending, seen through context.Cause; both
	// wrap ErrCancelled.
	errCancelledByServer = fmt.Errorf("client: job cancelled by agq: %w", ErrCancelled)
	errCancelConfirmed   = fmt.Errorf("client: job cancelled (confirmed by agq): %w", ErrCancelled)
	errJobTimeout        = errors.New("client: job timed out")
	errReportsAbandoned  = errors.New("client: report abandoned at shutdown")
)

// Permanent marks err as not worth retrying: the job fails at once, or the
// step fails its job, whatever attempts remain.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// ReportFields are fields a handler adds to its job's final report. A
// handler's result of this type is the report's fields (an "output" among
// them is the job's output) rather than its output; an error wrapped with
// WithReportFields adds them to the failed or cancelled report. The client
// sets status, error, retryable, attempt and delivery itself.
type ReportFields map[string]any

// WithReportFields wraps err so that the attempt's report carries fields.
func WithReportFields(err error, fields ReportFields) error {
	if err == nil {
		return nil
	}
	return &fieldsError{err, fields}
}

type fieldsError struct {
	err    error
	fields ReportFields
}

func (e *fieldsError) Error() string { return e.err.Error() }
func (e *fieldsError) Unwrap() error { return e.err }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// Snooze, returned by a handler, puts the job back for d without counting
// the attempt.
func Snooze(d time.Duration) error { return &snoozeError{d} }

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.d) }

// outcome classifies a command's result for the retry logic.
type outcome int

const (
	outcomeOK            outcome = iota
	outcomeNil                   // a pop timed out
	outcomeConn                  // connection trouble or a transient reply: retry
	outcomeNotRegistered         // agq does not know this worker: register again
	outcomeCancelled             // CANCELLED: the job was cancelled
	outcomeNoPerm                // NOPERM: this key may not do it
	outcomeLost                  // the delivery is no longer this worker's
	outcomeRefused               // any other error reply
)

var transientCodes = []string{"LOADING ", "TRYAGAIN ", "BUSY ", "MASTERDOWN ", "CLUSTERDOWN "}

func classify(err error) outcome {
	if err == nil {
		return outcomeOK
	}
	if errors.Is(err, redis.Nil) {
		return outcomeNil
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return outcomeConn
	}
	msg := rerr.Error()
	switch {
	case strings.HasPrefix(msg, "CANCELLED"):
		return outcomeCancelled
	case strings.HasPrefix(msg, "NOPERM"):
		return outcomeNoPerm
	case strings.Contains(msg, "Worker not registered"):
		return outcomeNotRegistered
	case strings.Contains(msg, "was delivered again"), strings.Contains(msg, "is not running for this delivery"), strings.Contains(msg, "is owned by"),
		strings.Contains(msg, "is not running"), strings.Contains(msg, " is at attempt "):
		return outcomeLost
	}
	for _, code := range transientCodes {
		if strings.HasPrefix(msg, code) {
			return outcomeConn
		}
	}
	// A failure inside agq (a statement that failed, a deadlock) may not
	// happen again: the same command is sent again later.
	if strings.HasPrefix(msg, "ERR internal error") {
		return outcomeConn
	}
	return outcomeRefused
}
