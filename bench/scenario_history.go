package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// History: finished jobs move from jobs into jobs_history, partitioned by
// when they expire, and retention drops whole periods. This scenario runs
// the client package's burn-down with history empty and with millions of
// finished jobs retained (each on a database of its own, in turn), times
// the drop of a due period during a burn-down, and JOB.GET among the
// retained jobs. The retaining agq is restarted once: its leader's first
// sweep drops the periods that are due, the next only a minute later.

const (
	historyDB        = "agqhist"
	historyRetention = 7 * 24 * time.Hour // agq's default for completed jobs
	historyChunk     = 1000000            // rows an INSERT of the fill
	historyDays      = 8                  // daily periods covering a week of expiries from today
	historyDue       = "benchdue"
	// historyExpiryBurn is how long the burn-down during the expiry lasts,
	// at the rate of the one before it: long enough that the moves, 5 s
	// behind the completions, run during it too.
	historyExpiryBurn = 15 * time.Second
)

// historyDatabase creates database name with the daily periods of the
// week from now: agq's own moves, which expire in 7 days, go into the last
// of them, as they would in a service that has run for a week.
func (e *scenarioEnv) historyDatabase(ctx context.Context, name string, now time.Time) (*pgxpool.Pool, error) {
	if _, err := e.cl.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	db, err := pgxpool.New(ctx, e.cl.url(name))
	if err != nil {
		return nil, err
	}
	// agq's migrations make the history tables.
	s, err := e.startHistoryAgq(ctx, name)
	if err != nil {
		db.Close()
		return nil, err
	}
	e.stopHistoryAgq(s)
	today := now.UTC().Truncate(24 * time.Hour)
	for d := range historyDays {
		lo := today.Add(time.Duration(d) * 24 * time.Hour)
		p := historyPeriod{lo: lo, hi: lo.Add(24 * time.Hour), suffix: "bench" + lo.Format("20060102")}
		if err := historyPartitionsCreate(ctx, db, p); err != nil {
			db.Close()
			return nil, err
		}
		if err := historyPeriodList(ctx, db, p); err != nil {
			db.Close()
			return nil, err
		}
	}
	return db, nil
}

// historyPeriod is one row of history_periods, with its partitions.
type historyPeriod struct {
	lo, hi time.Time
	suffix string
}

