package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// HeldBy is heldBy, for the test that holds it to the rule it stands for.
var HeldBy = heldBy

// DeliveryParam is deliveryParam, for the same test.
var DeliveryParam = deliveryParam

// StepBeginDecisionSQL and StepCompletesSQL are the rules of step calls in
// SQL, for the test that holds them to the engine's.
var (
	StepBeginDecisionSQL = stepBeginDecisionSQL
	StepCompletesSQL     = stepCompletesSQL
)

// The statements of step calls, for the test that plans them.
var (
	ReadStepSQL             = readStepSQL
	JobStepsSQL             = jobStepsSQL
	BeginStepsGroupedSQL    = beginStepsGroupedSQL
	CompleteStepsGroupedSQL = completeStepsGroupedSQL
	EndOpenStepsSQL         = endOpenStepsSQL
	SignalWaitSQL           = signalWaitSQL
	WaitsExpireSQL          = waitsExpireSQL
)

// StepStoredColumns is stepStoredColumns, for the test that holds it to
// job_steps.
var StepStoredColumns = stepStoredColumns

// PeriodCreate creates the history period [lo, hi) with the given
// suffix, for tests that place jobs in a period already past.
func (s *Store) PeriodCreate(ctx context.Context, lo, hi time.Time, suffix string) error {
	return s.periodCreate(ctx, period{lo: lo, hi: hi, suffix: suffix})
}

// PeriodFor is periodFor, for its unit test: the period's bounds and
// suffix, and whether it exists among have (pairs of bounds).
func PeriodFor(t, now time.Time, have [][2]time.Time) (lo, hi time.Time, suffix string, exists bool) {
	var ps []period
	for _, h := range have {
		ps = append(ps, period{lo: h[0], hi: h[1]})
	}
	p, exists := periodFor(t, now, ps)
	return p.lo, p.hi, p.suffix, exists
}

// NoJIT is noJIT, for the test of the pooled store's graph transactions.
func (s *Store) NoJIT(ctx context.Context, tx pgx.Tx) error { return s.noJIT(ctx, tx) }
