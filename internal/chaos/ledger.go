package chaos

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ledger is what the clients saw: submissions acknowledged, executions,
// final reports accepted and refused, errors.
type ledger struct {
	mu       sync.Mutex
	acked    map[string]bool
	ackedAt  []time.Time // when each submission was acknowledged, in order
	execs    map[string]int
	accepted map[string][]string // job → deliveries whose completion was answered OK
	refused  int
	accepts  int // completions answered OK, in all
	errs     map[string]int
	doneAt   []time.Time  // per node: the last accepted completion by one of its workers
	holding  map[int]held // per worker: the job between its exec line and its done line
	// Workflow runs: the steps answered +OK (job/step), the steps whose
	// work ran again after that, and the children delivered early.
	stepsOK    map[string]bool
	beganAfter map[string]bool // job/step/delivery: its STEP.BEGIN was sent after the step's +OK
	stepsRerun []string
	early      []string
	// signalsOK holds when each signal was answered +OK, by job, and
	// whether its wait's deadline was far enough away that the wait must
	// take it; spawned counts the children workers submitted
	// (acknowledged as the producers' jobs are).
	signalsOK map[string]signalSent
	spawned   int
}

func newLedger(nodes int) *ledger {
	return &ledger{acked: map[string]bool{}, execs: map[string]int{}, accepted: map[string][]string{},
		errs: map[string]int{}, doneAt: make([]time.Time, nodes), holding: map[int]held{}, stepsOK: map[string]bool{},
		beganAfter: map[string]bool{}, signalsOK: map[string]signalSent{}}
}

// held is a delivery a worker runs.
type held struct{ job, delivery string }

// signalSent is a signal answered +OK: when, and whether its wait must
// take it (its deadline far away).
type signalSent struct {
	at   time.Time
	must bool
}

// signalOK notes that job's signal was answered +OK at t; must: its wait's
// deadline is far enough away that the wait must take it.
func (l *ledger) signalOK(job string, t time.Time, must bool) {
	l.mu.Lock()
	l.signalsOK[job] = signalSent{at: t, must: must}
	l.mu.Unlock()
}

func (l *ledger) ack(id string) {
	l.mu.Lock()
	l.acked[id] = true
	l.ackedAt = append(l.ackedAt, time.Now()) // under the lock: in order
	l.mu.Unlock()
}

// longestWritePause is the longest time between from and to in which no
// submission was acknowledged: after a primary's loss, from the fault
// until agq took a write again; across a switchover, from the old
// primary's last write to the new one's first.
func (l *ledger) longestWritePause(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.ackedAt, from, time.Time.Compare)
	var longest time.Duration
	prev := from
	for _, at := range l.ackedAt[i:] {
		if at.After(to) {
			break
		}
		longest, prev = max(longest, at.Sub(prev)), at
	}
	return max(longest, to.Sub(prev))
}

// clientErr counts an error a client saw, by what it did and the error's
// first words.
func (l *ledger) clientErr(what, msg string) {
	words := strings.Fields(msg)
	key := what + ": " + strings.Join(words[:min(len(words), 4)], " ")
	l.mu.Lock()
	l.errs[key]++
	l.mu.Unlock()
}

// workerLine records a line that worker, attached to node, printed.
func (l *ledger) workerLine(worker, node int, line string) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case f[0] == "exec" && len(f) == 4:
		l.execs[f[1]]++
		l.holding[worker] = held{job: f[1], delivery: f[3]}
	case f[0] == "done" && len(f) >= 4 && f[3] == "ok":
		l.accepted[f[1]] = append(l.accepted[f[1]], f[2])
		l.accepts++
		l.doneAt[node] = time.Now()
		delete(l.holding, worker)
	case f[0] == "done":
		l.refused++
		delete(l.holding, worker)
	case f[0] == "parked":
		delete(l.holding, worker)
	case f[0] == "begin" && len(f) == 4:
		if l.stepsOK[f[1]+"/"+f[2]] {
			l.beganAfter[f[1]+"/"+f[2]+"/"+f[3]] = true
		}
	case f[0] == "step" && len(f) == 4:
		if l.beganAfter[f[1]+"/"+f[2]+"/"+f[3]] {
			l.stepsRerun = append(l.stepsRerun, f[1]+"/"+f[2])
		}
	case f[0] == "stepok" && len(f) == 3:
		l.stepsOK[f[1]+"/"+f[2]] = true
	case f[0] == "spawned" && len(f) == 2:
		if !l.acked[f[1]] {
			l.acked[f[1]] = true
			l.spawned++
		}
	case f[0] == "early" && len(f) == 4:
		l.early = append(l.early, f[1]+" before "+f[2]+" ("+f[3]+")")
	case f[0] == "err" && len(f) >= 3:
		words := f[2:]
		l.errs["worker "+f[1]+": "+strings.Join(words[:min(len(words), 4)], " ")]++
	}
}

