package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/records"
)

// A large group of single submissions goes as one COPY; sent again, or with
// one id held by other contents, each job still gets its own outcome.
func TestLargeSubmissionGroupsKeepEachOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := newRecordingStore(ctx, t)
	st := rec.st
	group := func(prefix string) []records.NewJob {
		jobs := make([]records.NewJob, 60)
		for i := range jobs {
			jobs[i] = records.NewJob{ID: fmt.Sprintf("%s-%02d", prefix, i), Queue: "big", Type: "t",
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), MaxAttempts: 3, RetryBackoffSeconds: 1, TimeoutSeconds: 60}
		}
		return jobs
	}
	check := func(what string, res []records.SubmitResult, errs []error, created bool, refused int) {
		t.Helper()
		for i, r := range res {
			if i == refused {
				if exists := (*records.JobExistsError)(nil); !errors.As(errs[i], &exists) {
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

// A small group of single submissions goes as one lean statement; the jobs
// it skips (an id or a unique_key held) get their outcomes from the
// statement that sorts them out, as does a group naming one id twice.
func TestSmallSubmissionGroupsKeepEachOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := newRecordingStore(ctx, t)
	st := rec.st
	job := func(id, key string, payload string) records.NewJob {
		return records.NewJob{ID: id, Queue: "small", Type: "t", Requires: []string{"a", "b"}, UniqueKey: key,
			Payload: json.RawMessage(payload), MaxAttempts: 3, RetryBackoffSeconds: 1, TimeoutSeconds: 60}
	}
	careful := func() int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := 0
		for _, s := range rec.sent {
			if strings.Contains(s.sql, "WITH reqs AS MATERIALIZED") {
				n++
			}
		}
		rec.sent = nil
		return n
	}
	res, errs, notes := st.JobsSubmitEach(ctx, []records.NewJob{job("s-1", "", `{"n":1}`), job("s-2", "key-2", `{"n":2}`)})
	for i, r := range res {
		if errs[i] != nil || !r.Created {
			t.Fatalf("fresh job %d: %+v, %v", i, r, errs[i])
		}
	}
	if n := careful(); n != 0 {
		t.Fatalf("fresh jobs took the sorting statement %d times", n)
	}
	bare := job("s-0", "", `{}`)
	bare.Requires = nil
	if _, errs, _ := st.JobsSubmitEach(ctx, []records.NewJob{bare, job("s-9", "", `{"n":9}`)}); errs[0] != nil || errs[1] != nil {
		t.Fatalf("jobs with and without requirements: %v", errs)
	}
	careful()
	for id, reqs := range map[string]string{"s-1": "a,b", "s-2": "a,b", "s-0": "", "s-9": "a,b"} {
		j, err := st.JobGet(ctx, id)
		if err != nil || strings.Join(j.Requires, ",") != reqs || j.Status != records.StatusQueued {
			t.Fatalf("%s: %+v, %v; want requires %q", id, j, err, reqs)
		}
	}
	if len(notes) != 1 || notes[0].N != 2 || strings.Join(notes[0].Requires, ",") != "a,b" {
		t.Fatalf("wake-up notes %+v", notes)
	}
	res, errs, notes = st.JobsSubmitEach(ctx, []records.NewJob{
		job("s-3", "", `{"n":3}`),        // fresh
		job("s-1", "", `{"n":1}`),        // sent again
		job("s-2", "", `{"other":true}`), // the id names another job
		job("s-4", "key-2", `{"n":4}`),   // the key is held by s-2
	})
	want := []struct {
		id      string
		created bool
		exists  bool
	}{{"s-3", true, false}, {"s-1", false, false}, {"", false, true}, {"s-2", false, false}}
	for i, w := range want {
		var exists *records.JobExistsError
		if w.exists {
			if !errors.As(errs[i], &exists) {
				t.Fatalf("job %d: %+v, %v; want the id refused", i, res[i], errs[i])
			}
			continue
		}
		if errs[i] != nil || res[i].ID != w.id || res[i].Created != w.created {
			t.Fatalf("job %d: %+v, %v; want %s created=%v", i, res[i], errs[i], w.id, w.created)
		}
	}
	if n := careful(); n != 1 {
		t.Fatalf("the skipped jobs took the sorting statement %d times, want once", n)
	}
	if len(notes) != 1 || notes[0].N != 1 {
		t.Fatalf("wake-up notes %+v, want one for the one new job", notes)
	}
	// Two jobs of a group naming one id: the group takes the sorting
	// statement, and the second shares the first's outcome.
	res, errs, _ = st.JobsSubmitEach(ctx, []records.NewJob{job("s-5", "", `{"n":5}`), job("s-5", "", `{"n":5}`)})
	if errs[0] != nil || errs[1] != nil || res[0].ID != "s-5" || !res[0].Created || res[1].ID != "s-5" || res[1].Created {
		t.Fatalf("one id twice in a group: %+v, %v", res, errs)
	}
	if n := careful(); n != 1 {
		t.Fatalf("a group naming one id twice took the sorting statement %d times, want once", n)
	}
	if n, err := st.QueueDepth(ctx, "small"); err != nil || n != 6 {
		t.Fatalf("queue depth %d, %v; want 6", n, err)
	}
}
