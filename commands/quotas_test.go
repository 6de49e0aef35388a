package commands_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// MAXUNFINISHED holds across two nodes: concurrent submissions to both
// never leave the namespace more unfinished jobs than its most; a batch
// past it stores nothing; a re-sent job answers its id; a job that ends
// makes room; other namespaces are not counted.
func TestMaxUnfinishedHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	onA := a.InNamespace(t, "capped", "producer", "cap-a")
	keyB, err := admin.Do(ctx, "KEY.CREATE", "producer", "cap-b", "NAMESPACE", "capped").Text()
	if err != nil {
		t.Fatal(err)
	}
	onB := b.Client(t, redis.Options{Username: "cap-b", Password: keyB})
	if err := admin.Do(ctx, "NAMESPACE.CONFIG", "capped", "MAXUNFINISHED", "10").Err(); err != nil {
		t.Fatal(err)
	}
	const refusal = "ERR namespace capped holds 10 unfinished jobs, its most"

	var mu sync.Mutex
	accepted, refused := 0, 0
	var wg sync.WaitGroup
	for i := range 40 {
		c := onA
		if i%2 == 1 {
			c = onB
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Do(ctx, "JOB.SUBMIT", fmt.Sprintf(`{"job_id":"j-%d","queue":"q"}`, i)).Err()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted++
			case err.Error() == refusal:
				refused++
			default:
				t.Errorf("submission %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if accepted != 10 || refused != 30 {
		t.Fatalf("accepted %d and refused %d of 40; want 10 and 30", accepted, refused)
	}
	// A job stored already answers its id.
	var stored string
	for i := range 40 {
		if onA.Do(ctx, "JOB.GET", fmt.Sprintf("j-%d", i)).Err() == nil {
			stored = fmt.Sprintf("j-%d", i)
			break
		}
	}
	if got, err := onB.Do(ctx, "JOB.SUBMIT", `{"job_id":"`+stored+`","queue":"q"}`).Text(); err != nil || got != stored {
		t.Fatalf("re-sending %s = %q, %v", stored, got, err)
	}
	// A batch past the most stores nothing.
	if err := onA.Do(ctx, "JOB.SUBMIT", `[{"job_id":"x-1","queue":"q"},{"job_id":"x-2","queue":"q"}]`).Err(); err == nil || err.Error() != refusal {
		t.Fatalf("a batch past the most = %v", err)
	}
	if onA.Do(ctx, "JOB.GET", "x-1").Err() != redis.Nil {
		t.Fatal("a refused batch stored its first job")
	}
	// Other namespaces are not counted.
	if err := admin.Do(ctx, "JOB.SUBMIT", `{"job_id":"free-1","queue":"q"}`).Err(); err != nil {
		t.Fatalf("the default namespace refused: %v", err)
	}
	// An ended job makes room.
	conn := admin.Conn()
	defer conn.Close()
	if err := conn.Do(ctx, "NAMESPACE", "capped").Err(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Do(ctx, "JOB.CANCEL", stored).Err(); err != nil {
		t.Fatal(err)
	}
	if err := onB.Do(ctx, "JOB.SUBMIT", `{"job_id":"after-room","queue":"q"}`).Err(); err != nil {
		t.Fatalf("after a job ended: %v", err)
	}
	cfg, err := admin.Do(ctx, "NAMESPACE.CONFIG", "capped").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.(map[any]any)
	if m["unfinished"] != int64(10) || m["submitted_last_minute"] != int64(11) {
		t.Errorf("NAMESPACE.CONFIG counts: %v", m)
	}
}

// SUBMITRATE holds across two nodes within its window, with TRYAGAIN.
func TestSubmitRateHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	onA := a.InNamespace(t, "slow", "producer", "rate-a")
	keyB, err := admin.Do(ctx, "KEY.CREATE", "producer", "rate-b", "NAMESPACE", "slow").Text()
	if err != nil {
		t.Fatal(err)
	}
	onB := b.Client(t, redis.Options{Username: "rate-b", Password: keyB})
	if err := admin.Do(ctx, "NAMESPACE.CONFIG", "slow", "SUBMITRATE", "5", "PER", "3600").Err(); err != nil {
		t.Fatal(err)
	}
	var errs []string
	for i := range 8 {
		c := onA
		if i%2 == 1 {
			c = onB
		}
		if err := c.Do(ctx, "JOB.SUBMIT", fmt.Sprintf(`{"job_id":"r-%d","queue":"q"}`, i)).Err(); err != nil {
			errs = append(errs, fmt.Sprintf("%d: %v", i, err))
		}
	}
	want := "5: TRYAGAIN namespace slow is over its submission rate|6: TRYAGAIN namespace slow is over its submission rate|7: TRYAGAIN namespace slow is over its submission rate"
	if strings.Join(errs, "|") != want {
		t.Fatalf("refusals = %q", errs)
	}
}

// A namespace's MAXRUNNING 3 over two queues, worked by ten free workers
// of the namespace on two nodes: the namespace never runs more than three
// jobs at once (sampled from the database throughout), every job
// completes, and the default namespace's work is not held by it.
func TestNamespaceMaxRunningHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := context.Background()
	admin := a.Admin(t)
	producer := a.InNamespace(t, "narrow", "producer", "narrow-p")
	if err := admin.Do(ctx, "NAMESPACE.CONFIG", "narrow", "MAXRUNNING", "3").Err(); err != nil {
		t.Fatal(err)
	}
	var workers []*testWorker
	for i := range 10 {
		node := a
		if i%2 == 1 {
			node = b
		}
		workers = append(workers, namespaceWorker(t, node, admin, "narrow", fmt.Sprintf("narrow-w%d", i)))
	}
	for i := range 24 {
		queue := []string{"left", "right"}[i%2]
		if err := producer.Do(ctx, "JOB.SUBMIT", fmt.Sprintf(`{"queue":%q}`, queue)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The default namespace is not capped by narrow's limit.
	free := registerWorker(t, a, "free-w", "x")
	submit(t, admin, map[string]any{"queue": "left"})

	stop := sampleMost(func() (int, error) {
		m, err := admin.Do(ctx, "NAMESPACE.CONFIG", "narrow").Result()
		if err != nil {
			return 0, err
		}
		return int(m.(map[any]any)["running"].(int64)), nil
	})
	var freeDone sync.WaitGroup
	freeDone.Go(func() {
		if _, _, ok := free.pop(t, "10", "left"); !ok {
			t.Error("the default namespace's job was not delivered")
		}
	})
	done := workQueues(t, workers, []string{"left", "right"}, 24, func(delivered) time.Duration { return 30 * time.Millisecond },
		time.Now().Add(60*time.Second))
	capHeld(t, stop, len(done), 24, 3)
	freeDone.Wait()
}

// Loosening a namespace's MAXRUNNING wakes, on every node, the pops the
// cap held back: the held pop gets its job at once.
func TestLooseningMaxRunningWakesHeldPops(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := context.Background()
	admin := a.Admin(t)
	producer := a.InNamespace(t, "loose", "producer", "loose-p")
	if err := admin.Do(ctx, "NAMESPACE.CONFIG", "loose", "MAXRUNNING", "1").Err(); err != nil {
		t.Fatal(err)
	}
	holder, held := namespaceWorker(t, a, admin, "loose", "loose-w1"), namespaceWorker(t, b, admin, "loose", "loose-w2")
	for range 2 {
		if err := producer.Do(ctx, "JOB.SUBMIT", `{"queue":"lq"}`).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok := holder.pop(t, "2", "lq"); !ok {
		t.Fatal("the first job was not delivered")
	}
	popped := make(chan error, 1)
	go func() {
		// Blocked for 3 s, of which 2 after the cap is loosened: a
		// fraction of the 15 s between the rechecks that would find
		// the job anyway.
		_, err := held.c.Do(ctx, "BRPOP", "queue:lq", "3").StringSlice()
		popped <- err
	}()
	select {
	case err := <-popped:
		t.Fatalf("the second pop returned under the cap: %v", err)
	case <-time.After(time.Second):
	}
	if err := admin.Do(ctx, "NAMESPACE.CONFIG", "loose", "MAXRUNNING", "2").Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-popped; err != nil {
		t.Fatalf("the held pop once the cap was loosened: %v", err)
	}
}

// namespaceWorker is worker id, with a worker key of namespace ns minted
// by admin, connected to node and registered there.
func namespaceWorker(t *testing.T, node *agqtest.Agq, admin *redis.Client, ns, id string) *testWorker {
	t.Helper()
	ctx := context.Background()
	key, err := admin.Do(ctx, "KEY.CREATE", "worker", id, "NAMESPACE", ns).Text()
	if err != nil {
		t.Fatal(err)
	}
	c := node.Client(t, redis.Options{Username: id, Password: key})
	doc := fmt.Sprintf(`{"worker_id":%q,"hostname":"h","agw_version":"1","capabilities":{"tools":[]}}`, id)
	if err := c.Do(ctx, "WORKER.REGISTER", doc).Err(); err != nil {
		t.Fatal(err)
	}
	return &testWorker{id: id, c: c}
}
