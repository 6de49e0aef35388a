package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/store"
)

// A large group of single submissions goes as one COPY; sent again, or with
// one id held by other contents, each job still gets its own outcome.
func TestLargeSubmissionGroupsKeepEachOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := newRecordingStore(ctx, t)
	st := rec.st
	group := func(prefix string) []store.NewJob {
		jobs := make([]store.NewJob, 60)
		for i := range jobs {
			jobs[i] = store.NewJob{ID: fmt.Sprintf("%s-%02d", prefix, i), Queue: "big", Type: "t",
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), MaxAttempts: 3, RetryBackoffSeconds: 1, TimeoutSeconds: 60}
		}
		return jobs
	}
	check := func(what string, res []store.SubmitResult, errs []error, created bool, refused int) {
		t.Helper()
		for i, r := range res {
			if i == refused {
				if exists := (*store.JobExistsError)(nil); !errors.As(errs[i], &exists) {
					t.Fatalf("%s: job %d, its id held by other contents: %v", what, i, errs[i])
				}
				continue
			}
			if errs[i] != nil || r.Created != created || !r.Same || r.ID != fmt.Sprintf("%s-%02d", "g", i) && r.ID != fmt.Sprintf("%s-%02d", "h", i) {
				t.Fatalf("%s: job %d: %+v, %v", what, i, r, errs[i])
			}
		}
	}
	res, errs, notes := st.JobsSubmitEach(ctx, group("g"))
	check("first", res, errs, true, -1)
	rec.mu.Lock()
	for _, sent := range rec.sent {
		if strings.Contains(sent.sql, "INSERT INTO jobs") {
			t.Fatalf("60 new jobs due now were inserted by the statement, not a COPY")
		}
	}
	rec.mu.Unlock()
	if len(notes) != 1 || notes[0].N != 60 {
		t.Fatalf("wake-up notes %+v, want one for 60 jobs", notes)
	}
	res, errs, notes = st.JobsSubmitEach(ctx, group("g"))
	check("sent again", res, errs, false, -1)
	if len(notes) != 0 {
		t.Fatalf("wake-up notes %+v for jobs that existed", notes)
	}
	mixed := group("h")
	mixed[7].ID, mixed[7].Payload = "g-07", json.RawMessage(`{"other":true}`) // the id names another job
	res, errs, _ = st.JobsSubmitEach(ctx, mixed)
	check("one id taken", res, errs, true, 7)
	n, err := st.QueueDepth(ctx, "big")
	if err != nil || n != 119 {
		t.Fatalf("queue depth %d, %v; want 119", n, err)
	}
}
