package store_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agq/agq/records"
)

// outcome is what a report should do: its reply, and the status it moves
// the job to ("" leaves the row as it was).
type outcome struct {
	reply errKind
	to    string
}

func moves(status string) outcome { return outcome{to: status} }

var (
	unchanged = outcome{}
	// cancels is a report that learns of the job's cancellation, which
	// it thereby ends.
	cancels = outcome{reply: errCancelled, to: records.StatusCancelled}
)

func refused(k errKind) outcome { return outcome{reply: k} }

// outcomes maps a report kind's name to what it should do.
type outcomes map[string]outcome

// every is o for every kind of report, then the exceptions.
func every(o outcome, except outcomes) outcomes {
	all := outcomes{}
	for _, k := range reportKinds {
		all[k.name] = o
	}
	return with(all, except)
}

// with is base's outcomes, then the exceptions.
func with(base, except outcomes) outcomes {
	out := outcomes{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range except {
		out[k] = v
	}
	return out
}

// holderMoves is what the holder's reports do to its running job.
var holderMoves = outcomes{
	reportProgress.name:      moves(records.StatusRunning),
	reportRunning.name:       moves(records.StatusRunning),
	reportCompleted.name:     moves(records.StatusCompleted),
	reportFailed.name:        moves(records.StatusRetrying),
	reportFailedForGood.name: moves(records.StatusFailed),
	reportCancelled.name:     moves(records.StatusCancelled),
	reportSnoozed.name:       moves(records.StatusScheduled),
}

// updateCases are the rules of §6 for a report, by the job's status and
// the reporter: only a running job moves, at its holder's or an admin's
// report; a job asked to cancel ends cancelled when its holder learns of
// it; a report about a job that is not running is refused, unless it
// repeats the report that ended it; a cancelled job answers CANCELLED.
var updateCases = []struct {
	from fromState
	by   actor
	want outcomes
}{
	{fromQueued, byHolder, every(refused(errState), nil)},
	{fromQueued, byAnother, every(refused(errState), nil)},
	{fromQueued, byAdmin, every(refused(errState), nil)},
	{fromScheduled, byHolder, every(refused(errState), nil)},
	{fromScheduled, byAnother, every(refused(errState), nil)},
	{fromScheduled, byAdmin, every(refused(errState), nil)},

	{fromRunning, byHolder, holderMoves},
	{fromRunning, byAnother, every(refused(errNotOwner), nil)},
	{fromRunning, byAdmin, holderMoves},
	{fromRunningLastAttempt, byHolder, with(holderMoves, outcomes{reportFailed.name: moves(records.StatusFailed)})},
	{fromRunningLastAttempt, byAnother, every(refused(errNotOwner), nil)},
	{fromRunningLastAttempt, byAdmin, with(holderMoves, outcomes{reportFailed.name: moves(records.StatusFailed)})},

	// The holder's failure sent again: the job already waits for its retry.
	// A failure not retryable is another report, about a delivery that
	// ended: refused, as it cannot stop the retry.
	{fromRetrying, byHolder, every(refused(errState), outcomes{reportFailed.name: unchanged})},
	{fromRetrying, byAnother, every(refused(errState), nil)},
	{fromRetrying, byAdmin, every(refused(errState), nil)},

	{fromCompleted, byHolder, every(refused(errState), outcomes{reportCompleted.name: unchanged})},
	{fromCompleted, byAnother, every(refused(errNotOwner), nil)},
	{fromCompleted, byAdmin, every(refused(errState), outcomes{reportCompleted.name: unchanged})},
	{fromFailed, byHolder, every(refused(errState), outcomes{reportFailed.name: unchanged, reportFailedForGood.name: unchanged})},
	{fromFailed, byAnother, every(refused(errNotOwner), nil)},
	{fromFailed, byAdmin, every(refused(errState), outcomes{reportFailed.name: unchanged, reportFailedForGood.name: unchanged})},

	{fromCancelled, byHolder, every(refused(errCancelled), nil)},
	{fromCancelled, byAnother, every(refused(errCancelled), nil)},
	{fromCancelled, byAdmin, every(refused(errCancelled), nil)},
	{fromCancelledByHolder, byHolder, every(refused(errCancelled), outcomes{reportCancelled.name: unchanged})},
	{fromCancelledByHolder, byAnother, every(refused(errNotOwner), nil)},
	{fromCancelledByHolder, byAdmin, every(refused(errCancelled), outcomes{reportCancelled.name: unchanged})},
	{fromCancelledOnRequest, byHolder, every(refused(errCancelled), nil)},
	{fromCancelledOnRequest, byAnother, every(refused(errNotOwner), nil)},
	{fromCancelledOnRequest, byAdmin, every(refused(errCancelled), nil)},
	{fromCancelledOnRelease, byHolder, every(refused(errCancelled), nil)},
	{fromCancelledOnRelease, byAnother, every(refused(errNotOwner), nil)},
	{fromCancelledOnRelease, byAdmin, every(refused(errCancelled), nil)},

	{fromCancelRequested, byHolder, every(cancels, nil)},
	{fromCancelRequested, byAnother, every(refused(errNotOwner), nil)},
	{fromCancelRequested, byAdmin, every(cancels, nil)},
}

// reportPath applies one report: the locked path (JobUpdate) or the
// grouped one (JobsAck for acknowledgements, JobsFinish for final
// reports), answering its reply, what it freed and the group's effects.
type reportPath struct {
	name  string
	apply func(b *trBundle, p records.Report) (records.Room, records.Effects, error)
}

var (
	lockedPath = reportPath{"Locked", func(b *trBundle, p records.Report) (records.Room, records.Effects, error) {
		fx, err := b.st.JobUpdate(b.ctx, p)
		return fx.Freed, fx, err
	}}
	groupedPath = reportPath{"Grouped", func(b *trBundle, p records.Report) (records.Room, records.Effects, error) {
		errs, fx := b.group([]records.Report{p})
		return fx.Freed, fx, errs[0]
	}}
)

// group sends reports as one group of their kind.
func (b *trBundle) group(reports []records.Report) ([]error, records.Effects) {
	if reports[0].Status == "" || reports[0].Status == records.StatusRunning {
		return b.st.JobsAck(b.ctx, reports)
	}
	return b.st.JobsFinish(b.ctx, reports)
}

func TestJobUpdate(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	for _, tc := range updateCases {
		for _, k := range reportKinds {
			want, ok := tc.want[k.name]
			if !ok {
				continue
			}
			name := fmt.Sprintf("%sReportOf%s%s", k.name, tc.from.name, tc.by.name)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				paths := []reportPath{lockedPath, groupedPath}
				if !k.grouped() {
					paths = paths[:1]
				}
				var shapes []shape
				for _, path := range paths {
					id := path.name + "-" + name
					d := tc.from.build(t, b, id)
					after := b.checkUpdate(t, path, tc.by.params(k, id, d), k, want)
					shapes = append(shapes, shapeOf(t, after))
				}
				// Both paths leave the job alike.
				if len(shapes) == 2 && !reflect.DeepEqual(shapes[0], shapes[1]) {
					t.Fatalf("the paths disagree:\nlocked %+v\ngrouped %+v", shapes[0], shapes[1])
				}
			})
		}
	}
}

