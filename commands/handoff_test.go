package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// Pops that end while a job is being handed to them lose nothing and
// deliver nothing twice: four connections of one worker pop with 10 ms
// timeouts while single jobs arrive, so some pops time out between being
// offered a job and its group's commit (the job is given back: queued
// again, the attempt not counted) or just after it. Every job ends
// completed at its first attempt, delivered to exactly one pop.
func TestPopsEndingMidHandOffLoseNoJob(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	w := registerWorker(t, a, "midhand-w", "t")

	sub := admin.Subscribe(ctx, "queue.midhand.events")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	var released atomic.Int64
	go func() {
		for m := range sub.Channel() {
			if strings.Contains(m.Payload, `"event":"released"`) {
				released.Add(1)
			}
		}
	}()

	var mu sync.Mutex
	deliveries := map[string]int{}
	stop := make(chan struct{})
	var popping sync.WaitGroup
	for range 4 {
		popping.Add(1)
		go func() {
			defer popping.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := w.c.Do(ctx, "BRPOP", "queue:midhand", "0.01").StringSlice()
				if err == redis.Nil {
					continue
				}
				if err != nil {
					t.Errorf("BRPOP: %v", err)
					return
				}
				var d delivered
				if err := json.Unmarshal([]byte(res[1]), &d); err != nil {
					t.Errorf("delivered %q: %v", res[1], err)
					return
				}
				mu.Lock()
				deliveries[d.JobID]++
				mu.Unlock()
				if err := w.update(ctx, d.JobID, map[string]any{"status": "completed", "delivery": d.Delivery}); err != nil {
					t.Errorf("completing %s: %v", d.JobID, err)
					return
				}
			}
		}()
	}

	var ids []string
	for round := 0; round < 20 && (round < 2 || released.Load() == 0); round++ {
		for i := range 50 {
			ids = append(ids, submit(t, admin, map[string]any{"queue": "midhand", "type": "t"}))
			time.Sleep(time.Duration(i%7) * time.Millisecond)
		}
	}
	agqtest.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(deliveries) < len(ids) {
			return fmt.Errorf("%d of %d jobs delivered", len(deliveries), len(ids))
		}
		return nil
	})
	close(stop)
	popping.Wait()

	for _, id := range ids {
		if n := deliveries[id]; n != 1 {
			t.Errorf("job %s delivered %d times", id, n)
		}
		if v := getJob(t, admin, id); v.Status != "completed" || v.Attempt != 1 {
			t.Errorf("job %s ended %s at attempt %d", id, v.Status, v.Attempt)
		}
	}
	if len(deliveries) != len(ids) {
		t.Errorf("%d jobs delivered, %d submitted", len(deliveries), len(ids))
	}
	if released.Load() == 0 {
		t.Fatalf("no pop ended mid hand-off in %d jobs", len(ids))
	}
	t.Logf("%d jobs, %d given back by pops that ended mid hand-off", len(ids), released.Load())
}
