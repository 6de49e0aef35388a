package commands_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
)

// awaitBlockedPop waits until a BRPOP is running on the node, and a moment
// more for it to find nothing and wait.
func awaitBlockedPop(t *testing.T, a *agqtest.Agq) {
	t.Helper()
	agqtest.Eventually(t, 5*time.Second, func() error {
		if list, _ := a.Admin(t).ClientList(context.Background()).Result(); !strings.Contains(list, "cmd=brpop") {
			return fmt.Errorf("not blocked yet")
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond)
}

// A job submitted while a worker able to run it waits in BRPOP is handed to
// it with the submission's commit: delivered as a claim delivers it, and
// reported on as any claimed job.
func TestABlockedPopIsHandedTheJobSubmitted(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w := registerWorker(t, a, "hand-w", "t")
	before := metric(t, a, "agq_handoffs_total")
	// A loaded machine may submit before the pop waits: then it claims
	// the job as usual, and the next round tries again.
	for round := 0; round < 5 && metric(t, a, "agq_handoffs_total") == before; round++ {
		popped := make(chan delivered, 1)
		go func() {
			_, d, _ := w.pop(t, "10", "handed")
			popped <- d
		}()
		awaitBlockedPop(t, a)
		id := submit(t, admin, map[string]any{"queue": "handed", "type": "t", "payload": map[string]any{"round": round}})
		var d delivered
		select {
		case d = <-popped:
		case <-time.After(10 * time.Second):
			t.Fatal("the blocked pop got nothing")
		}
		if d.JobID != id || d.Attempt != 1 || d.Delivery == "" || d.Queue != "handed" ||
			string(d.Payload) != fmt.Sprintf(`{"round":%d}`, round) {
			t.Fatalf("delivered %+v, want job %s", d, id)
		}
		if err := w.update(ctx, id, map[string]any{"status": "completed", "delivery": d.Delivery}); err != nil {
			t.Fatal(err)
		}
		if v := getJob(t, admin, id); v.Status != "completed" || v.Attempt != 1 {
			t.Fatalf("after its completion: %+v", v)
		}
	}
	if metric(t, a, "agq_handoffs_total") == before {
		t.Fatal("five jobs submitted to a waiting pop, none handed over")
	}
}

// A waiting pop offered a job the database does not hand over (here, 64
// older jobs for other workers fill the queue's bounded look) waits as
// before and is woken at once: it claims the job as usual, well before any
// periodic re-check.
func TestAPopOfferedAJobNotHandedOverClaimsIt(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	w := registerWorker(t, a, "offer-w", "t")
	docs := make([]string, 64)
	for i := range docs {
		docs[i] = `{"queue":"offered","type":"gpu"}` // not for offer-w
	}
	if err := admin.Do(context.Background(), "JOB.SUBMIT", "["+strings.Join(docs, ",")+"]").Err(); err != nil {
		t.Fatal(err)
	}
	before := metric(t, a, "agq_handoffs_total")
	popped := make(chan delivered, 1)
	go func() {
		_, d, _ := w.pop(t, "10", "offered")
		popped <- d
	}()
	awaitBlockedPop(t, a)
	id := submit(t, admin, map[string]any{"queue": "offered", "type": "t"})
	select {
	case d := <-popped:
		if d.JobID != id {
			t.Fatalf("popped %+v, want %s", d, id)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the pop was not woken for a job it can run")
	}
	if metric(t, a, "agq_handoffs_total") != before {
		t.Fatal("a job was handed over past a full look at its queue")
	}
}
