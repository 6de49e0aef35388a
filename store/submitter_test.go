package store_test

import (
	"testing"
	"time"

	"github.com/agq/agq/records"
)

// A job records the worker principal whose key submitted it, whichever
// way in it takes — a group of single submissions (some due now, some
// later), a batch, a graph — and keeps the first submitter when another
// key sends it again; jobs of other keys record none, by the fast ways in
// too.
func TestAJobRecordsTheWorkerKeyThatSubmittedIt(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	by := func(j records.NewJob, who string) records.NewJob {
		j.SubmittedBy = who
		return j
	}
	later := trJob("sb-later", 1, 1)
	later.RunAt = time.Now().Add(time.Hour)
	child := trJob("sb-child", 1, 1)
	child.After = []string{"sb-batch-0"}

	res, errs, _ := b.st.JobsSubmitEach(b.ctx, []records.NewJob{
		by(trJob("sb-each", 1, 1), "spawner"), by(later, "spawner"), trJob("sb-plain", 1, 1)})
	for i, err := range errs {
		if err != nil || res[i].ID == "" {
			t.Fatalf("submission %d: %+v, %v", i, res[i], err)
		}
	}
	b.submit(t, by(trJob("sb-batch-0", 1, 1), "spawner"), by(trJob("sb-batch-1", 1, 1), "other"), by(child, "spawner"))
	b.submit(t, trJob("sb-copied-0", 1, 1), trJob("sb-copied-1", 1, 1)) // due now, no submitter: by COPY
	// Sent again by another key: still the first's.
	b.submit(t, by(trJob("sb-plain", 1, 1), "spawner"), by(trJob("sb-batch-0", 1, 1), "other"))
	for id, want := range map[string]string{
		"sb-each": "spawner", "sb-later": "spawner", "sb-plain": "",
		"sb-batch-0": "spawner", "sb-batch-1": "other", "sb-child": "spawner",
		"sb-copied-0": "", "sb-copied-1": "",
	} {
		j, err := b.st.JobGet(b.ctx, id)
		if err != nil {
			t.Fatalf("JobGet %s: %v", id, err)
		}
		if j.SubmittedBy != want {
			t.Errorf("job %s submitted by %q, want %q", id, j.SubmittedBy, want)
		}
	}
}