// checkUpdate sends one report by path and checks what it did against
// want; it answers the job as it left it.
func (b *trBundle) checkUpdate(t *testing.T, path reportPath, p records.Report, k reportKind, want outcome) records.Job {
	t.Helper()
	before := b.get(t, p.ID)
	start := time.Now()
	freed, fx, err := path.apply(b, p)
	end := time.Now()
	after := b.get(t, p.ID)
	checkReply(t, want.reply, err, before)
	if want.to == "" {
		checkUntouched(t, before, after)
	} else {
		checkMoved(t, k, want.to, before, after, start, end)
	}
	left := before.Status == records.StatusRunning && want.to != "" && want.to != records.StatusRunning
	checkFreed(t, freed, before, left)
	checkEffects(t, fx, want, before, after)
	return after
}

// checkEffects checks what the store says a committed report means: a job
// it ended is done, a job it put back to wait (a retry, a snooze) is ready
// at its run_at, and a waiting job whose row the report held is announced
// ready at once (a pop may have skipped it meanwhile).
func checkEffects(t *testing.T, fx records.Effects, want outcome, before, after records.Job) {
	t.Helper()
	var done []string
	var ready []records.ReadyNote
	if before.Status == records.StatusQueued {
		ready = append(ready, records.ReadyNote{Queue: before.Queue, N: 1})
	}
	switch want.to {
	case records.StatusCompleted, records.StatusFailed, records.StatusCancelled:
		done = []string{after.ID}
	case records.StatusRetrying, records.StatusScheduled:
		ready = append(ready, records.ReadyNote{Queue: after.Queue, N: 1, Requires: after.Requires, At: after.RunAt.UnixMilli()})
	}
	if !slices.Equal(fx.Done, done) {
		t.Fatalf("done %q, want %q", fx.Done, done)
	}
	if len(fx.Ready) != len(ready) {
		t.Fatalf("ready %+v, want %+v", fx.Ready, ready)
	}
	for i, n := range fx.Ready {
		if n.Queue != ready[i].Queue || n.N != 1 || !slices.Equal(n.Requires, ready[i].Requires) || (n.At == 0) != (ready[i].At == 0) {
			t.Fatalf("ready %+v, want %+v", n, ready[i])
		}
		if at := time.UnixMilli(n.At); n.At != 0 && (at.Before(after.RunAt) || at.After(after.RunAt.Add(time.Millisecond))) {
			t.Fatalf("ready %+v, want it due at %v", n, after.RunAt)
		}
	}
}