// allNodesDoneSince reports whether a worker of every node had a
// completion accepted after t.
func (l *ledger) allNodesDoneSince(t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.doneAt {
		if !at.After(t) {
			return false
		}
	}
	return true
}

// holdingNow returns the delivery worker runs now, if any.
func (l *ledger) holdingNow(worker int) (held, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.holding[worker]
	return h, ok
}

// completions counts the completions answered OK so far.
func (l *ledger) completions() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepts
}

func (l *ledger) ackedIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.acked))
}

// account compares the ledger with the database: its jobs, and those
// moved into history.
func (l *ledger) account(ctx context.Context, conn *pgx.Conn, r *Report) error {
	ids := l.ackedIDs()
	rows, err := conn.Query(ctx, `
		SELECT a.id, j.status, j.delivery::text FROM unnest($1::text[]) AS a(id)
		LEFT JOIN jobs_all j ON j.id = a.id`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Acknowledged = len(ids)
	for rows.Next() {
		var id string
		var status, delivery *string
		if err := rows.Scan(&id, &status, &delivery); err != nil {
			return err
		}
		switch {
		case status == nil:
			r.Lost++
			r.LostIDs = appendSome(r.LostIDs, id)
		case *status == "completed":
			r.Completed++
		case *status == "failed" || *status == "cancelled":
			r.Failed++
		default:
			r.Stuck++
			r.StuckIDs = appendSome(r.StuckIDs, id+" ("+*status+")")
		}
		if l.execs[id] > 1 {
			r.RunMoreThanOnce++
		}
		// A completion accepted for any delivery but the job's last came
		// from a worker that had already lost the job.
		for _, d := range l.accepted[id] {
			if delivery == nil || d != *delivery {
				r.LateReportsAccepted++
				r.LateIDs = appendSome(r.LateIDs, id)
			}
		}
		if len(l.accepted[id]) > 0 && (status == nil || *status != "completed") {
			r.CompletionsLost++
			r.LostIDs = appendSome(r.LostIDs, id+" (completion)")
		}
	}
	r.ReportsRefused = l.refused
	r.StepsCompleted, r.StepsRerun, r.ChildrenEarly = len(l.stepsOK), len(l.stepsRerun), len(l.early)
	for _, s := range l.stepsRerun {
		r.RerunIDs = appendSome(r.RerunIDs, s)
	}
	for _, s := range l.early {
		r.EarlyIDs = appendSome(r.EarlyIDs, s)
	}
	r.ClientErrors = maps.Clone(l.errs)
	if err := rows.Err(); err != nil {
		return err
	}
	rows.Close()
	if !r.Workflows {
		return nil
	}
	r.ChildrenSpawned = l.spawned
	return l.accountWaits(ctx, conn, ids, r)
}

// accountWaits reads from the database what became of the signals
// answered +OK — each must have been taken by its job's wait (unless that
// wait's deadline was close and came first), and no wait may have timed
// out though its signal was answered +OK before its deadline — and of the
// waits for a signal nobody sends, which time out.
func (l *ledger) accountWaits(ctx context.Context, conn *pgx.Conn, acked []string, r *Report) error {
	var jobs []string
	var okAt []time.Time
	var must []bool
	for _, job := range slices.Sorted(maps.Keys(l.signalsOK)) {
		s := l.signalsOK[job]
		jobs, okAt, must = append(jobs, job), append(okAt, s.at), append(must, s.must)
	}
	rows, err := conn.Query(ctx, `
		SELECT a.id, a.must, coalesce(st.status, 'not begun'), coalesce(st.output->>'signal', ''),
			coalesce(st.output->>'timeout' = 'true', false), coalesce(a.ok_at < st.wake_at, false),
			sg.created_at IS NOT NULL, coalesce(sg.taken_by, '')
		FROM unnest($1::text[], $2::timestamptz[], $4::bool[]) AS a(id, ok_at, must)
		LEFT JOIN job_steps_all st ON st.job_id = a.id AND st.step_id = $3 AND st.status <> 'replaced'
		LEFT JOIN job_signals_all sg ON sg.job_id = a.id AND sg.token = 'sig-' || a.id`, jobs, okAt, flowWait, must)
	if err != nil {
		return err
	}
	defer rows.Close()
	r.SignalsOK = len(jobs)
	for rows.Next() {
		var id, status, signal, takenBy string
		var must, timedOut, beforeDeadline, stored bool
		if err := rows.Scan(&id, &must, &status, &signal, &timedOut, &beforeDeadline, &stored, &takenBy); err != nil {
			return err
		}
		// A signal whose deadline may come first is taken, or its wait
		// timed out (and then its +OK came after the deadline).
		if must && (!stored || takenBy != flowWait || signal != flowSignalName) ||
			!must && (!stored || !timedOut && (takenBy != flowWait || signal != flowSignalName)) {
			r.SignalsUndelivered++
			r.UndeliveredIDs = appendSome(r.UndeliveredIDs, fmt.Sprintf("%s (stored %v, taken by %q, wait %s)", id, stored, takenBy, status))
		}
		if !must && timedOut {
			r.RacesTimedOut++
		} else if !must && takenBy == flowWait {
			r.RacesTaken++
		}
		if timedOut && beforeDeadline {
			r.WaitsTimedOutEarly++
			r.TimedOutIDs = appendSome(r.TimedOutIDs, id)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return conn.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE output->>'timeout' = 'true') FROM job_steps_all
		WHERE job_id = ANY($1::text[]) AND step_id = $2 AND wait_signal = 'never'`, acked, flowWait).
		Scan(&r.Lapses, &r.LapsesTimedOut)
}

func appendSome(s []string, v string) []string {
	if len(s) < 10 {
		return append(s, v)
	}
	return s
}

// Report is what a chaos run found.
type Report struct {
	Acknowledged        int `json:"acknowledged"`
	Completed           int `json:"completed"`
	Failed              int `json:"failed_or_cancelled"`
	Lost                int `json:"lost"`
	Stuck               int `json:"stuck"`
	CompletionsLost     int `json:"completions_lost"`
	RunMoreThanOnce     int `json:"run_more_than_once"`
	LateReportsAccepted int `json:"late_reports_accepted"`
	ReportsRefused      int `json:"reports_refused"`
	// Workflow runs: steps answered +OK, those whose work ran again after
	// that, and children delivered before a parent ended.
	Workflows      bool     `json:"workflows"`
	StepsCompleted int      `json:"steps_completed"`
	StepsRerun     int      `json:"steps_rerun_after_ok"`
	ChildrenEarly  int      `json:"children_started_early"`
	RerunIDs       []string `json:"rerun_ids,omitempty"`
	EarlyIDs       []string `json:"early_ids,omitempty"`
	// Signals answered +OK; those their job's wait never took; waits that
	// timed out though their signal was stored before the deadline; waits
	// for a signal nobody sends, and those of them that timed out; the
	// children spawned by parents that await them.
	SignalsOK          int `json:"signals_ok"`
	SignalsUndelivered int `json:"signals_ok_not_delivered"`
	WaitsTimedOutEarly int `json:"waits_timed_out_with_signal_stored"`
	Lapses             int `json:"waits_without_signal"`
	LapsesTimedOut     int `json:"waits_without_signal_timed_out"`
	ChildrenSpawned    int `json:"children_spawned"`
	// Waits whose deadline (1 s) a signal sent within two seconds may beat
	// or not: those that took it, those that timed out first.
	RacesTaken     int      `json:"close_waits_took_signal"`
	RacesTimedOut  int      `json:"close_waits_timed_out"`
	UndeliveredIDs []string `json:"undelivered_ids,omitempty"`
	TimedOutIDs    []string `json:"timed_out_ids,omitempty"`
	// TLS says every client connected over TLS with a client certificate.
	TLS bool `json:"tls"`
	// SubmitRate is the submissions asked per second; WorkerCapacity what
	// the workers can take at most, CompletionRate what they completed
	// while submissions went on.
	SubmitRate     int     `json:"submit_rate"`
	WorkerCapacity float64 `json:"worker_capacity_per_s"`
	CompletionRate float64 `json:"completion_rate_per_s"`
	// Drain is how long the unfinished jobs were waited for after the
	// submissions; StuckAfter how long none of them may move before they
	// are called stuck.
	Drain        time.Duration  `json:"drain_ns"`
	StuckAfter   time.Duration  `json:"stuck_after_ns"`
	Faults       []FaultResult  `json:"faults"`
	ClientErrors map[string]int `json:"client_errors"`
	LostIDs      []string       `json:"lost_ids,omitempty"`
	StuckIDs     []string       `json:"stuck_ids,omitempty"`
	LateIDs      []string       `json:"late_ids,omitempty"`
	Elapsed      time.Duration  `json:"elapsed_ns"`
}

// FaultResult is one fault and how long the system took to recover.
type FaultResult struct {
	Kind string `json:"kind"`
	// At is when the fault began, from the start of the run.
	At time.Duration `json:"at_ns"`
	// Recovery is from the fault's start until a worker of every node had
	// a completion accepted again; Recovered is false if that never came.
	Recovery  time.Duration `json:"recovery_ns"`
	Recovered bool          `json:"recovered"`
	// WritePause is the longest time from the fault until Recovery in
	// which no submission was acknowledged (probes submit every 20 ms).
	WritePause time.Duration `json:"write_pause_ns"`
	Error      string        `json:"error,omitempty"`
}

// OK reports whether nothing acknowledged was lost or left unfinished (no
// submission, no completion answered OK), no late report was accepted, no
// completed step ran again nor child before its parents ended, and every
// fault was recovered from.
func (r *Report) OK() bool {
	ok := r.Lost == 0 && r.Stuck == 0 && r.LateReportsAccepted == 0 && r.CompletionsLost == 0 &&
		r.StepsRerun == 0 && r.ChildrenEarly == 0 && r.SignalsUndelivered == 0 && r.WaitsTimedOutEarly == 0
	for _, f := range r.Faults {
		ok = ok && f.Recovered && f.Error == ""
	}
	return ok
}

// Print writes the report for people.
func (r *Report) Print(w io.Writer) {
	if r.TLS {
		fmt.Fprintf(w, "every client over TLS with a client certificate\n")
	}
	fmt.Fprintf(w, "submitted at %d/s; the workers can take at most %.0f/s and completed %.0f/s meanwhile\n",
		r.SubmitRate, r.WorkerCapacity, r.CompletionRate)
	fmt.Fprintf(w, "waited %.1fs after the last submission for the jobs to finish\n", r.Drain.Seconds())
	fmt.Fprintf(w, "jobs acknowledged:                  %d\n", r.Acknowledged)
	fmt.Fprintf(w, "  completed:                        %d\n", r.Completed)
	fmt.Fprintf(w, "  failed or cancelled:              %d\n", r.Failed)
	fmt.Fprintf(w, "  lost (acknowledged, not in the database): %d %v\n", r.Lost, r.LostIDs)
	fmt.Fprintf(w, "  stuck (unfinished, none moved for %s): %d %v\n", r.StuckAfter, r.Stuck, r.StuckIDs)
	fmt.Fprintf(w, "  completion answered OK, job not completed: %d\n", r.CompletionsLost)
	fmt.Fprintf(w, "  executed more than once:          %d\n", r.RunMoreThanOnce)
	fmt.Fprintf(w, "final reports accepted from a worker that had lost the job: %d %v\n", r.LateReportsAccepted, r.LateIDs)
	fmt.Fprintf(w, "final reports refused (stale):      %d\n", r.ReportsRefused)
	if r.Workflows {
		fmt.Fprintf(w, "steps answered +OK:                 %d\n", r.StepsCompleted)
		fmt.Fprintf(w, "  whose work ran again after that:  %d %v\n", r.StepsRerun, r.RerunIDs)
		fmt.Fprintf(w, "children started before a parent ended (or awaited): %d %v\n", r.ChildrenEarly, r.EarlyIDs)
		fmt.Fprintf(w, "children spawned by awaiting parents: %d\n", r.ChildrenSpawned)
		fmt.Fprintf(w, "signals answered +OK:               %d\n", r.SignalsOK)
		fmt.Fprintf(w, "  never delivered to their wait:    %d %v\n", r.SignalsUndelivered, r.UndeliveredIDs)
		fmt.Fprintf(w, "  wait timed out, signal stored before the deadline: %d %v\n", r.WaitsTimedOutEarly, r.TimedOutIDs)
		fmt.Fprintf(w, "  of them with a close deadline: took it %d, timed out first %d\n", r.RacesTaken, r.RacesTimedOut)
		fmt.Fprintf(w, "waits for a signal nobody sends:    %d, timed out: %d\n", r.Lapses, r.LapsesTimedOut)
	}
	fmt.Fprintf(w, "faults:\n")
	for _, f := range r.Faults {
		state := fmt.Sprintf("recovered in %.2fs, writes paused %.2fs", f.Recovery.Seconds(), f.WritePause.Seconds())
		if !f.Recovered {
			state = "NOT RECOVERED"
		}
		if f.Error != "" {
			state += " (" + f.Error + ")"
		}
		fmt.Fprintf(w, "  %6.1fs  %-22s %s\n", f.At.Seconds(), f.Kind, state)
	}
	fmt.Fprintf(w, "errors seen by clients:\n")
	for _, k := range slices.Sorted(maps.Keys(r.ClientErrors)) {
		fmt.Fprintf(w, "  %6d  %s\n", r.ClientErrors[k], k)
	}
	verdict := "OK"
	if !r.OK() {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "verdict: %s (%.0fs)\n", verdict, r.Elapsed.Seconds())
}
