package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// The grouped statements' guard and the rule of holders agree on every
// job and every call: the guard holds of a row exactly where
// records.JobNow.Hold says Held — with and without an attempt, for
// workers and admins, for tokens given or not, upper-case or not, or no
// UUID at all.
func TestTheGuardOfGroupedCallsIsTheRuleOfHolders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, agqtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const d1, d2 = "0b5c7a52-8c53-4b59-9f4e-1d1f2c8c0a01", "0b5c7a52-8c53-4b59-9f4e-1d1f2c8c0a02"
	var jobs []records.JobNow
	for _, status := range []string{records.StatusRunning, records.StatusQueued, records.StatusRetrying,
		records.StatusCompleted, records.StatusCancelled} {
		for _, worker := range []string{"", "w-a"} {
			for _, delivery := range []string{"", d1} {
				for _, cancelAsked := range []bool{false, true} {
					for _, attempt := range []int{1, 2} {
						jobs = append(jobs, records.JobNow{Status: status, Worker: worker, Delivery: delivery,
							Attempt: attempt, CancelRequested: cancelAsked})
					}
				}
			}
		}
	}
	var calls []records.Caller
	for _, who := range []records.Caller{{WorkerID: "w-a"}, {WorkerID: "w-b"}, {Admin: true}} {
		for _, delivery := range []string{"", d1, d2, strings.ToUpper(d1), "{" + d1 + "}", "not-a-token"} {
			for _, attempt := range []int{0, 1, 2} {
				c := who
				c.Delivery, c.Attempt = delivery, attempt
				calls = append(calls, c)
			}
		}
	}
	for _, withAttempt := range []bool{true, false} {
		attempt, unused := "", " AND $7::int IS NOT NULL"
		if withAttempt {
			attempt, unused = "$7::int", ""
		}
		// In a WHERE clause, NULL is false.
		guard := `SELECT coalesce(` + store.HeldBy("$5::text", attempt, "$6::text") + `, false) FROM (SELECT $1::text AS status,
			$2::bool AS cancel_requested, nullif($3::text, '') AS worker_id, nullif($4::text, '')::uuid AS delivery,
			$8::int AS attempt) j WHERE true` + unused
		for _, j := range jobs {
			for _, c := range calls {
				if !withAttempt && c.Attempt != 0 {
					continue
				}
				worker := c.WorkerID
				if c.Admin {
					worker = ""
				}
				delivery := store.DeliveryParam(c.Delivery)
				var held bool
				if err := conn.QueryRow(ctx, guard, j.Status, j.CancelRequested, j.Worker, j.Delivery, worker, delivery,
					c.Attempt, j.Attempt).Scan(&held); err != nil {
					t.Fatal(err)
				}
				if want := j.Hold(c) == records.Held; held != want {
					t.Errorf("job %+v, call %+v: the guard says held %v, the rule %v", j, c, held, want)
				}
			}
		}
	}
}
