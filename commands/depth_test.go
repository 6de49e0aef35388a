package commands_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
)

// LPUSH into a queue too deep to count on every push still answers a lone
// pusher's depth exactly: jobs it made ready count, scheduled and re-sent
// ones do not. Jobs popped meanwhile show once the queue is counted again,
// and a queue no longer deep is counted on every push again.
func TestLPushIntoADeepQueue(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	lpush := func(docs ...string) int64 {
		t.Helper()
		args := []any{"LPUSH", "queue:deep"}
		for _, d := range docs {
			args = append(args, d)
		}
		n, err := admin.Do(ctx, args...).Int64()
		if err != nil {
			t.Fatalf("LPUSH: %v", err)
		}
		return n
	}
	llen := func() int64 {
		t.Helper()
		n, err := admin.Do(ctx, "LLEN", "queue:deep").Int64()
		if err != nil {
			t.Fatalf("LLEN: %v", err)
		}
		return n
	}

	docs := make([]string, 1200)
	for i := range docs {
		docs[i] = fmt.Sprintf(`{"job_id":"deep-%04d","type":"t"}`, i)
	}
	if n := lpush(docs...); n != 1200 {
		t.Fatalf("LPUSH of 1200 jobs answered %d", n)
	}
	steps := []struct {
		doc  string
		want int64
	}{
		{`{"job_id":"one-more","type":"t"}`, 1201},
		{`{"job_id":"later","type":"t","delay_seconds":600}`, 1201},
		{`{"job_id":"one-more","type":"t"}`, 1201},
		{`{"type":"t"}`, 1202},
	}
	for _, s := range steps {
		if n := lpush(s.doc); n != s.want {
			t.Fatalf("LPUSH %s answered %d, want %d", s.doc, n, s.want)
		}
	}
	if n := llen(); n != 1202 {
		t.Fatalf("LLEN %d, want 1202", n)
	}

	w := registerWorker(t, a, "deep-w", "t")
	for i := 0; i < 300; i++ {
		if _, _, ok := w.pop(t, "1", "deep"); !ok {
			t.Fatalf("pop %d found nothing", i)
		}
	}
	start := time.Now()
	var pushed, counted int64
	for {
		pushed = lpush(`{"type":"t"}`)
		counted = llen()
		if pushed == counted {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("LPUSH still answers %d ten seconds after 300 pops; LLEN %d", pushed, counted)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Shallow again: every push is counted.
	for i := 0; i < 3; i++ {
		if n, want := lpush(`{"type":"t"}`), counted+int64(i)+1; n != want {
			t.Fatalf("LPUSH into a queue %d deep answered %d", want, n)
		}
	}
}
