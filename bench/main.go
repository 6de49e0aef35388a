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
	fairFlood                            int
	historyJobs                          int
	pgbouncer                            bool
	cpuProfile                           string
	pgSettings                           string
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
	flag.StringVar(&o.only, "only", "", "comma list among burn,workers (client and agw),python,continuous,submit,batches,latency,idle,dashboard,workflows,wake,fair,namespaces,history (default all but history; submit includes batches)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write the benchmark process's CPU profile of the workers rows to this file")
	flag.BoolVar(&o.statements, "statements", false, "print PostgreSQL's statements of the first burn-downs and of the three-step one (pg_stat_statements)")
	flag.IntVar(&o.fanIn, "fan-in", 10000, "parents of the fan-in's child")
	flag.IntVar(&o.fairFlood, "fair-flood", 100000, "jobs queued under one fair key while a quiet key's pickup is timed")
	flag.IntVar(&o.historyJobs, "history-jobs", 10000000, "finished jobs the history scenario retains (it runs only when -only names it)")
	flag.BoolVar(&o.pgbouncer, "pgbouncer", false, "agq's pool through PgBouncer in transaction mode (LISTEN and the leader's lock straight to PostgreSQL)")
	flag.StringVar(&o.pgSettings, "pg", "", "comma list of PostgreSQL settings for the benchmark's cluster, as key=value (e.g. shared_buffers=1GB)")
	flag.IntVar(&o.repeat, "repeat", 1, "burn-downs run this many times, agq's and River's in turn; the table has the median of each")
	flag.Parse()
	if *small {
		o = options{jobs: 2000, workers: 16, batch: 50, submitJobs: 2000, pipeJobs: 2000, producers: 8, continuous: 2 * time.Second,
			latency: 30, idle: 200, settle: 0, only: o.only, statements: o.statements, dashboardJobs: 20000, repeat: o.repeat, fanIn: 1000, fairFlood: 5000, historyJobs: 200000, pgbouncer: o.pgbouncer, cpuProfile: o.cpuProfile}
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

// run starts PostgreSQL, agq and River, runs the selected scenarios and
// returns their report.
func run(ctx context.Context, o options, progress io.Writer) (*report, error) {
	raiseFileLimit()
	say := func(format string, args ...any) { fmt.Fprintf(progress, "bench: "+format+"\n", args...) }

	cl, err := startCluster(ctx, o.statements, o.pgSettings)
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
	e := &scenarioEnv{o: o, cl: cl, s: s, rv: rv, ws: ws, bin: bin, tmp: tmp, say: say, progress: progress}
	return r, e.runScenarios(ctx, r)
}

// raiseFileLimit lets the process open as many connections as it may.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