// historyRows adds the history scenario's rows.
func (e *scenarioEnv) historyRows(ctx context.Context, r *report) error {
	o, n := e.o, e.o.historyJobs
	// Two databases, each with its agq: one fills with n retained jobs,
	// the other's history stays empty, and their burn-downs alternate, so
	// that the machine's drift over the minutes of the fill weighs on both.
	now := time.Now()
	db, err := e.historyDatabase(ctx, historyDB, now)
	if err != nil {
		return err
	}
	defer db.Close()
	db0, err := e.historyDatabase(ctx, historyDB+"_empty", now)
	if err != nil {
		return err
	}
	defer db0.Close()
	s, err := e.startHistoryAgq(ctx, historyDB)
	if err != nil {
		return err
	}
	defer func() { e.stopHistoryAgq(s) }()
	s0, err := e.startHistoryAgq(ctx, historyDB+"_empty")
	if err != nil {
		return err
	}
	defer func() { e.stopHistoryAgq(s0) }()

	e.say("history: filling %d finished jobs", n)
	fillStart := time.Now()
	err = historyFill(ctx, db, "hist-", n, now.Add(-historyRetention), historyRetention, func(done int) {
		e.say("history: %d of %d rows, %.0f s", done, n, time.Since(fillStart).Seconds())
	})
	if err != nil {
		return fmt.Errorf("history fill: %w", err)
	}
	inserted := time.Since(fillStart)
	if err := historyCount(ctx, db); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, "VACUUM ANALYZE jobs_history"); err != nil {
		return err
	}
	analyzed := time.Since(fillStart)
	// Retained jobs are on disk, as after days of service, not in the
	// WAL of a checkpoint still to be written during the burn-downs.
	if _, err := db.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	filled := time.Since(fillStart)

	burn := func(what, dbName string, pool *pgxpool.Pool, srv *agqServer, run int, statements bool) (measure, error) {
		// Each burn-down starts on a quiet cluster: both databases' moves
		// done and no autovacuum left over from the burn-down before it,
		// which the next one would otherwise pay for.
		for _, p := range []*pgxpool.Pool{db0, db} {
			if err := historySettled(ctx, p); err != nil {
				return measure{}, err
			}
		}
		if err := e.cl.autovacuumsQuiet(ctx, time.Minute); err != nil {
			return measure{}, err
		}
		if statements {
			if err := e.cl.statementsReset(ctx, dbName); err != nil {
				return measure{}, err
			}
		}
		cpuBefore := postgresCPUByKind()
		readsBefore, err := blocksRead(ctx, pool)
		if err != nil {
			return measure{}, err
		}
		avCtx, stopAV := context.WithCancel(ctx)
		av := make(chan string, 1)
		go func() { av <- e.cl.autovacuums(avCtx) }()
		m, err := agqBurnDownClient(ctx, e.cl, srv, o.jobs, run)
		stopAV()
		e.say("history: %s: autovacuum meanwhile: %s", what, <-av)
		if err != nil {
			return measure{}, fmt.Errorf("client burn-down, %s: %w", what, err)
		}
		readsAfter, err := blocksRead(ctx, pool)
		if err != nil {
			return measure{}, err
		}
		e.say("history: %s: blocks read from outside the buffer cache: %s", what, readsAfter.since(readsBefore))
		e.say("history: %s: %.0f jobs/s; per job: agq %s, bench %s, PostgreSQL %s (%s), WAL %.0f bytes, %.2f commits; waits %s",
			what, m.rate(), m.cost.agqCPU, m.cost.self, m.cost.pgCPU, cpuByKindPerJob(cpuBefore, postgresCPUByKind(), m.jobs),
			m.cost.walBytes, m.cost.commits, m.waits)
		if statements {
			if err := e.cl.statementsPrint(ctx, dbName, o.jobs, e.progress); err != nil {
				return measure{}, err
			}
		}
		return m, nil
	}
	retained := thousands(n) + " finished jobs retained"
	var empties, fulls []measure
	for i := range max(o.repeat, 1) {
		// The pairs alternate which goes first.
		e.say("history: burn-downs of %d jobs by the client package, history empty and %s (pair %d of %d)", o.jobs, retained, i+1, max(o.repeat, 1))
		for k := range 2 {
			if (i+k)%2 == 0 {
				m, err := burn("history empty", historyDB+"_empty", db0, s0, 400+i, o.statements && i == 0)
				if err != nil {
					return err
				}
				empties = append(empties, m)
			} else {
				m, err := burn(retained, historyDB, db, s, 500+i, o.statements && i == 0)
				if err != nil {
					return err
				}
				fulls = append(fulls, m)
			}
		}
	}
	empty, full := median(empties), median(fulls)
	e.stopHistoryAgq(s0)
	s0 = nil

	if err := historySettled(ctx, db); err != nil {
		return err
	}
	e.say("history: JOB.GET of 2,000 retained jobs and 200 unknown ids")
	ids := make([]string, 2000)
	for i := range ids {
		ids[i] = fmt.Sprintf("hist-%09d", 1+rand.IntN(n))
	}
	found, err := jobGets(ctx, s, ids, true)
	if err != nil {
		return err
	}
	unknown := make([]string, 200)
	for i := range unknown {
		unknown[i] = fmt.Sprintf("hist-unknown-%d", i)
	}
	missing, err := jobGets(ctx, s, unknown, false)
	if err != nil {
		return err
	}
	// The counts of INFO and QUEUE.STATS include the jobs in history.
	counted := map[string]time.Duration{}
	for _, c := range [][]any{{"INFO"}, {"QUEUE.STATS"}, {"QUEUE.LIST"}} {
		start := time.Now()
		if err := s.admin.Do(ctx, c...).Err(); err != nil {
			return fmt.Errorf("%v: %w", c, err)
		}
		counted[c[0].(string)] = time.Since(start)
	}

	ex, err := e.historyExpiry(ctx, db, &s, max(o.jobs, int(full.rate()*historyExpiryBurn.Seconds())), max(n/10, 1))
	if err != nil {
		return err
	}

	r.add("burn-down, client package worker, empty history", perSecond(empty.rate()), "", "")
	r.add(fmt.Sprintf("history fill: %s finished jobs in SQL over %d daily periods, then VACUUM ANALYZE and CHECKPOINT", thousands(n), historyDays),
		fmt.Sprintf("%.0f s", filled.Seconds()),
		fmt.Sprintf("inserts %.0f s (%.0f rows/s), counts by period and VACUUM ANALYZE %.0f s, CHECKPOINT %.0f s", inserted.Seconds(), float64(n)/inserted.Seconds(),
			(analyzed-inserted).Seconds(), (filled-analyzed).Seconds()), "")
	r.add(fmt.Sprintf("burn-down, client package worker, %s finished jobs retained", thousands(n)),
		perSecond(full.rate()), perSecond(empty.rate())+" (empty history)", fmt.Sprintf("%.2f of empty history", full.rate()/empty.rate()))
	r.add("retention: finished jobs expired per second during a full-rate burn-down",
		fmt.Sprintf("%.0f jobs/s expired (a due period of %s jobs gone %.2f s after agq's start, the burn-down's start at %.2f s)",
			float64(ex.due)/ex.gone.Seconds(), thousands(ex.due), ex.gone.Seconds(), ex.burnStart.Seconds()),
		perSecond(ex.burn.rate())+fmt.Sprintf(" completed (%s jobs, same run)", thousands(ex.burn.jobs)),
		fmt.Sprintf("expiry %.0f× completion", float64(ex.due)/ex.gone.Seconds()/ex.burn.rate()))
	r.add("retention during that burn-down: n_dead_tup of jobs before / after (autovacuums between); most finished jobs in jobs at once",
		fmt.Sprintf("%d / %d (%d); %d", ex.deadBefore, ex.deadAfter, ex.autovacuums, ex.peakFinished), "", "")
	r.add(fmt.Sprintf("JOB.GET of a finished job among %s", thousands(n)), p50p99(found), "", "")
	r.add(fmt.Sprintf("JOB.GET of an unknown id, beside %s finished jobs", thousands(n)), p50p99(missing), "", "")
	r.add(fmt.Sprintf("INFO / QUEUE.STATS / QUEUE.LIST beside %s finished jobs, once each", thousands(n)),
		millis(counted["INFO"])+" / "+millis(counted["QUEUE.STATS"])+" / "+millis(counted["QUEUE.LIST"]), "", "")
	return nil
}

