package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// A job after 10,000 parents is queued within a second of the last
// parent's completion, its parents completed by batched workers whose
// reports share commits.
func TestAJobAfterTenThousandParentsIsQueuedWithinASecondOfTheLast(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	const n = 10000
	parents := make([]map[string]any, n)
	after := make([]string, n)
	for i := range n {
		after[i] = fmt.Sprintf("fan-%05d", i)
		parents[i] = map[string]any{"job_id": after[i], "queue": "fanin", "type": "f"}
	}
	doc, _ := json.Marshal(parents)
	if err := admin.Do(ctx, "JOB.SUBMIT", string(doc)).Err(); err != nil {
		t.Fatal(err)
	}
	doc, _ = json.Marshal(map[string]any{"job_id": "fan-in", "queue": "fanin-child", "type": "f", "after": after})
	if err := admin.Do(ctx, "JOB.SUBMIT", string(doc)).Err(); err != nil {
		t.Fatal(err)
	}
	w := registerWorker(t, a, "fanin-w", "f")
	var last time.Time
	for done := 0; done < n; {
		res, err := w.c.Do(ctx, "BLMPOP", "1", "1", "queue:fanin", "RIGHT", "COUNT", "500").Slice()
		if err != nil {
			t.Fatalf("BLMPOP after %d: %v", done, err)
		}
		pipe := w.c.Pipeline()
		for _, raw := range res[1].([]any) {
			var d delivered
			if err := json.Unmarshal([]byte(raw.(string)), &d); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(map[string]any{"status": "completed", "delivery": d.Delivery})
			pipe.Do(ctx, "JOB.UPDATE", d.JobID, string(b))
			done++
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		last = time.Now()
	}
	var queuedAt time.Time
	agqtest.Eventually(t, 10*time.Second, func() error {
		if s := getChild(t, admin, "fan-in").Status; s != "queued" {
			return fmt.Errorf("fan-in is %s", s)
		}
		queuedAt = time.Now()
		return nil
	})
	t.Logf("queued %v after the last parent's completion", queuedAt.Sub(last).Round(time.Millisecond))
	if queuedAt.Sub(last) > time.Second {
		t.Fatalf("queued %v after the last parent's completion", queuedAt.Sub(last))
	}
	if _, err := w.c.Do(ctx, "BRPOP", "queue:fanin-child", "1").StringSlice(); err == redis.Nil || err != nil {
		t.Fatalf("popping the child: %v", err)
	}
}
