package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/clock"
	"github.com/agq/agq/records"
	"github.com/agq/agq/scheduler"
	"github.com/agq/agq/store"
)

func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }

type testBundle struct {
	url   string
	st    *store.Store
	clock *clock.Fake
	reg   *prometheus.Registry
	sched *scheduler.Scheduler
}

// start is the clock's start: a fire of @every 1s created then is due at
// start+1s, start+2s…
var start = time.Date(2031, 5, 4, 12, 0, 0, 250_000_000, time.UTC)

func setup(t *testing.T) *testBundle {
	t.Helper()
	url := agqtest.NewDatabase(t)
	b := &testBundle{url: url, st: openStore(t, url), clock: clock.NewFake(start), reg: prometheus.NewRegistry()}
	b.sched = b.newScheduler(t, b.st, b.reg)
	return b
}

func (b *testBundle) newScheduler(t *testing.T, st *store.Store, reg prometheus.Registerer) *scheduler.Scheduler {
	return scheduler.New(scheduler.Config{
		Store:      st,
		Logger:     zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		Registerer: reg,
		Clock:      b.clock,
	})
}

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{URL: url, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// create adds a schedule whose first fire is the spec's first after the
// clock's now, as SCHEDULE.CREATE does.
func (b *testBundle) create(t *testing.T, name, cron string, maxCatchup int) {
	t.Helper()
	spec, err := scheduler.Parse(cron, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	next := spec.Next(b.clock.Now())
	_, err = b.st.ScheduleCreate(context.Background(), records.Schedule{
		Name: name, Cron: cron, Timezone: "UTC", Queue: "q-" + name, Enabled: true, MaxCatchup: maxCatchup, NextFireAt: &next,
		Job: records.JobTemplate{Type: "tick", Requires: []string{"tick"}, Payload: []byte(`{"from":"` + name + `"}`),
			MaxAttempts: 3, RetryBackoffSeconds: 1, TimeoutSeconds: 60},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (b *testBundle) runOnce(t *testing.T) {
	t.Helper()
	if err := b.sched.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// jobIDs lists the ids of the jobs in name's queue.
func (b *testBundle) jobIDs(t *testing.T, name string) []string {
	t.Helper()
	jobs, err := b.st.JobList(context.Background(), records.JobListParams{Queue: "q-" + name, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
		if j.Type != "tick" || string(j.Payload) != `{"from": "`+name+`"}` || j.MaxAttempts != 3 || j.TimeoutSeconds != 60 {
			t.Errorf("job %s was not made from the template: %+v", j.ID, j)
		}
	}
	return ids
}

// firedIDs are the ids of the fires of name at start+from s … start+to s.
func firedIDs(name string, from, to int) []string {
	var ids []string
	for s := from; s <= to; s++ {
		ids = append(ids, fmt.Sprintf("sched-%s-%d", name, start.Unix()+int64(s)))
	}
	slices.Sort(ids)
	return ids
}

func (b *testBundle) schedule(t *testing.T, name string) records.Schedule {
	t.Helper()
	sc, err := b.st.ScheduleGet(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// metric reads a counter's value, or a histogram's count, from reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		m := f.GetMetric()[0]
		if h := m.GetHistogram(); h != nil {
			return float64(h.GetSampleCount())
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestEverySecondFiresOncePerSecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, "tick", "@every 1s", 100)

	b.runOnce(t) // nothing is due yet
	if ids := b.jobIDs(t, "tick"); len(ids) != 0 {
		t.Fatalf("fired before its time: %v", ids)
	}
	for s := 1; s <= 5; s++ {
		b.clock.Advance(time.Second)
		b.runOnce(t)
		b.runOnce(t) // a second sweep at the same time fires nothing more
		if got, want := b.jobIDs(t, "tick"), firedIDs("tick", 1, s); !slices.Equal(got, want) {
			t.Fatalf("after %ds: jobs %v, want %v", s, got, want)
		}
	}
	sc := b.schedule(t, "tick")
	wantNext := start.Truncate(time.Second).Add(6 * time.Second)
	if sc.Fires != 5 || sc.Skipped != 0 || !sc.NextFireAt.Equal(wantNext) || !sc.LastFireAt.Equal(wantNext.Add(-time.Second)) {
		t.Errorf("schedule after 5 fires: fires %d skipped %d next %v last %v", sc.Fires, sc.Skipped, sc.NextFireAt, sc.LastFireAt)
	}
	if f, l := metric(t, b.reg, "agq_schedule_fires_total"), metric(t, b.reg, "agq_scheduler_lag_seconds"); f != 5 || l != 5 {
		t.Errorf("metrics: %v fires, %v lag observations; want 5, 5", f, l)
	}
}

func TestCatchUpAfterDowntime(t *testing.T) {
	t.Parallel()
	const down = 7 // fire periods the scheduler misses
	for _, cron := range []string{"@every 1s", "* * * * * *"} {
		for _, maxCatchup := range []int{0, 3, down, 50} {
			t.Run(fmt.Sprintf("%s/MaxCatchup%d", cron, maxCatchup), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.create(t, "nightly", cron, maxCatchup)
				b.clock.Advance(time.Second)
				b.runOnce(t) // fires start+1s

				// Stopped for down periods, then running again: the most
				// recent min(down, max_catchup) fires are replayed (the
				// latest one always, even with a max_catchup of 0).
				b.clock.Advance(down * time.Second)
				b.runOnce(t)
				b.runOnce(t)
				replayed := min(down, max(maxCatchup, 1))
				want := append(firedIDs("nightly", 1, 1), firedIDs("nightly", 2+down-replayed, 1+down)...)
				slices.Sort(want)
				if got := b.jobIDs(t, "nightly"); !slices.Equal(got, want) {
					t.Fatalf("jobs %v, want %v", got, want)
				}
				sc := b.schedule(t, "nightly")
				if sc.Fires != int64(1+replayed) || sc.Skipped != int64(down-replayed) {
					t.Errorf("fires %d skipped %d, want %d and %d", sc.Fires, sc.Skipped, 1+replayed, down-replayed)
				}
				if want := start.Truncate(time.Second).Add((2 + down) * time.Second); !sc.NextFireAt.Equal(want) {
					t.Errorf("next fire %v, want %v", sc.NextFireAt, want)
				}
				if s := metric(t, b.reg, "agq_schedule_skipped_fires_total"); s != float64(down-replayed) {
					t.Errorf("skipped metric %v, want %d", s, down-replayed)
				}

				// Back to one fire per period.
				b.clock.Advance(time.Second)
				b.runOnce(t)
				if got := b.jobIDs(t, "nightly"); len(got) != len(want)+1 || !slices.Contains(got, firedIDs("nightly", 2+down, 2+down)[0]) {
					t.Errorf("after catching up: %v", got)
				}
			})
		}
	}
}

func TestTwoSchedulersNeverDoubleAFire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		b.create(t, n, "@every 1s", 100)
	}
	// A second node: its own pool, its own scheduler, the same clock.
	other := b.newScheduler(t, openStore(t, b.url), prometheus.NewRegistry())
	for range 10 {
		b.clock.Advance(time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for _, s := range []*scheduler.Scheduler{b.sched, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- s.RunOnce(context.Background())
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range names {
		if got, want := b.jobIDs(t, n), firedIDs(n, 1, 10); !slices.Equal(got, want) {
			t.Errorf("schedule %s: jobs %v, want %v", n, got, want)
		}
		if sc := b.schedule(t, n); sc.Fires != 10 {
			t.Errorf("schedule %s counts %d fires, want 10", n, sc.Fires)
		}
	}
}

func TestAFireReplayedAfterItsJobExistsIsNotDoubled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, "again", "@every 1s", 100)
	b.clock.Advance(3 * time.Second)
	b.runOnce(t)
	// The schedule's state goes back in time (a restored backup, a lost
	// advance): its fires come due again, but their jobs exist already.
	if _, err := b.st.Pool.Exec(context.Background(),
		`UPDATE schedules SET next_fire_at = $1 WHERE name = 'again'`, start.Truncate(time.Second).Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Second)
	b.runOnce(t)
	if got, want := b.jobIDs(t, "again"), firedIDs("again", 1, 4); !slices.Equal(got, want) {
		t.Errorf("jobs %v, want %v", got, want)
	}
	if sc := b.schedule(t, "again"); sc.Fires != 4 {
		t.Errorf("schedule counts %d fires, want 4", sc.Fires)
	}
	if f := metric(t, b.reg, "agq_schedule_fires_total"); f != 4 {
		t.Errorf("fires metric %v, want 4", f)
	}
}

func TestStartStopAndRestartWithTheSameRegisterer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, "svc", "@every 1s", 100)
	b.clock.Advance(3 * time.Second)
	ctx := context.Background()
	waitForJobs := func(n int) {
		t.Helper()
		agqtest.Eventually(t, 5*time.Second, func() error {
			if got := len(b.jobIDs(t, "svc")); got != n {
				return fmt.Errorf("%d jobs, want %d", got, n)
			}
			return nil
		})
	}
	jobs := 3
	for round := range 3 {
		// Leadership lost and regained: the same scheduler again, and a
		// new one on the same registry; neither may panic.
		s := b.sched
		if round == 2 {
			s = b.newScheduler(t, b.st, b.reg)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop) // should a wait below fail
		waitForJobs(jobs) // the sweep at start fires what is due
		// A tick of the clock is a sweep.
		b.clock.Advance(time.Second)
		jobs++
		waitForJobs(jobs)
		s.Stop()
		s.Stop() // twice is harmless
		// Stopped, it sweeps no more: this fire waits for the next start.
		b.clock.Advance(time.Second)
		jobs++
	}
	if n := len(b.jobIDs(t, "svc")); n != jobs-1 {
		t.Errorf("%d jobs after the last stop, want %d", n, jobs-1)
	}
	if f := metric(t, b.reg, "agq_schedule_fires_total"); f != float64(jobs-1) {
		t.Errorf("fires metric %v, want %d (shared by both schedulers)", f, jobs-1)
	}
}

func TestScheduleThatCannotParseStopsFiring(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, "broken", "@every 1s", 100)
	b.create(t, "fine", "@every 1s", 100)
	// A spec this agq cannot read (written by hand, or by another version).
	if _, err := b.st.Pool.Exec(context.Background(), `UPDATE schedules SET cron = 'CRON_TZ=UTC' WHERE name = 'broken'`); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Second)
	b.runOnce(t)
	if sc := b.schedule(t, "broken"); sc.NextFireAt != nil || !sc.Enabled {
		t.Errorf("broken schedule: next %v enabled %v; want no next fire", sc.NextFireAt, sc.Enabled)
	}
	if got := b.jobIDs(t, "fine"); len(got) != 1 {
		t.Errorf("the other schedule fired %v", got)
	}
}

func TestDerivedJobIDsFitTheJobIDPattern(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_900_000_000, 0)
	long := strings.Repeat("n", 200)
	for _, name := range []string{"nightly", long, "with space/and:colon", "ü"} {
		for _, id := range []string{store.ScheduleJobID(name, at), store.ScheduleManualJobID(name, at)} {
			ok := len(id) >= 1 && len(id) <= 128
			for _, c := range id {
				ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_.-", c))
			}
			if !ok {
				t.Errorf("schedule %q: job id %q is not a valid job id", name, id)
			}
		}
	}
	if got := store.ScheduleJobID("nightly", at); got != "sched-nightly-1900000000" {
		t.Errorf("id %q", got)
	}
	if store.ScheduleJobID(long, at) == store.ScheduleJobID(long+"x", at) ||
		store.ScheduleJobID("a b", at) == store.ScheduleJobID("a_b", at) {
		t.Error("two schedules share job ids")
	}
}
