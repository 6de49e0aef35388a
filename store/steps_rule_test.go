package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// stepsNow is every step a step call may find: none (with the job's step
// count below and at its limit), and every kind, status, attempt count,
// limit, input comparison and delivery.
func stepsNow() []records.StepNow {
	steps := []records.StepNow{{JobSteps: 0}, {JobSteps: records.MaxSteps - 1}, {JobSteps: records.MaxSteps}}
	for _, kind := range []string{records.StepKindStep, records.StepKindSleep, records.StepKindWait} {
		for _, status := range []string{records.StepRunning, records.StepCompleted, records.StepFailed,
			records.StepSleeping, records.StepAwaiting} {
			for attempts := 0; attempts <= 3; attempts++ {
				for most := 1; most <= 3; most++ {
					for _, same := range []bool{false, true} {
						for _, current := range []bool{false, true} {
							steps = append(steps, records.StepNow{Found: true, JobSteps: 5, Kind: kind, Status: status,
								Attempts: attempts, MaxAttempts: most, SameInput: same, Current: current})
						}
					}
				}
			}
		}
	}
	return steps
}

// The grouped statements decide step calls as the engine's rules do: for a
// job held by its caller, the SQL form of STEP.BEGIN's decision gives the
// verdict and attempt engine.DecideStepBegin gives, and STEP.COMPLETE's
// guard holds exactly where engine.DecideStepComplete completes the step —
// for every step a call may find, with and without the call's own
// max_attempts.
func TestTheGroupedStepStatementsDecideAsTheRules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, agqtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const d1 = "0b5c7a52-8c53-4b59-9f4e-1d1f2c8c0a01"
	held := records.JobNow{Status: records.StatusRunning, Worker: "w-a", Delivery: d1, Attempt: 1}
	call := records.StepParams{JobID: "j", StepID: "s", WorkerID: "w-a", Delivery: d1}
	verdict, attempt := store.StepBeginDecisionSQL("c")
	begin := `SELECT ` + verdict + `, ` + attempt + ` FROM (SELECT $1::bool AS found, nullif($2::text, '') AS kind,
		nullif($3::text, '') AS status, $4::int AS attempts, $5::int AS step_max, $6::bool AS same_input,
		$7::bool AS current, $8::int AS last_ord) c`
	completes := `SELECT coalesce(` + store.StepCompletesSQL("c", "c.current") + `, false) FROM (SELECT
		nullif($1::text, '') AS kind, nullif($2::text, '') AS status, $3::bool AS current) c`
	two := 2
	for _, s := range stepsNow() {
		for _, callMax := range []*int{nil, &two} {
			p := records.StepBeginParams{StepParams: call, MaxAttempts: callMax}
			d, _ := engine.DecideStepBegin(held, s, p)
			most := s.MaxAttempts
			if callMax != nil {
				most = *callMax
			}
			var v, a *int
			if !s.Found {
				// The row a step never begun reads: NULLs, but for its job.
				err = conn.QueryRow(ctx, begin, false, "", "", nil, callMax, nil, nil, s.JobSteps).Scan(&v, &a)
			} else {
				err = conn.QueryRow(ctx, begin, true, s.Kind, s.Status, s.Attempts, most, s.SameInput, s.Current,
					s.JobSteps).Scan(&v, &a)
			}
			if err != nil {
				t.Fatal(err)
			}
			if v == nil || records.StepVerdict(*v) != d.Verdict {
				t.Errorf("begin of %+v (call's max %v): SQL verdict %v, the rule's %v", s, callMax, deref(v), d.Verdict)
				continue
			}
			runs := d.Verdict == records.StepBegins || d.Verdict == records.StepRuns
			if runs && (a == nil || *a != d.Attempt) {
				t.Errorf("begin of %+v (call's max %v): SQL attempt %v, the rule's %d", s, callMax, deref(a), d.Attempt)
			}
		}
		if !s.Found {
			continue
		}
		d, _ := engine.DecideStepComplete(held, s, call)
		var applies bool
		if err := conn.QueryRow(ctx, completes, s.Kind, s.Status, s.Current).Scan(&applies); err != nil {
			t.Fatal(err)
		}
		if want := d.Verdict == records.StepCompletes; applies != want {
			t.Errorf("completion of %+v: the guard says %v, the rule %v", s, applies, d.Verdict)
		}
	}
}

// deref is *p, or -1 for nil.
func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}