// historyExpiry is a burn-down run while agq drops a due period.
type historyExpiry struct {
	due                   int
	burn                  measure
	gone, burnStart       time.Duration // since agq's start
	peakFinished          int
	deadBefore, deadAfter int64
	autovacuums           int64
}

// historyExpiry fills a due period with due jobs and queues burn jobs, then
// restarts agq (*s) so that its first retention pass falls at the
// burn-down's start, and times the period's drop and the burn-down.
func (e *scenarioEnv) historyExpiry(ctx context.Context, db *pgxpool.Pool, s **agqServer, burn, due int) (historyExpiry, error) {
	ex := historyExpiry{due: due}
	queue := "burn-client"
	if err := (*s).submitBatches(ctx, queue, burn, 1000); err != nil {
		return ex, err
	}
	// The due period is two days past, clear of the week's periods and
	// of the hour retention carries jobs into. Its partitions fill before
	// it is listed: until then agq does not know it.
	lo := time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour)
	p := historyPeriod{lo: lo, hi: lo.Add(time.Hour), suffix: historyDue}
	e.say("history: a due period of %d jobs, then %d jobs worked off while agq restarts and drops it", due, burn)
	if err := historyPartitionsCreate(ctx, db, p); err != nil {
		return ex, err
	}
	if err := historyFill(ctx, db, "due-", due, lo.Add(-historyRetention), time.Hour, nil); err != nil {
		return ex, err
	}
	if _, err := db.Exec(ctx, "VACUUM ANALYZE jobs_history_"+historyDue); err != nil {
		return ex, err
	}
	if err := historySettled(ctx, db); err != nil {
		return ex, err
	}
	e.stopHistoryAgq(*s)
	*s = nil
	if err := historyPeriodList(ctx, db, p); err != nil {
		return ex, err
	}
	if err := historyCount(ctx, db); err != nil {
		return ex, err
	}
	var err error
	if ex.deadBefore, ex.autovacuums, err = jobsDead(ctx, db); err != nil {
		return ex, err
	}

	watchCtx, stopWatch := context.WithTimeout(ctx, 5*time.Minute)
	defer stopWatch()
	launch := time.Now()
	started, burned := make(chan struct{}), make(chan struct{})
	watched := make(chan error, 1)
	go func() { watched <- watchRetention(watchCtx, db, launch, started, burned, &ex) }()
	if *s, err = e.startHistoryAgq(ctx, historyDB); err != nil {
		return ex, err
	}
	ex.burnStart = time.Since(launch)
	close(started)
	ex.burn, err = agqWorkClient(ctx, e.cl, *s, queue, burn, "client-history-expiry")
	close(burned)
	if err != nil {
		return ex, fmt.Errorf("client burn-down during the expiry: %w", err)
	}
	if err := <-watched; err != nil {
		return ex, err
	}
	// Backends report their statistics up to 10 s late when idle.
	time.Sleep(11 * time.Second)
	var after int64
	if ex.deadAfter, after, err = jobsDead(ctx, db); err != nil {
		return ex, err
	}
	ex.autovacuums = after - ex.autovacuums
	return ex, nil
}