// A report names the delivery it is about; one about another delivery
// than the job's latest must not touch it. The job here runs its second
// delivery; the first failed and was retried.
func TestJobUpdateAboutAnotherDelivery(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	staleToken := "00000000-0000-4000-8000-000000000000"
	tests := []struct {
		name  string
		about func(latest delivery) delivery
		want  outcomes
	}{
		{"StaleToken", func(l delivery) delivery { return delivery{l.attempt, staleToken} },
			every(refused(errStale), nil)},
		{"StaleTokenWithoutAttempt", func(l delivery) delivery { return delivery{0, staleToken} },
			every(refused(errStale), nil)},
		// A report about the first delivery, sent late, is refused, unless
		// it is the failure that ended it, sent again: OK, and nothing
		// freed, since the job did not leave running.
		{"EarlierAttempt", func(l delivery) delivery { return delivery{l.attempt - 1, ""} },
			every(refused(errState), outcomes{reportFailed.name: unchanged})},
		{"EarlierAttemptAndItsToken", nil,
			every(refused(errState), outcomes{reportFailed.name: unchanged})},
		{"LaterAttempt", func(l delivery) delivery { return delivery{l.attempt + 1, l.token} },
			every(refused(errState), nil)},
	}
	for _, tc := range tests {
		for _, k := range reportKinds {
			want, ok := tc.want[k.name]
			if !ok {
				continue
			}
			for _, path := range []reportPath{lockedPath, groupedPath} {
				if path.name == groupedPath.name && !k.grouped() {
					continue
				}
				name := fmt.Sprintf("%sReportNaming%s%s", k.name, tc.name, path.name)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					id := name
					b.submit(t, trJob(id, 3, 0))
					first := deliveryOf(b.claim(t, id, holder))
					b.mustUpdate(t, reportFailed.params(id, holder, first))
					latest := deliveryOf(b.claim(t, id, holder))
					about := first
					if tc.about != nil {
						about = tc.about(latest)
					}
					b.checkUpdate(t, path, k.params(id, holder, about), k, want)
				})
			}
		}
	}
}

// Clients re-send a report after a timeout: the same report twice is one
// transition, and the second is answered OK — sent again alone, or twice
// in one group.
func TestJobUpdateSentTwiceIsOneTransition(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	ways := []struct {
		name    string
		grouped bool
		send    func(p records.Report) []error
	}{
		{"CarefulThenCareful", false, func(p records.Report) []error {
			_, err1 := b.st.JobUpdate(b.ctx, p)
			_, err2 := b.st.JobUpdate(b.ctx, p)
			return []error{err1, err2}
		}},
		{"GroupThenGroup", true, func(p records.Report) []error {
			errs1, _ := b.group([]records.Report{p})
			errs2, _ := b.group([]records.Report{p})
			return append(errs1, errs2...)
		}},
		{"TwiceInOneGroup", true, func(p records.Report) []error {
			errs, _ := b.group([]records.Report{p, p})
			return errs
		}},
		{"GroupThenCareful", true, func(p records.Report) []error {
			errs, _ := b.group([]records.Report{p})
			_, err := b.st.JobUpdate(b.ctx, p)
			return append(errs, err)
		}},
	}
	for _, way := range ways {
		for _, k := range reportKinds {
			if way.grouped && !k.grouped() {
				continue
			}
			name := fmt.Sprintf("%sReport%s", k.name, way.name)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				id := name
				d := fromRunning.build(t, b, id)
				before := b.get(t, id)
				start := time.Now()
				errs := way.send(byHolder.params(k, id, d))
				end := time.Now()
				for i, err := range errs {
					if err != nil {
						t.Fatalf("sending %d: %v", i+1, err)
					}
				}
				checkMoved(t, k, holderMoves[k.name].to, before, b.get(t, id), start, end)
			})
		}
	}
}

