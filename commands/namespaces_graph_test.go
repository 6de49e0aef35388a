package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// Two namespaces hold jobs of the same ids: the keys of one reach their
// own jobs' steps, signals, parents, children and control, and answer for
// the other's exactly as for jobs that do not exist.

// nsGraph is a server with namespaces team-a and team-b, a worker and an
// admin in each, and the database to lay jobs down in.
type nsGraph struct {
	t                  *testing.T
	ctx                context.Context
	db                 *pgx.Conn
	workerA, workerB   *redis.Client
	adminA, adminB     *redis.Client
	producerA, produce *redis.Client
}

func newNSGraph(t *testing.T) *nsGraph {
	t.Helper()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	db, err := pgx.Connect(ctx, a.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	g := &nsGraph{t: t, ctx: ctx, db: db,
		workerA: a.InNamespace(t, "team-a", "worker", "wa"), workerB: a.InNamespace(t, "team-b", "worker", "wb"),
		adminA: a.InNamespace(t, "team-a", "admin", "boss-a"), adminB: a.InNamespace(t, "team-b", "admin", "boss-b"),
		producerA: a.InNamespace(t, "team-a", "producer", "pa"), produce: a.InNamespace(t, "team-b", "producer", "pb")}
	for id, c := range map[string]*redis.Client{"wa": g.workerA, "wb": g.workerB} {
		reg, _ := json.Marshal(map[string]any{"worker_id": id, "hostname": "h", "agw_version": "0.1.0",
			"capabilities": map[string]any{"tools": []string{"t"}}})
		if err := c.Do(ctx, "WORKER.REGISTER", string(reg)).Err(); err != nil {
			t.Fatalf("WORKER.REGISTER %s: %v", id, err)
		}
	}
	return g
}

// put lays job id down in namespace ns, held by worker when running; the
// test is about what comes after a job is stored and delivered.
func (g *nsGraph) put(ns, id, status, worker string, after ...string) {
	g.t.Helper()
	var holder *string
	if worker != "" {
		holder = &worker
	}
	var parents []string
	if len(after) > 0 {
		parents = after
	}
	if _, err := g.db.Exec(g.ctx, `
		INSERT INTO jobs (namespace, id, queue, type, requires, status, attempt, max_attempts, timeout_seconds,
			worker_id, delivery, after, has_children)
		VALUES ($1, $2, 'q', 't', '{t}', $3, CASE WHEN $3 = 'running' THEN 1 ELSE 0 END, 3, 600,
			$4, CASE WHEN $3 = 'running' THEN gen_random_uuid() END, $5, false)`,
		ns, id, status, holder, parents); err != nil {
		g.t.Fatal(err)
	}
	for _, p := range after {
		if _, err := g.db.Exec(g.ctx, `UPDATE jobs SET has_children = true WHERE namespace = $1 AND id = $2`, ns, p); err != nil {
			g.t.Fatal(err)
		}
		if status == "pending" {
			if _, err := g.db.Exec(g.ctx, `INSERT INTO job_waits (namespace, parent_id, child_id) VALUES ($1, $2, $3)`, ns, p, id); err != nil {
				g.t.Fatal(err)
			}
		}
	}
}

// status is job id's status in namespace ns, as stored.
func (g *nsGraph) status(ns, id string) string {
	g.t.Helper()
	var st string
	if err := g.db.QueryRow(g.ctx, `SELECT status FROM jobs_all WHERE namespace = $1 AND id = $2`, ns, id).Scan(&st); err != nil {
		g.t.Fatalf("%s's job %s: %v", ns, id, err)
	}
	return st
}

// do runs a command and answers its reply as text, or its error's.
func (g *nsGraph) do(c *redis.Client, args ...any) string {
	g.t.Helper()
	v, err := c.Do(g.ctx, args...).Result()
	if err != nil {
		return err.Error()
	}
	if s, ok := v.(string); ok {
		return s
	}
	return replyText(v)
}

// eventually polls until job id of namespace ns has status want.
func (g *nsGraph) eventually(ns, id, want string) {
	g.t.Helper()
	agqtest.Eventually(g.t, 10*time.Second, func() error {
		if st := g.status(ns, id); st != want {
			return fmt.Errorf("%s's %s is %s, want %s", ns, id, st, want)
		}
		return nil
	})
}

// children are the ids and statuses of JOB.CHILDREN's first page.
func (g *nsGraph) children(c *redis.Client, id string) map[string]string {
	g.t.Helper()
	p, err := jobChildren(g.ctx, g.t, c, id)
	if err != nil {
		g.t.Fatalf("JOB.CHILDREN %s: %v", id, err)
	}
	return p.status
}

func TestNamespacesKeepStepCallsApart(t *testing.T) {
	t.Parallel()
	g := newNSGraph(t)
	g.put("team-a", "j", "running", "wa")
	g.put("team-b", "j", "running", "wb")
	g.put("team-a", "only-a", "running", "wa")

	if got := g.do(g.workerA, "STEP.BEGIN", "j", "s1", `{"input":1}`); got != `{"execute":true,"attempt":1}` {
		t.Fatalf("STEP.BEGIN in a = %s", got)
	}
	if got := g.do(g.workerA, "STEP.COMPLETE", "j", "s1", `"from a"`); got != "OK" {
		t.Fatalf("STEP.COMPLETE in a = %s", got)
	}
	// b's job of the same id runs its own step: a's output is not its.
	if got := g.do(g.workerB, "STEP.BEGIN", "j", "s1", `{"input":1}`); got != `{"execute":true,"attempt":1}` {
		t.Fatalf("STEP.BEGIN in b = %s; want b's own first attempt", got)
	}
	if got := g.do(g.workerA, "STEP.BEGIN", "j", "s1", `{"input":1}`); got != `{"execute":false,"output":"from a"}` {
		t.Fatalf("STEP.BEGIN again in a = %s; want a's output", got)
	}
	if steps := jobSteps(t, g.adminB, "j"); len(steps) != 1 || steps[0].Status != "running" {
		t.Fatalf("JOB.STEPS in b = %+v; want b's running step alone", steps)
	}

	// a's job is no job of b's: every step call answers as for a missing
	// job.
	for _, args := range [][]any{
		{"STEP.BEGIN", "only-a", "s1"},
		{"STEP.COMPLETE", "only-a", "s1"},
		{"STEP.FAIL", "only-a", "s1", `{"message":"x"}`},
		{"STEP.SLEEP", "only-a", "s1", "5"},
		{"STEP.WAIT", "only-a", "s1", "SIGNAL", "go"},
		{"STEP.BEGIN", "no-such-job", "s1"},
	} {
		want := "ERR no such job " + args[1].(string)
		if got := g.do(g.workerB, args...); got != want {
			t.Errorf("%v from b = %s; want %s", args, got, want)
		}
	}
	if got, want := g.do(g.adminB, "JOB.STEPS", "only-a"), g.do(g.adminB, "JOB.STEPS", "no-such-job"); got != strings.Replace(want, "no-such-job", "only-a", 1) {
		t.Errorf("JOB.STEPS only-a from b = %s; want as for a missing job: %s", got, want)
	}
	if g.status("team-a", "only-a") != "running" {
		t.Error("a's job moved")
	}
}

func TestNamespacesKeepSignalsApartOnTheWire(t *testing.T) {
	t.Parallel()
	g := newNSGraph(t)
	g.put("team-a", "w", "running", "wa")
	g.put("team-b", "w", "running", "wb")
	g.put("team-a", "only-a", "queued", "")
	for _, c := range []*redis.Client{g.workerA, g.workerB} {
		if got := g.do(c, "STEP.WAIT", "w", "approval", "SIGNAL", "go"); !strings.HasPrefix(got, "AWAITING") {
			t.Fatalf("STEP.WAIT = %s", got)
		}
	}
	if got := g.do(g.producerA, "JOB.SIGNAL", "w", "go", `{"by":"a"}`); got != "OK" {
		t.Fatalf("JOB.SIGNAL in a = %s", got)
	}
	if st := g.status("team-a", "w"); st != "queued" {
		t.Errorf("a's job is %s after its signal, want queued", st)
	}
	if st := g.status("team-b", "w"); st != "awaiting" {
		t.Errorf("b's job is %s after a's signal, want awaiting", st)
	}
	var n int
	if err := g.db.QueryRow(g.ctx, `SELECT count(*) FROM job_signals WHERE namespace = 'team-b'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("b holds %d signals (%v), want none", n, err)
	}
	if got := g.do(g.produce, "JOB.SIGNAL", "only-a", "go", "1"); got != "ERR no such job only-a" {
		t.Errorf("JOB.SIGNAL from b to a's job = %s, want as for a missing job", got)
	}
	// STEP.WAIT … JOBS awaits jobs of its own namespace only.
	g.put("team-b", "waiter", "running", "wb")
	if got, missing := g.do(g.workerB, "STEP.WAIT", "waiter", "kids2", "JOBS", "only-a"), g.do(g.workerB, "STEP.WAIT", "waiter", "kids3", "JOBS", "nowhere"); got != strings.Replace(missing, "nowhere", "only-a", 1) {
		t.Errorf("STEP.WAIT JOBS only-a from b = %s; want as for a missing job: %s", got, missing)
	}
}

func TestNamespacesKeepParentsAndChildrenApart(t *testing.T) {
	t.Parallel()
	g := newNSGraph(t)
	// a: p → c; b: a job p of its own, without children, and a child of
	// its own p-only-in-name, k.
	g.put("team-a", "p", "queued", "")
	g.put("team-a", "c", "pending", "", "p")
	g.put("team-b", "p", "queued", "")
	g.put("team-b", "k", "running", "wb", "p")

	if got := g.children(g.adminA, "p"); !reflect.DeepEqual(got, map[string]string{"c": "pending"}) {
		t.Errorf("JOB.CHILDREN p in a = %v", got)
	}
	if got := g.children(g.adminB, "p"); !reflect.DeepEqual(got, map[string]string{"k": "running"}) {
		t.Errorf("JOB.CHILDREN p in b = %v; want b's k alone", got)
	}
	if got := g.do(g.adminB, "JOB.CHILDREN", "c"); got != "ERR no such job c" {
		t.Errorf("JOB.CHILDREN of a's c from b = %s, want as for a missing job", got)
	}
	if got := g.do(g.workerB, "JOB.PARENTS", "k"); !strings.Contains(got, `{\"p\":{\"status\":\"queued\"`) {
		t.Errorf("JOB.PARENTS k in b = %s; want b's p", got)
	}
	if got := g.do(g.adminB, "JOB.PARENTS", "c"); got != "ERR no such job c" {
		t.Errorf("JOB.PARENTS of a's c from b = %s, want as for a missing job", got)
	}

	// A job of b's after a's c names a job that does not exist.
	missing := g.do(g.produce, "JOB.SUBMIT", `{"type":"t","queue":"q","after":["nowhere"]}`)
	if got := g.do(g.produce, "JOB.SUBMIT", `{"type":"t","queue":"q","after":["c"]}`); got != strings.Replace(missing, "nowhere", "c", 1) ||
		!strings.HasPrefix(got, "ERR") {
		t.Errorf("JOB.SUBMIT after a's c from b = %s; want as for a missing parent: %s", got, missing)
	}

	// a's p ending (its mark settled by the leader's sweep) releases a's
	// c, and not b's child waiting on b's p of the same id.
	g.put("team-b", "pending-kid", "pending", "", "p")
	if _, err := g.db.Exec(g.ctx, `UPDATE jobs SET status = 'completed', finished_at = now() WHERE namespace = 'team-a' AND id = 'p'`); err != nil {
		t.Fatal(err)
	}
	g.eventually("team-a", "c", "queued")
	if st := g.status("team-b", "pending-kid"); st != "pending" {
		t.Errorf("b's child of p is %s after a's p completed, want pending", st)
	}
}

func TestNamespacesKeepJobControlApart(t *testing.T) {
	t.Parallel()
	g := newNSGraph(t)
	g.put("team-a", "p", "queued", "")
	g.put("team-a", "c", "pending", "", "p")
	g.put("team-b", "p", "queued", "")
	g.put("team-b", "c", "pending", "", "p")
	g.put("team-a", "only-a", "failed", "")

	if got := g.do(g.adminB, "JOB.CANCEL", "p", "CASCADE"); got != "OK" {
		t.Fatalf("JOB.CANCEL p CASCADE in b = %s", got)
	}
	g.eventually("team-b", "c", "cancelled")
	for id, want := range map[string]string{"p": "queued", "c": "pending"} {
		if st := g.status("team-a", id); st != want {
			t.Errorf("a's %s is %s after b's cascade, want %s", id, st, want)
		}
	}
	if got := g.do(g.adminB, "JOB.RETRY", "p"); got != "OK" {
		t.Fatalf("JOB.RETRY p in b = %s", got)
	}
	g.eventually("team-b", "p", "queued")

	for _, args := range [][]any{
		{"JOB.CANCEL", "only-a"},
		{"JOB.CANCEL", "only-a", "CASCADE"},
		{"JOB.RETRY", "only-a"},
		{"JOB.RETRY", "only-a", "FROM", "s1"},
	} {
		missing := append([]any{args[0], "no-such-job"}, args[2:]...)
		want := strings.ReplaceAll(g.do(g.adminB, missing...), "no-such-job", "only-a")
		if got := g.do(g.adminB, args...); got != want || !strings.HasPrefix(got, "ERR") {
			t.Errorf("%v from b = %s; want as for a missing job: %s", args, got, want)
		}
	}
	if st := g.status("team-a", "only-a"); st != "failed" {
		t.Errorf("a's job is %s, want failed still", st)
	}
}
