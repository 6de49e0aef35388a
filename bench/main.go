// Command bench measures agq beside River on one PostgreSQL: it starts a
// cluster with PostgreSQL's durable defaults, runs agq (built from this
// checkout) as a subprocess driven over RESP by go-redis clients, and River
// v0.51 in process on another database of the same cluster, one after the
// other for each kind of work, and prints every figure with the agq/River
// ratio as a markdown table.
//
//	cd bench && go run .            # full size (a few minutes)
//	cd bench && go run . -small     # seconds
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

type options struct {
	jobs, workers, submitJobs, producers int
	pipeJobs                             int
	batch                                int
	continuous                           time.Duration
	latency, idle                        int
	settle                               time.Duration
	only                                 string
	statements                           bool
	dashboardJobs, dashboardSamples      int
	repeat                               int
	fanIn                                int
	pgbouncer                            bool
	cpuProfile                           string
}

func main() {
	var o options
	small := flag.Bool("small", false, "a run of seconds, for CI")
	flag.IntVar(&o.jobs, "jobs", 20000, "jobs per burn-down")
	flag.IntVar(&o.workers, "workers", 64, "agq worker connections")
	flag.IntVar(&o.batch, "batch", 100, "jobs per BLMPOP in the batched burn-down")
	flag.IntVar(&o.submitJobs, "submit-jobs", 20000, "jobs per submission run")
	flag.IntVar(&o.pipeJobs, "pipe-jobs", 50000, "LPUSHes in the redis-cli --pipe run")
	flag.IntVar(&o.producers, "producers", 16, "concurrent producers")
	flag.DurationVar(&o.continuous, "continuous", 10*time.Second, "length of the continuous run")
	flag.IntVar(&o.latency, "latency", 300, "pickup latency samples")
	flag.IntVar(&o.idle, "idle", 10000, "idle blocked connections (0 skips)")
	flag.DurationVar(&o.settle, "settle", 15*time.Second, "wait after the idle connections blocked, before measuring")
	flag.IntVar(&o.dashboardJobs, "dashboard-jobs", 1000000, "jobs in the database the dashboard's pages are timed on")
	flag.StringVar(&o.only, "only", "", "comma list among burn,workers (client and agw),python,continuous,submit,batches,latency,idle,dashboard,workflows (default all; submit includes batches)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write the benchmark process's CPU profile of the workers rows to this file")
	flag.BoolVar(&o.statements, "statements", false, "print PostgreSQL's statements of the first burn-downs (pg_stat_statements)")
	flag.IntVar(&o.fanIn, "fan-in", 10000, "parents of the fan-in's child")
	flag.BoolVar(&o.pgbouncer, "pgbouncer", false, "agq's pool through PgBouncer in transaction mode (LISTEN and the leader's lock straight to PostgreSQL)")
	flag.IntVar(&o.repeat, "repeat", 1, "burn-downs run this many times, agq's and River's in turn; the table has the median of each")
	flag.Parse()
	if *small {
		o = options{jobs: 2000, workers: 16, batch: 50, submitJobs: 2000, pipeJobs: 2000, producers: 8, continuous: 2 * time.Second,
			latency: 30, idle: 200, settle: 0, only: o.only, statements: o.statements, dashboardJobs: 20000, repeat: o.repeat, fanIn: 1000, pgbouncer: o.pgbouncer, cpuProfile: o.cpuProfile}
	}
	o.dashboardSamples = 3
	r, err := run(context.Background(), o, os.Stderr)
	if r != nil {
		r.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run runs the selected scenarios and returns their report.
func run(ctx context.Context, o options, progress io.Writer) (*report, error) {
	raiseFileLimit()
	want := func(s string) bool { return o.only == "" || strings.Contains(","+o.only+",", ","+s+",") }
	say := func(format string, args ...any) { fmt.Fprintf(progress, "bench: "+format+"\n", args...) }

	cl, err := startCluster(ctx, o.statements)
	if err != nil {
		return nil, fmt.Errorf("starting PostgreSQL: %w", err)
	}
	defer cl.close()
	tmp, err := os.MkdirTemp("", "agqb-bin")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin, err := buildAgq(ctx, tmp)
	if err != nil {
		return nil, err
	}
	agqURL, direct := cl.url("agq"), []string(nil)
	if o.pgbouncer {
		pb, err := cl.pg.StartPgBouncer(ctx, freeAddr())
		if err != nil {
			return nil, err
		}
		defer pb.Close()
		agqURL, direct = pb.URL("agq"), []string{"--direct-database-url", cl.url("agq")}
	}
	s, err := startAgq(ctx, bin, agqURL, max(o.idle+1000, 10000), direct...)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	rv, err := newRiver(ctx, cl.url("river"))
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	defer rv.close()
	ws, err := s.newWorkers(ctx, "w", o.workers)
	if err != nil {
		return nil, err
	}
	defer closeWorkers(ws)
	// Workers heartbeat as agw does, through the admin connection (their
	// own are busy popping), so a long run never declares them dead.
	beatCtx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	go s.heartbeat(beatCtx, append(workerIDs(ws), "idle-fleet"), 10*time.Second)

	r := &report{}
	r.add("machine", fmt.Sprintf("%d CPUs, %s", runtime.NumCPU(), runtime.GOARCH), "", "")
	if o.pgbouncer {
		r.add("agq's pool", "through PgBouncer, transaction mode", "straight", "")
	}
	if want("burn") {
		var as, bs, ars, aps, abs []measure
		for i := range max(o.repeat, 1) {
			statements := o.statements && i == 0
			say("burn-down of %d jobs, %d agq worker connections (run %d of %d)", o.jobs, o.workers, i+1, max(o.repeat, 1))
			a, err := agqBurnDown(ctx, cl, s, ws, o.jobs, false, statements)
			if err != nil {
				return r, fmt.Errorf("agq burn-down: %w", err)
			}
			if statements {
				if err := cl.statementsPrint(ctx, "agq", o.jobs, progress); err != nil {
					return r, err
				}
			}
			b, err := riverBurnDown(ctx, cl, rv, o.jobs, statements)
			if err != nil {
				return r, fmt.Errorf("river burn-down: %w", err)
			}
			if statements {
				if err := cl.statementsPrint(ctx, "river", o.jobs, progress); err != nil {
					return r, err
				}
			}
			say("burn-down with JOB.UPDATE running")
			ar, err := agqBurnDown(ctx, cl, s, ws, o.jobs, true, false)
			if err != nil {
				return r, fmt.Errorf("agq burn-down: %w", err)
			}
			say("burn-down with each report pipelined with the next RPOP")
			ap, err := agqBurnDownPipelined(ctx, cl, s, ws, o.jobs, false)
			if err != nil {
				return r, fmt.Errorf("agq pipelined burn-down: %w", err)
			}
			say("burn-down with BLMPOP COUNT %d and pipelined reports", o.batch)
			ab, err := agqBurnDownBatched(ctx, cl, s, ws, o.jobs, o.batch, statements)
			if err != nil {
				return r, fmt.Errorf("agq batched burn-down: %w", err)
			}
			if statements {
				if err := cl.statementsPrint(ctx, "agq", o.jobs, progress); err != nil {
					return r, err
				}
			}
			say("jobs/s: agq %.0f, with running %.0f, report and next pop pipelined %.0f, batched %.0f; River %.0f",
				a.rate(), ar.rate(), ap.rate(), ab.rate(), b.rate())
			as, bs, ars, aps, abs = append(as, a), append(bs, b), append(ars, ar), append(aps, ap), append(abs, ab)
		}
		a, b, ar, ap, ab := median(as), median(bs), median(ars), median(aps), median(abs)
		r.rates(fmt.Sprintf("burn-down, %d jobs, BRPOP + JOB.UPDATE completed", o.jobs), a.rate(), b.rate())
		r.rates("burn-down, with JOB.UPDATE running too", ar.rate(), b.rate())
		r.costs("burn-down", a, b)
		r.add("burn-down with running: write transactions / WAL bytes per job", fmt.Sprintf("%.2f / %.0f", ar.cost.commits, ar.cost.walBytes), "", "")
		r.rates("burn-down, JOB.UPDATE completed + the next RPOP in one pipeline", ap.rate(), b.rate())
		r.add("burn-down report + next pop: write transactions / WAL bytes per job", fmt.Sprintf("%.2f / %.0f", ap.cost.commits, ap.cost.walBytes), "", "")
		r.add("burn-down report + next pop: CPU per job, agq / PostgreSQL / clients", micros(ap.cost.agqCPU)+" / "+micros(ap.cost.pgCPU)+" / "+micros(ap.cost.self), "", "")
		r.rates(fmt.Sprintf("burn-down, BLMPOP COUNT %d + pipelined JOB.UPDATE completed", o.batch), ab.rate(), b.rate())
		r.add("burn-down batched: write transactions / WAL bytes per job", fmt.Sprintf("%.2f / %.0f", ab.cost.commits, ab.cost.walBytes), "", "")
		r.add("burn-down batched: CPU per job, agq / PostgreSQL / clients", micros(ab.cost.agqCPU)+" / "+micros(ab.cost.pgCPU)+" / "+micros(ab.cost.self), "", "")
		r.add("burn-down batched: PostgreSQL waits (share of samples)", ab.waits, "", "")
	}
	if want("workers") || want("client") || want("agw") {
		rows := workerRowsOf{client: want("workers") || want("client"), agw: want("workers") || want("agw")}
		if err := workerRows(ctx, o, rows, cl, s, rv, tmp, r, say); err != nil {
			return r, err
		}
	}
	if want("python") {
		if err := pythonRows(ctx, o, cl, s, r, say); err != nil {
			return r, err
		}
	}
	if want("workflows") {
		say("fan-in: %d parents and one child after all of them", o.fanIn)
		d, err := agqFanIn(ctx, s, ws, o.fanIn, o.batch)
		if err != nil {
			return r, fmt.Errorf("agq fan-in: %w", err)
		}
		r.add(fmt.Sprintf("fan-in of %s: last parent's completion to the child's pickup", thousands(o.fanIn)), millis(d), "—", "")
		say("burn-down of %d three-step jobs, and of %d plain ones beside it", o.jobs, o.jobs)
		st, err := agqBurnDownSteps(ctx, cl, s, ws, o.jobs)
		if err != nil {
			return r, fmt.Errorf("agq three-step burn-down: %w", err)
		}
		p, err := agqBurnDown(ctx, cl, s, ws, o.jobs, false, false)
		if err != nil {
			return r, fmt.Errorf("agq burn-down: %w", err)
		}
		say("jobs/s: three-step %.0f, plain %.0f", st.rate(), p.rate())
		r.add(fmt.Sprintf("burn-down of three-step jobs, %d jobs (STEP.BEGIN/COMPLETE ×3 with DELIVERY, JOB.UPDATE completed)", o.jobs),
			perSecond(st.rate()), "—", "")
		r.add("burn-down of three-step jobs: plain burn-down beside it", perSecond(p.rate()), "—", "")
		r.add("burn-down of three-step jobs: CPU per job, agq / PostgreSQL (plain)",
			micros(st.cost.agqCPU)+" / "+micros(st.cost.pgCPU)+" ("+micros(p.cost.agqCPU)+" / "+micros(p.cost.pgCPU)+")", "", "")
		r.add("burn-down of three-step jobs: write transactions / WAL bytes per job (plain)",
			fmt.Sprintf("%.2f / %.0f (%.2f / %.0f)", st.cost.commits, st.cost.walBytes, p.cost.commits, p.cost.walBytes), "", "")
	}
	if want("continuous") {
		say("continuous: %d producers of single jobs while working, %v", o.producers, o.continuous)
		a, err := agqContinuous(ctx, s, ws, o.producers, o.continuous)
		if err != nil {
			return r, fmt.Errorf("agq continuous: %w", err)
		}
		b, err := riverContinuous(ctx, rv, o.producers, o.continuous)
		if err != nil {
			return r, fmt.Errorf("river continuous: %w", err)
		}
		r.rates("continuous: submitted", float64(a.submitted)/a.d.Seconds(), float64(b.submitted)/b.d.Seconds())
		r.rates("continuous: completed", float64(a.completed)/a.d.Seconds(), float64(b.completed)/b.d.Seconds())
		r.add("continuous: backlog at the end", fmt.Sprint(a.submitted-a.completed), fmt.Sprint(b.submitted-b.completed), "")
	}
	if want("submit") {
		for _, p := range []int{1, o.producers} {
			say("submit: single jobs from %d producers", p)
			a, err := agqSubmit(ctx, s, o.submitJobs, p, 1)
			if err != nil {
				return r, fmt.Errorf("agq submit: %w", err)
			}
			b, err := riverSubmit(ctx, rv, o.submitJobs, p, 1)
			if err != nil {
				return r, fmt.Errorf("river submit: %w", err)
			}
			r.rates(fmt.Sprintf("submit: single jobs, %d producers", p), a, b)
		}
		say("submit: redis-cli --pipe of %d LPUSHes", o.pipeJobs)
		a, err := agqPipeLoad(ctx, s, o.pipeJobs)
		if err != nil {
			return r, fmt.Errorf("agq redis-cli --pipe: %w", err)
		}
		r.add("submit: redis-cli --pipe", perSecond(a), "—", "")
		say("submit: one connection, pipeline of 100")
		if a, err = agqPipelined(ctx, s, o.submitJobs, 100); err != nil {
			return r, fmt.Errorf("agq pipelined submit: %w", err)
		}
		r.add("submit: one connection, pipeline of 100", perSecond(a), "—", "")
	}
	if want("submit") || want("batches") {
		var as, bs []float64
		for i := range max(o.repeat, 1) {
			say("submit: batches of 1,000 (run %d of %d)", i+1, max(o.repeat, 1))
			a, err := agqSubmit(ctx, s, o.submitJobs, 1, 1000)
			if err != nil {
				return r, fmt.Errorf("agq batch submit: %w", err)
			}
			b, err := riverSubmit(ctx, rv, o.submitJobs, 1, 1000)
			if err != nil {
				return r, fmt.Errorf("river batch submit: %w", err)
			}
			say("jobs/s: agq %.0f, River %.0f", a, b)
			as, bs = append(as, a), append(bs, b)
		}
		slices.Sort(as)
		slices.Sort(bs)
		r.rates("submit: batches of 1,000 (JOB.SUBMIT array / InsertMany)", as[len(as)/2], bs[len(bs)/2])
	}
	if want("latency") {
		say("pickup latency over %d jobs, one idle worker", o.latency)
		a, err := agqPickup(ctx, s, ws[0], o.latency)
		if err != nil {
			return r, fmt.Errorf("agq pickup: %w", err)
		}
		b, err := riverPickup(ctx, rv, o.latency)
		if err != nil {
			return r, fmt.Errorf("river pickup: %w", err)
		}
		r.latencies("pickup latency, idle worker", a, b)
	}
	if want("idle") && o.idle > 0 {
		closeWorkers(ws)
		ws = nil
		say("%d idle blocked connections", o.idle)
		res, err := agqIdle(ctx, cl, s, o.idle, max(o.latency/3, 10), o.settle)
		if err != nil {
			return r, fmt.Errorf("agq idle: %w", err)
		}
		r.add(fmt.Sprintf("%d idle blocked BRPOPs: agq RSS", res.conns), fmt.Sprintf("%.0f MB", float64(res.rss)/(1<<20)), "", "")
		r.add(fmt.Sprintf("%d idle blocked BRPOPs: database connections", res.conns), fmt.Sprint(res.dbConns), "", "")
		r.latencies(fmt.Sprintf("%d idle blocked BRPOPs: pickup", res.conns), res.latencies, nil)
	}
	if want("dashboard") && o.dashboardJobs > 0 {
		say("dashboard pages over %d jobs", o.dashboardJobs)
		pages, err := dashboardPages(ctx, cl, bin, o.dashboardJobs, max(o.dashboardSamples, 1), say)
		if err != nil {
			return r, fmt.Errorf("dashboard: %w", err)
		}
		for _, p := range pages {
			r.add(fmt.Sprintf("dashboard over %d jobs: %s (first / best)", o.dashboardJobs, p.page),
				millis(p.first)+" / "+millis(p.best), "", "")
		}
	}
	return r, nil
}

// raiseFileLimit lets the process open as many connections as it may.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