// A job may be snoozed MaxSnoozes times; the next snooze fails it.
func TestJobUpdateSnoozeLimit(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	for _, maxSnoozes := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("SnoozedPast%dFails", maxSnoozes), func(t *testing.T) {
			t.Parallel()
			id := fmt.Sprintf("snoozes-%d", maxSnoozes)
			b.submit(t, trJob(id, 2, trBackoff))
			snooze := func(d delivery) (records.Room, error) {
				p := reportSnoozed.params(id, holder, d)
				p.SnoozeFor, p.MaxSnoozes = time.Millisecond, maxSnoozes
				fx, err := b.st.JobUpdate(b.ctx, p)
				return fx.Freed, err
			}
			for i := range maxSnoozes {
				if _, err := snooze(deliveryOf(b.claim(t, id, holder))); err != nil {
					t.Fatalf("snooze %d: %v", i+1, err)
				}
			}
			d := deliveryOf(b.claim(t, id, holder))
			before := b.get(t, id)
			if before.Snoozes != maxSnoozes || before.Attempt != 1 {
				t.Fatalf("after %d snoozes: snoozes %d, attempt %d; want %d, 1", maxSnoozes, before.Snoozes, before.Attempt, maxSnoozes)
			}
			start := time.Now()
			freed, err := snooze(d)
			end := time.Now()
			checkReply(t, errSnoozeLimit, err, before)
			checkFreed(t, freed, before, true)
			after := b.get(t, id)
			history := errorHistory(t, after)
			if after.Status != records.StatusFailed || after.FinishedAt == nil || !within(*after.FinishedAt, start, end) ||
				str(after.WorkerID) != holder || after.Attempt != 1 || after.Snoozes != maxSnoozes ||
				len(history) != 1 || history[0] != (errorEntry{1, holder, err.Error()}) {
				t.Fatalf("past the limit: %+v, errors %+v", after, history)
			}
		})
	}
}

// An acknowledgement ends the wait for one (ack_deadline) and keeps the
// progress reported; progress reported replaces the earlier one.
func TestJobUpdateAcknowledgementKeepsProgress(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	progress := func(pct int) reportKind {
		return reportKind{"Progress", "", false, fmt.Sprintf(`{"progress_percent":%d}`, pct)}
	}
	steps := []struct {
		report reportKind
		want   string
	}{
		{reportRunning, ""},
		{progress(40), `{"progress_percent":40}`},
		{reportRunning, `{"progress_percent":40}`},
		{progress(80), `{"progress_percent":80}`},
		{reportRunning, `{"progress_percent":80}`},
	}
	for _, path := range []reportPath{lockedPath, groupedPath} {
		t.Run("Through"+path.name+"Path", func(t *testing.T) {
			t.Parallel()
			id := "ack-" + path.name
			d := fromRunning.build(t, b, id)
			if j := b.get(t, id); j.AckDeadline == nil {
				t.Fatal("a claimed job has no ack_deadline")
			}
			for i, s := range steps {
				freed, _, err := path.apply(b, byHolder.params(s.report, id, d))
				j := b.get(t, id)
				if err != nil || !freed.Empty() || j.Status != records.StatusRunning || j.AckDeadline != nil ||
					!jsonEqual(j.Progress, []byte(s.want)) {
					t.Fatalf("step %d: %v, freed %+v; %s, ack_deadline %v, progress %s (want %s)",
						i, err, freed, j.Status, j.AckDeadline, j.Progress, s.want)
				}
			}
		})
	}
	t.Run("TheLastProgressOfAGroupIsKept", func(t *testing.T) {
		t.Parallel()
		id := "ack-group"
		d := fromRunning.build(t, b, id)
		errs, fx := b.st.JobsAck(b.ctx, []records.Report{
			byHolder.params(progress(10), id, d), byHolder.params(progress(20), id, d)})
		freed := fx.Freed
		j := b.get(t, id)
		if errs[0] != nil || errs[1] != nil || !freed.Empty() || !jsonEqual(j.Progress, []byte(`{"progress_percent":20}`)) {
			t.Fatalf("%v, freed %+v, progress %s", errs, freed, j.Progress)
		}
	})
	// Sent one at a time the same reports keep the same progress: the
	// last a delivery gave in the group, not erased by an acknowledgement
	// after it, nor taken from a report another worker slipped in.
	groups := []struct {
		name string
		by   []actor
		sent []reportKind
		want string
	}{
		{"ProgressThenAcknowledgement", []actor{byHolder, byHolder}, []reportKind{progress(40), reportRunning}, `{"progress_percent":40}`},
		{"TwoProgressesThenAcknowledgement", []actor{byHolder, byHolder, byHolder},
			[]reportKind{progress(10), progress(20), reportRunning}, `{"progress_percent":20}`},
		{"ProgressAcknowledgementProgressAcknowledgement", []actor{byHolder, byHolder, byHolder, byHolder},
			[]reportKind{progress(10), reportRunning, progress(20), reportRunning}, `{"progress_percent":20}`},
		{"AnotherWorkersProgressThenTheHoldersAcknowledgement", []actor{byAnother, byHolder},
			[]reportKind{progress(90), reportRunning}, ""},
	}
	for _, g := range groups {
		t.Run("AGroupOf"+g.name, func(t *testing.T) {
			t.Parallel()
			id := "ack-group-" + g.name
			d := fromRunning.build(t, b, id)
			var reports []records.Report
			for i, k := range g.sent {
				reports = append(reports, g.by[i].params(k, id, d))
			}
			errs, fx := b.st.JobsAck(b.ctx, reports)
			freed := fx.Freed
			for i, err := range errs {
				var owner *records.NotOwnerError
				if g.by[i].name == byAnother.name && errors.As(err, &owner) {
					continue
				}
				if err != nil {
					t.Fatalf("report %d: %v", i, err)
				}
			}
			j := b.get(t, id)
			if !freed.Empty() || j.Status != records.StatusRunning || j.AckDeadline != nil || !jsonEqual(j.Progress, []byte(g.want)) {
				t.Fatalf("freed %+v; %s, ack_deadline %v, progress %s (want %s)", freed, j.Status, j.AckDeadline, j.Progress, g.want)
			}
		})
	}
	t.Run("AnotherWorkersReportInTheGroupIsRefusedAlone", func(t *testing.T) {
		t.Parallel()
		id := "ack-mixed"
		d := fromRunning.build(t, b, id)
		errs, fx := b.st.JobsAck(b.ctx, []records.Report{
			byHolder.params(progress(30), id, d), byAnother.params(progress(90), id, d)})
		freed := fx.Freed
		var owner *records.NotOwnerError
		j := b.get(t, id)
		if errs[0] != nil || !errors.As(errs[1], &owner) || !freed.Empty() ||
			j.AckDeadline != nil || !jsonEqual(j.Progress, []byte(`{"progress_percent":30}`)) {
			t.Fatalf("%v, freed %+v, ack_deadline %v, progress %s", errs, freed, j.AckDeadline, j.Progress)
		}
	})
}

