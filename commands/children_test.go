package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// childrenPage is one JOB.CHILDREN reply: the next cursor, and the page's
// children by id in the order the JSON lists them.
type childrenPage struct {
	next   string
	ids    []string
	status map[string]string
}

func jobChildren(ctx context.Context, t *testing.T, c *redis.Client, args ...any) (childrenPage, error) {
	t.Helper()
	reply, err := c.Do(ctx, append([]any{"JOB.CHILDREN"}, args...)...).Slice()
	if err != nil {
		return childrenPage{}, err
	}
	if len(reply) != 2 {
		t.Fatalf("JOB.CHILDREN %v: %v", args, reply)
	}
	p := childrenPage{next: reply[0].(string), status: map[string]string{}}
	dec := json.NewDecoder(strings.NewReader(reply[1].(string)))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("JOB.CHILDREN %v: %q is no object", args, reply[1])
	}
	for dec.More() {
		tok, _ := dec.Token()
		var v struct {
			Status string `json:"status"`
		}
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("JOB.CHILDREN %v: %v", args, err)
		}
		id := tok.(string)
		p.ids, p.status[id] = append(p.ids, id), v.Status
	}
	return p, nil
}

func TestJobChildrenPagesInIDOrder(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	// 250 children of root, and one of another job that must not show.
	jobs := []map[string]any{{"job_id": "root", "queue": "kids", "delay_seconds": 3600}, {"job_id": "other", "queue": "kids"}}
	for i := range 250 {
		jobs = append(jobs, map[string]any{"job_id": fmt.Sprintf("kid-%03d", i), "queue": "kids", "after": []string{"root"}})
	}
	jobs = append(jobs, map[string]any{"job_id": "stranger", "queue": "kids", "after": []string{"other"}},
		map[string]any{"job_id": "both", "queue": "kids", "after": []string{"other", "root"}, "on_parent_failure": "run"})
	doc, _ := json.Marshal(jobs)
	if err := admin.Do(ctx, "JOB.SUBMIT", string(doc)).Err(); err != nil {
		t.Fatal(err)
	}
	var seen []string
	cursor, pages := "0", 0
	for {
		p, err := jobChildren(ctx, t, admin, "root", "CURSOR", cursor, "LIMIT", 100)
		if err != nil {
			t.Fatalf("JOB.CHILDREN root CURSOR %s: %v", cursor, err)
		}
		for _, id := range p.ids {
			if p.status[id] != "pending" {
				t.Errorf("child %s is %q, want pending", id, p.status[id])
			}
		}
		seen, pages = append(seen, p.ids...), pages+1
		if cursor = p.next; cursor == "0" {
			break
		}
		if len(p.ids) != 100 {
			t.Fatalf("page %d has %d children and a next cursor", pages, len(p.ids))
		}
	}
	if len(seen) != 251 || pages != 3 {
		t.Fatalf("%d pages gave %d children: %v", pages, len(seen), seen)
	}
	if seen[0] != "both" || seen[1] != "kid-000" || seen[250] != "kid-249" {
		t.Fatalf("children out of order: %v…%v", seen[:3], seen[248:])
	}
	for i := 2; i < len(seen); i++ {
		if seen[i-1] >= seen[i] {
			t.Fatalf("children out of order at %d: %s then %s", i, seen[i-1], seen[i])
		}
	}
	// The default page is 100; a job without children answers an empty
	// page; the statuses follow the children.
	if p, err := jobChildren(ctx, t, admin, "root"); err != nil || len(p.ids) != 100 || p.next != "kid-098" {
		t.Fatalf("default page: %d children, next %q, %v", len(p.ids), p.next, err)
	}
	if p, err := jobChildren(ctx, t, admin, "stranger"); err != nil || len(p.ids) != 0 || p.next != "0" {
		t.Fatalf("a job without children: %+v, %v", p, err)
	}
	if err := admin.Do(ctx, "JOB.CANCEL", "root").Err(); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, admin, "kid-249", "cancelled")
	p, err := jobChildren(ctx, t, admin, "root", "CURSOR", "kid-247")
	if err != nil || strings.Join(p.ids, ",") != "kid-248,kid-249" || p.status["kid-249"] != "cancelled" {
		t.Fatalf("last page after the cancel: %+v, %v", p, err)
	}
	if p, err := jobChildren(ctx, t, admin, "other"); err != nil || p.status["both"] != "pending" || p.status["stranger"] != "pending" {
		t.Fatalf("children of other: %+v, %v", p, err)
	}
}

func TestJobChildrenRefusals(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	submit(t, admin, map[string]any{"job_id": "p", "queue": "kids-bad"})
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"nope"}, "ERR no such job nope"},
		{[]any{"nope", "LIMIT", 5}, "ERR no such job nope"},
		{[]any{"p", "LIMIT", 0}, "ERR LIMIT must be between 1 and 1000"},
		{[]any{"p", "LIMIT", 1001}, "ERR LIMIT must be between 1 and 1000"},
		{[]any{"p", "LIMIT", -1}, "ERR LIMIT must be between 1 and 1000"},
		{[]any{"p", "LIMIT", "ten"}, "ERR LIMIT must be between 1 and 1000"},
		{[]any{"p", "LIMIT"}, "ERR syntax error"},
		{[]any{"p", "CURSOR"}, "ERR syntax error"},
		{[]any{"p", "FROM", "x"}, "ERR syntax error"},
		{[]any{}, "ERR wrong number of arguments for 'job.children' command"},
	} {
		err := admin.Do(ctx, append([]any{"JOB.CHILDREN"}, tc.args...)...).Err()
		if err == nil || err.Error() != tc.want {
			t.Errorf("JOB.CHILDREN %v: %v, want %s", tc.args, err, tc.want)
		}
	}
	for _, n := range []int{1, 1000} {
		if p, err := jobChildren(ctx, t, admin, "p", "LIMIT", n); err != nil || p.next != "0" {
			t.Errorf("LIMIT %d: %+v, %v", n, p, err)
		}
	}
	// Readers of jobs may list children; a worker's key only those of the
	// jobs it submitted.
	viewer := a.Client(t, redis.Options{Username: "v", Password: a.CreateKey(t, "viewer", "v")})
	if _, err := jobChildren(ctx, t, viewer, "p"); err != nil {
		t.Errorf("a viewer: %v", err)
	}
	producer := a.Client(t, redis.Options{Username: "pr", Password: a.CreateKey(t, "producer", "pr")})
	if _, err := jobChildren(ctx, t, producer, "p"); err != nil {
		t.Errorf("a producer: %v", err)
	}
	w := registerWorker(t, a, "kids-w", "t")
	if err := w.c.Do(ctx, "JOB.CHILDREN", "p").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("a worker: %v, want NOPERM", err)
	}
}