// watchRetention polls until the due period is gone (ex.gone, since
// launch) and, once burned is closed, no finished job is left in jobs,
// keeping the most finished jobs seen in jobs after started is closed.
func watchRetention(ctx context.Context, db *pgxpool.Pool, launch time.Time, started, burned <-chan struct{}, ex *historyExpiry) error {
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return fmt.Errorf("history: the due period gone: %v, the burn-down over: %v: %w", ex.gone > 0, closed(burned), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if ex.gone == 0 {
			var listed int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM history_periods WHERE suffix = $1`, historyDue).Scan(&listed); err != nil {
				return err
			}
			if listed == 0 {
				ex.gone = time.Since(launch)
			}
		}
		if !closed(started) || tick%5 != 0 {
			continue
		}
		over := closed(burned) // before the count: no job ends after it
		var finished int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status IN ('completed', 'failed', 'cancelled')`).Scan(&finished); err != nil {
			return err
		}
		ex.peakFinished = max(ex.peakFinished, finished)
		if ex.gone > 0 && over && finished == 0 {
			return nil
		}
	}
}

// startHistoryAgq starts agq on database name.
func (e *scenarioEnv) startHistoryAgq(ctx context.Context, name string) (*agqServer, error) {
	s, err := startAgq(ctx, e.bin, e.cl.url(name), 2000, "--ui", "off")
	if err != nil {
		return nil, fmt.Errorf("agq on database %s: %w", name, err)
	}
	return s, nil
}

// stopHistoryAgq stops s, first passing on the warnings and errors of its
// log: a failed move or drop shows nowhere else.
func (e *scenarioEnv) stopHistoryAgq(s *agqServer) {
	if s == nil {
		return
	}
	if f, err := os.Open(filepath.Join(s.dir, "agq.log")); err == nil {
		shown := 0
		for sc := bufio.NewScanner(f); sc.Scan() && shown < 20; {
			if line := sc.Text(); strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
				e.say("history: agq logged %s", line)
				shown++
			}
		}
		f.Close()
	}
	s.stop()
}

// historyPartitionsCreate creates a period's partitions of each history
// table, without listing the period.
func historyPartitionsCreate(ctx context.Context, db *pgxpool.Pool, p historyPeriod) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, t := range []string{"jobs_history", "job_steps_history", "job_logs_history", "job_signals_history"} {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s_%s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
				t, p.suffix, t, p.lo.Format(time.RFC3339), p.hi.Format(time.RFC3339))); err != nil {
				return err
			}
		}
		return nil
	})
}

// historyPeriodList lists a period in history_periods, where retention
// finds it.
func historyPeriodList(ctx context.Context, db *pgxpool.Pool, p historyPeriod) error {
	_, err := db.Exec(ctx, `INSERT INTO history_periods (lo, hi, suffix) VALUES ($1, $2, $3)`, p.lo, p.hi, p.suffix)
	return err
}