// A group of final reports about several jobs applies each on its own.
func TestJobsFinishMixedGroup(t *testing.T) {
	t.Parallel()
	b := newTrBundle(t)
	kinds := []reportKind{reportCompleted, reportFailed, reportFailedForGood, reportCancelled}
	var reports []records.Report
	var befores []records.Job
	for _, k := range kinds {
		id := "mixed-" + k.name
		reports = append(reports, byHolder.params(k, id, fromRunning.build(t, b, id)))
		befores = append(befores, b.get(t, id))
	}
	// The holder's completion of a job asked to cancel, and another
	// worker's report, go their own way.
	d := fromCancelRequested.build(t, b, "mixed-cancel-requested")
	reports = append(reports, byHolder.params(reportCompleted, "mixed-cancel-requested", d))
	befores = append(befores, b.get(t, "mixed-cancel-requested"))
	d = fromRunning.build(t, b, "mixed-not-owner")
	reports = append(reports, byAnother.params(reportCompleted, "mixed-not-owner", d))
	befores = append(befores, b.get(t, "mixed-not-owner"))

	start := time.Now()
	errs, fx := b.st.JobsFinish(b.ctx, reports)
	end := time.Now()
	wants := []outcome{moves(records.StatusCompleted), moves(records.StatusRetrying), moves(records.StatusFailed),
		moves(records.StatusCancelled), cancels, refused(errNotOwner)}
	allKinds := append(kinds, reportCompleted, reportCompleted)
	var wantFreed records.Room
	var wantDone []string
	for i, want := range wants {
		after := b.get(t, reports[i].ID)
		checkReply(t, want.reply, errs[i], befores[i])
		if want.to == "" {
			checkUntouched(t, befores[i], after)
			continue
		}
		checkMoved(t, allKinds[i], want.to, befores[i], after, start, end)
		wantFreed.Add(after.Queue, after.Type, 1)
		if want.to != records.StatusRetrying { // ended, by its report or its cancellation
			wantDone = append(wantDone, after.ID)
		}
	}
	slices.Sort(fx.Done)
	slices.Sort(wantDone)
	if !reflect.DeepEqual(fx.Freed, wantFreed) || !slices.Equal(fx.Done, wantDone) ||
		len(fx.Ready) != 1 || fx.Ready[0].Queue != reports[1].ID {
		t.Fatalf("effects %+v; want freed %+v, done %q, one ready in %s", fx, wantFreed, wantDone, reports[1].ID)
	}
}
