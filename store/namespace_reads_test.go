package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

// readsBundle is a store over a fresh database holding namespaces a and b.
type readsBundle struct {
	ctx  context.Context
	st   *store.Store
	a, b *store.Store
}

func newReadsBundle(t *testing.T) *readsBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := store.Open(ctx, store.Config{URL: agqtest.NewDatabase(t), Rules: engine.Decisions{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Pool.Exec(ctx, `INSERT INTO namespaces (name) VALUES ('a'), ('b')`); err != nil {
		t.Fatal(err)
	}
	return &readsBundle{ctx: ctx, st: st, a: st.In("a"), b: st.In("b")}
}

// insert stores job id in namespace ns, in queue, with status; set, when
// given, is more of the row's columns (SQL assignments).
func (b *readsBundle) insert(t *testing.T, ns, id, queue, status, set string) {
	t.Helper()
	if _, err := b.st.Pool.Exec(b.ctx, `
		INSERT INTO jobs (namespace, id, queue, type, requires, status, max_attempts, timeout_seconds)
		VALUES ($1, $2, $3, 't', '{sort}', $4, 3, 60)`, ns, id, queue, status); err != nil {
		t.Fatal(err)
	}
	if set != "" {
		if _, err := b.st.Pool.Exec(b.ctx, `UPDATE jobs SET `+set+` WHERE namespace = $1 AND id = $2`, ns, id); err != nil {
			t.Fatal(err)
		}
	}
}

func idsOf(jobs []records.Job) []string {
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

func TestJobReadsStayInTheirNamespace(t *testing.T) {
	t.Parallel()
	b := newReadsBundle(t)
	b.insert(t, "a", "same", "qa", records.StatusQueued, "")
	b.insert(t, "b", "same", "qb", records.StatusCompleted, "finished_at = now()")
	b.insert(t, "a", "only-a", "qa", records.StatusQueued, "")

	t.Run("TheSameIDIsTwoJobs", func(t *testing.T) {
		ja, err := b.a.JobGet(b.ctx, "same")
		if err != nil || ja.Namespace != "a" || ja.Queue != "qa" || ja.Status != records.StatusQueued {
			t.Fatalf("a's job: %+v, %v", ja, err)
		}
		jb, err := b.b.JobGet(b.ctx, "same")
		if err != nil || jb.Namespace != "b" || jb.Queue != "qb" || jb.Status != records.StatusCompleted {
			t.Fatalf("b's job: %+v, %v", jb, err)
		}
	})
	t.Run("AnotherNamespacesJobIsNotFound", func(t *testing.T) {
		for _, st := range []*store.Store{b.b, b.st} {
			if _, err := st.JobGet(b.ctx, "only-a"); !errors.Is(err, records.ErrNotFound) {
				t.Errorf("%s reads a's job: %v", st.Namespace(), err)
			}
			if p, err := st.KeyspaceJobProbe(b.ctx, "only-a"); !errors.Is(err, records.ErrNotFound) {
				t.Errorf("%s probes a's job: %+v, %v", st.Namespace(), p, err)
			}
		}
	})
	t.Run("ListsAndCountsAreTheNamespaces", func(t *testing.T) {
		la, err := b.a.JobList(b.ctx, records.JobListParams{Limit: 10})
		if err != nil || !slices.Equal(idsOf(la), []string{"only-a", "same"}) {
			t.Fatalf("a's list: %v, %v", idsOf(la), err)
		}
		lb, err := b.b.JobList(b.ctx, records.JobListParams{Limit: 10})
		if err != nil || !slices.Equal(idsOf(lb), []string{"same"}) || lb[0].Queue != "qb" {
			t.Fatalf("b's list: %v, %v", idsOf(lb), err)
		}
		if l, err := b.st.JobList(b.ctx, records.JobListParams{Limit: 10}); err != nil || len(l) != 0 {
			t.Fatalf("default's list: %v, %v", idsOf(l), err)
		}
		ca, err := b.a.JobCounts(b.ctx)
		if err != nil || ca[records.StatusQueued] != 2 || ca[records.StatusCompleted] != 0 {
			t.Fatalf("a's counts: %v, %v", ca, err)
		}
		states, err := b.b.JobStates(b.ctx, []string{"same", "only-a"})
		if err != nil || len(states) != 1 || states[0].Namespace != "b" || states[0].Status != records.StatusCompleted {
			t.Fatalf("b's states: %+v, %v", states, err)
		}
		keys, err := b.b.KeyspaceJobs(b.ctx, records.KeyspaceJobsParams{Limit: 10})
		if err != nil || len(keys) != 1 || keys[0].ID != "same" {
			t.Fatalf("b's keyspace: %+v, %v", keys, err)
		}
		if jobs, _, err := b.b.KeyspaceJobCounts(b.ctx); err != nil || jobs != 1 {
			t.Fatalf("b's DBSIZE jobs: %d, %v", jobs, err)
		}
	})
}

func TestSchedulesOfTheSameNameInTwoNamespaces(t *testing.T) {
	t.Parallel()
	b := newReadsBundle(t)
	past := time.Now().Add(-time.Minute).Truncate(time.Second)
	for _, c := range []struct {
		st    *store.Store
		queue string
	}{{b.a, "qa"}, {b.b, "qb"}} {
		sc := records.Schedule{Name: "nightly", Cron: "@hourly", Timezone: "UTC", Queue: c.queue,
			Job: records.JobTemplate{Type: "report", MaxAttempts: 3, TimeoutSeconds: 60}, Enabled: true, MaxCatchup: 1, NextFireAt: &past}
		if created, err := c.st.ScheduleCreate(b.ctx, sc); err != nil || !created {
			t.Fatalf("creating %s's schedule: %v, %v", c.st.Namespace(), created, err)
		}
	}

	for ns, queue := range map[*store.Store]string{b.a: "qa", b.b: "qb"} {
		sc, err := ns.ScheduleGet(b.ctx, "nightly")
		if err != nil || sc.Queue != queue || sc.Namespace != ns.Namespace() {
			t.Fatalf("%s's schedule: %+v, %v", ns.Namespace(), sc, err)
		}
		l, err := ns.ScheduleList(b.ctx)
		if err != nil || len(l) != 1 || l[0].Queue != queue {
			t.Fatalf("%s's list: %+v, %v", ns.Namespace(), l, err)
		}
	}
	if _, err := b.st.ScheduleGet(b.ctx, "nightly"); !errors.Is(err, records.ErrNotFound) {
		t.Fatalf("default reads another namespace's schedule: %v", err)
	}

	// Each due schedule fires into its own namespace.
	plan := func(sc records.Schedule) (store.FirePlan, error) {
		return store.FirePlan{Fires: []time.Time{*sc.NextFireAt}, Next: sc.NextFireAt.Add(time.Hour)}, nil
	}
	fired := map[string]string{}
	for range 2 {
		res, found, err := b.st.ScheduleFireDue(b.ctx, store.ScheduleFireDueParams{Now: time.Now(), Plan: plan})
		if err != nil || !found || res.Created != 1 {
			t.Fatalf("fire: %+v, %v, %v", res, found, err)
		}
		fired[res.Namespace] = res.Queue
	}
	if len(fired) != 2 || fired["a"] != "qa" || fired["b"] != "qb" {
		t.Fatalf("fired %v, want a's into qa and b's into qb", fired)
	}
	id := store.ScheduleJobID("nightly", past)
	for ns, queue := range map[*store.Store]string{b.a: "qa", b.b: "qb"} {
		j, err := ns.JobGet(b.ctx, id)
		if err != nil || j.Queue != queue || j.Namespace != ns.Namespace() {
			t.Fatalf("%s's fired job: %+v, %v", ns.Namespace(), j, err)
		}
	}

	// A trigger and a delete touch their own namespace's schedule only.
	manual, err := b.a.ScheduleTrigger(b.ctx, "nightly", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.b.JobGet(b.ctx, manual); !errors.Is(err, records.ErrNotFound) {
		t.Fatalf("a's trigger made a job in b: %v", err)
	}
	if err := b.b.SchedulePause(b.ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if sc, _ := b.a.ScheduleGet(b.ctx, "nightly"); !sc.Enabled {
		t.Fatal("b's pause paused a's schedule")
	}
	if gone, err := b.a.ScheduleDelete(b.ctx, "nightly"); err != nil || !gone {
		t.Fatalf("deleting a's: %v, %v", gone, err)
	}
	if _, err := b.b.ScheduleGet(b.ctx, "nightly"); err != nil {
		t.Fatalf("a's delete took b's schedule: %v", err)
	}
}

func TestWorkersStayInTheirNamespace(t *testing.T) {
	t.Parallel()
	b := newReadsBundle(t)
	w := records.Worker{ID: "w-a", Principal: "w-a", Hostname: "h", AgwVersion: "1", Capabilities: []string{"sort"},
		Metadata: json.RawMessage(`{}`), MaxConcurrentJobs: 1}
	if _, err := b.a.WorkerRegister(b.ctx, w, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	got, err := b.a.WorkerGet(b.ctx, "w-a")
	if err != nil || got.Namespace != "a" {
		t.Fatalf("a's worker: %+v, %v", got, err)
	}
	if l, err := b.a.WorkerList(b.ctx, ""); err != nil || len(l) != 1 {
		t.Fatalf("a's list: %+v, %v", l, err)
	}
	if l, err := b.b.WorkerList(b.ctx, ""); err != nil || len(l) != 0 {
		t.Fatalf("b lists a's worker: %+v, %v", l, err)
	}
	if _, err := b.b.WorkerGet(b.ctx, "w-a"); !errors.Is(err, records.ErrNotFound) {
		t.Fatalf("b reads a's worker: %v", err)
	}
	if err := b.b.WorkerDrain(b.ctx, "w-a"); !errors.Is(err, store.ErrWorkerUnknown) {
		t.Fatalf("b drains a's worker: %v", err)
	}
	if _, err := b.b.WorkerHeartbeat(b.ctx, "w-a", nil, time.Minute); !errors.Is(err, store.ErrWorkerUnknown) {
		t.Fatalf("b heartbeats for a's worker: %v", err)
	}
	if counts, err := b.b.WorkerCounts(b.ctx); err != nil || counts[records.WorkerActive] != 0 {
		t.Fatalf("b counts a's worker: %v, %v", counts, err)
	}
	if ws, err := b.b.KeyspaceWorkers(b.ctx, ""); err != nil || len(ws) != 0 {
		t.Fatalf("b's keyspace shows a's worker: %+v, %v", ws, err)
	}
}

// A sweep moves each job it finds in the job's own namespace: of two
// running jobs with one id, only the one whose lease ran out goes back.
func TestSweepsMoveEachJobInItsNamespace(t *testing.T) {
	t.Parallel()
	b := newReadsBundle(t)
	b.insert(t, "a", "same", "q", records.StatusRunning,
		"worker_id = 'w-a', attempt = 1, started_at = now(), lease_expires_at = now() - interval '1 minute'")
	b.insert(t, "b", "same", "q", records.StatusRunning,
		"worker_id = 'w-b', attempt = 1, started_at = now(), lease_expires_at = now() + interval '1 hour'")
	n, err := b.st.JobsRecoverExpiredLeases(b.ctx, 10)
	if err != nil || n != 1 {
		t.Fatalf("recovered %d: %v", n, err)
	}
	ja, _ := b.a.JobGet(b.ctx, "same")
	jb, _ := b.b.JobGet(b.ctx, "same")
	if ja.Status != records.StatusRetrying && ja.Status != records.StatusQueued {
		t.Errorf("a's expired job is %s, want given back", ja.Status)
	}
	if jb.Status != records.StatusRunning || jb.WorkerID == nil || *jb.WorkerID != "w-b" {
		t.Errorf("b's held job is %s, held by %v; want running, held by w-b", jb.Status, jb.WorkerID)
	}
}

// Retention keeps a namespace's finished jobs as long as the namespace
// says, the server's setting where it says nothing: a job moved into
// history expires by its namespace's.
func TestRetentionIsEachNamespaces(t *testing.T) {
	t.Parallel()
	b := newReadsBundle(t)
	if _, err := b.st.Pool.Exec(b.ctx, `UPDATE namespaces SET retain_completed = interval '1 hour' WHERE name = 'a'`); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"a", "b", records.DefaultNamespace} {
		b.insert(t, ns, "old", "q", records.StatusCompleted, "finished_at = now() - interval '2 hours'")
	}
	n, err := b.st.HistoryMove(b.ctx, store.HistoryParams{RetentionParams: store.RetentionParams{
		Completed: 24 * time.Hour, Failed: 24 * time.Hour, Limit: 100}})
	if err != nil || n != 3 {
		t.Fatalf("moved %d: %v", n, err)
	}
	// Past its retention, a's job expires with the period of now; the
	// others 22 hours on.
	rows, err := b.st.Pool.Query(b.ctx, `SELECT namespace, extract(epoch FROM expires_at - now()) FROM jobs_history`)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]float64{}
	for rows.Next() {
		var ns string
		var s float64
		if err := rows.Scan(&ns, &s); err != nil {
			t.Fatal(err)
		}
		left[ns] = s
	}
	if a := left["a"]; a > 60 {
		t.Errorf("a's job expires in %.0f s, want now (past its own retention)", a)
	}
	for _, ns := range []string{"b", records.DefaultNamespace} {
		if l := left[ns]; l < 21*3600 || l > 23*3600 {
			t.Errorf("%s's job expires in %.0f s, want 22 hours (the server's retention)", ns, l)
		}
	}
	for _, st := range []*store.Store{b.a, b.b, b.st} {
		if _, err := st.JobGet(b.ctx, "old"); err != nil {
			t.Errorf("%s cannot read its job in history: %v", st.Namespace(), err)
		}
	}
}