// historyCount counts the jobs in history by period, as agq's moves do
// (history_counts): the fill writes jobs_history directly. No agq may move
// jobs meanwhile.
func historyCount(ctx context.Context, db *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
			DELETE FROM history_counts;
			INSERT INTO history_counts (namespace, queue, status, period_lo, n)
			SELECT h.namespace, h.queue, h.status, p.lo, count(*)
			FROM jobs_history h JOIN history_periods p ON h.expires_at >= p.lo AND h.expires_at < p.hi
			GROUP BY 1, 2, 3, 4`)
		return err
	})
}

// historyFill inserts n completed jobs into jobs_history, ids prefix and
// a number of 9 digits, in INSERTs of historyChunk rows: they ended one
// after the other, evenly over span from first, and each expires
// historyRetention after its end. progress, when set, hears after each
// INSERT how many rows are in.
func historyFill(ctx context.Context, db *pgxpool.Pool, prefix string, n int, first time.Time, span time.Duration, progress func(int)) error {
	step := span.Seconds() / float64(n)
	for done := 0; done < n; {
		k := min(historyChunk, n-done)
		_, err := db.Exec(ctx, `
			INSERT INTO jobs_history (expires_at, id, seq, queue, type, payload, status, attempt, max_attempts, timeout_seconds,
			                          run_at, worker_id, result, created_at, started_at, finished_at, updated_at)
			SELECT f + make_interval(secs => $4::float8), $1::text || lpad(g::text, 9, '0'), g,
			       (ARRAY['email', 'reports', 'video', 'etl'])[1 + g % 4], 'bench',
			       jsonb_build_object('input', '/data/in/' || g || '.csv', 'sent_at', 0), 'completed', 1, 3, 3600,
			       f - interval '3 seconds', 'worker-' || g % 300, jsonb_build_object('output', 'ok', 'rows', g % 1000),
			       f - interval '3 seconds', f - interval '2 seconds', f, f
			FROM (SELECT g, $2::timestamptz + make_interval(secs => (g - 1) * $3::float8) AS f
			      FROM generate_series($5::bigint, $6::bigint) g) s`,
			prefix, first, step, historyRetention.Seconds(), done+1, done+k)
		if err != nil {
			return err
		}
		done += k
		if progress != nil {
			progress(done)
		}
	}
	return nil
}

// historySettled waits until jobs holds no finished job: every one has
// moved into history.
func historySettled(ctx context.Context, db *pgxpool.Pool) error {
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		var finished int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status IN ('completed', 'failed', 'cancelled')`).Scan(&finished); err != nil {
			return err
		}
		if finished == 0 {
			return nil
		}
		if time.Since(start) > 2*time.Minute {
			return fmt.Errorf("history: %d finished jobs still in jobs after 2 minutes", finished)
		}
	}
}

// reads are the blocks a database's backends read from outside the buffer
// cache so far (a table's new blocks count too), by table: heap and
// indexes together.
type reads map[string]int64

func blocksRead(ctx context.Context, db *pgxpool.Pool) (reads, error) {
	rows, err := db.Query(ctx, `
		SELECT relname, heap_blks_read + coalesce(idx_blks_read, 0) + coalesce(toast_blks_read, 0) FROM pg_statio_user_tables`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	r := reads{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		r[name] = n
	}
	return r, rows.Err()
}

// since names the tables that read the most blocks since b, and the total.
func (r reads) since(b reads) string {
	type table struct {
		name string
		n    int64
	}
	var all []table
	var total int64
	for name, n := range r {
		if d := n - b[name]; d > 0 {
			all, total = append(all, table{name, d}), total+d
		}
	}
	slices.SortFunc(all, func(x, y table) int { return cmp.Compare(y.n, x.n) })
	var out []string
	for _, t := range all[:min(len(all), 6)] {
		out = append(out, fmt.Sprintf("%s %d", t.name, t.n))
	}
	return fmt.Sprintf("%d in all; %s", total, strings.Join(out, ", "))
}

// jobsDead reads jobs' dead tuples and how often autovacuum has run on it.
func jobsDead(ctx context.Context, db *pgxpool.Pool) (dead, autovacuums int64, err error) {
	err = db.QueryRow(ctx, `SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables WHERE relname = 'jobs'`).Scan(&dead, &autovacuums)
	return dead, autovacuums, err
}

// jobGets times JOB.GET of each id, one at a time, after a few untimed
// ones; each must answer a job when found, nil otherwise.
func jobGets(ctx context.Context, s *agqServer, ids []string, found bool) ([]time.Duration, error) {
	var out []time.Duration
	for i, id := range append(ids[:10:10], ids...) {
		start := time.Now()
		v, err := s.admin.Do(ctx, "JOB.GET", id).Text()
		d := time.Since(start)
		switch {
		case found && (err != nil || !strings.Contains(v, `"completed"`)):
			return nil, fmt.Errorf("JOB.GET %s answered %q, %v", id, v, err)
		case !found && !errors.Is(err, redis.Nil):
			return nil, fmt.Errorf("JOB.GET of the unknown %s answered %q, %v", id, v, err)
		}
		if i >= 10 {
			out = append(out, d)
		}
	}
	return out, nil
}

func p50p99(d []time.Duration) string {
	d = sortDurations(d)
	return millis(percentile(d, 50)) + " / " + millis(percentile(d, 99)) + " (p50 / p99)"
}
