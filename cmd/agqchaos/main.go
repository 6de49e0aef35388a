// Command agqchaos shows, with figures, what agq promises across faults. It
// starts a PostgreSQL primary with a synchronous streaming standby, agq
// nodes on both (a multi-host URL), worker processes and producers, and
// while jobs flow it kills agq nodes and workers with SIGKILL, stops
// workers past their heartbeats, restarts PostgreSQL (fast and immediate)
// and kills the primary to promote the standby. At the end it prints the
// jobs acknowledged, lost, stuck, run more than once, the final reports
// accepted from workers that had lost their job, the recovery time after
// each fault and the errors clients saw; it exits 1 unless nothing
// acknowledged was lost or stuck. It says what the workers can take: above
// that rate the queue grows, and is waited for afterwards while it moves.
// With -patroni, PostgreSQL is a primary and a synchronous standby managed
// by Patroni (with etcd), and the faults are Patroni's: a switchover, and
// the primary's postmaster killed so that Patroni fails over.
//
//	go run ./cmd/agqchaos -duration 2m
//	go run ./cmd/agqchaos -faults failover,pg-restart-immediate
//	go run ./cmd/agqchaos -tls -rate 400
//	go run ./cmd/agqchaos -patroni -faults switchover,primary-kill,agq-kill
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agq/agq/internal/chaos"
	"github.com/agq/agq/internal/patroni"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		worker(os.Args[2:])
		return
	}
	os.Exit(run())
}

// options are the command line's.
type options struct {
	cfg                      chaos.Config
	agqBin, dir              string
	asJSON, keep, usePatroni bool
}

// run is the chaos command; it returns the exit status once everything it
// started is stopped.
func run() int {
	o := parseFlags()
	cfg := o.cfg
	dir := o.dir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dir == "" {
		d, err := os.MkdirTemp("", "agqchaos")
		if err != nil {
			return fail(err)
		}
		dir = d
		if !o.keep {
			defer os.RemoveAll(dir)
		}
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fail(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil { // PostgreSQL may run as another user
		return fail(err)
	}
	cfg.Dir = dir
	cfg.AgqBin = o.agqBin
	if cfg.AgqBin == "" {
		cfg.AgqBin = filepath.Join(dir, "agq")
		out, err := exec.Command("go", "build", "-o", cfg.AgqBin, "github.com/agq/agq/cmd/agq").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "agqchaos: building agq: %v\n%s", err, out)
			return 2
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	cfg.WorkerCommand = []string{self, "worker"}
	if o.usePatroni {
		db, err := startPatroni(ctx, dir, cfg.Fsync)
		if db != nil {
			defer db.Close()
		}
		if err != nil {
			return fail(fmt.Errorf("starting Patroni: %w (logs in %s)", err, dir))
		}
		cfg.Database = db
	}
	rep, err := chaos.Run(ctx, cfg)
	return report(rep, err, dir, o.asJSON)
}

// parseFlags reads the command line.
func parseFlags() options {
	var o options
	cfg := &o.cfg
	var faults string
	flag.IntVar(&cfg.Nodes, "nodes", 2, "agq nodes")
	flag.IntVar(&cfg.Workers, "workers", 6, "worker processes")
	flag.IntVar(&cfg.Producers, "producers", 4, "concurrent producers")
	flag.IntVar(&cfg.Rate, "rate", 200, "submissions per second")
	flag.DurationVar(&cfg.Duration, "duration", time.Minute, "how long faults are injected (each kind at least once)")
	flag.DurationVar(&cfg.StuckAfter, "stuck-after", time.Minute, "afterwards, wait for the acknowledged jobs while any of them moves; call\nthose left stuck when none has moved for this long")
	flag.StringVar(&faults, "faults", strings.Join(chaos.AllFaults, ","), "faults to cycle through")
	flag.BoolVar(&cfg.Fsync, "fsync", true, "keep PostgreSQL's fsync on")
	flag.BoolVar(&cfg.NoStandby, "no-standby", false, "one PostgreSQL without a standby (no failover fault)")
	flag.BoolVar(&cfg.Workflows, "workflows", false, "submit graphs of durable-step jobs, each with a child after it, that sleep, wait for a\nsignal the producer sends or for one nobody sends, or spawn children and await them;\ncount steps answered +OK whose work ran again, children started before a parent ended,\nsignals answered +OK their wait never took, and waits that timed out with their signal stored")
	flag.BoolVar(&cfg.TLS, "tls", false, "agq nodes listen only over TLS and require client certificates; every client uses TLS")
	flag.StringVar(&o.agqBin, "agq", "", "agq binary (default: built from this checkout)")
	flag.StringVar(&o.dir, "dir", "", "directory for the clusters and logs (default: a temporary one, removed unless -keep)")
	flag.BoolVar(&o.keep, "keep", false, "keep the directory")
	flag.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	flag.BoolVar(&o.usePatroni, "patroni", false, "PostgreSQL managed by Patroni with etcd; faults default to "+strings.Join(patroni.Faults, ","))
	flag.Parse()
	if o.usePatroni && !flagSet("faults") {
		faults = strings.Join(patroni.Faults, ",")
	}
	cfg.Faults = strings.Split(faults, ",")
	cfg.Progress = os.Stderr
	return o
}

// report prints the run's report and turns its outcome into the exit
// status: 2 when the run failed, 1 when it lost or stuck a job.
func report(rep *chaos.Report, err error, dir string, asJSON bool) int {
	if rep != nil {
		if asJSON {
			json.NewEncoder(os.Stdout).Encode(rep)
		} else {
			rep.Print(os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "agqchaos: %v (logs in %s)\n", err, dir)
		return 2
	}
	if !rep.OK() {
		fmt.Fprintf(os.Stderr, "agqchaos: logs in %s\n", dir)
		return 1
	}
	return 0
}

// startPatroni starts a Patroni cluster of two members in dir/patroni.
func startPatroni(ctx context.Context, dir string, fsync bool) (*patroni.Cluster, error) {
	pdir := filepath.Join(dir, "patroni")
	if err := os.MkdirAll(pdir, 0o711); err != nil {
		return nil, err
	}
	params := map[string]string{}
	if !fsync {
		// full_page_writes stays on: pg_rewind, which brings a failed
		// primary back as a standby, refuses a source without it.
		params["fsync"] = "off"
	}
	return patroni.Start(ctx, patroni.Config{Dir: pdir, Members: 2, Parameters: params})
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// worker runs one worker process of the chaos run.
func worker(args []string) {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	var cfg chaos.WorkerConfig
	fs.StringVar(&cfg.Addr, "addr", "", "agq address")
	fs.StringVar(&cfg.ID, "id", "", "worker id")
	fs.StringVar(&cfg.Key, "key", "", "worker key")
	fs.StringVar(&cfg.Queue, "queue", "chaos", "queue")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", time.Second, "heartbeat interval")
	fs.DurationVar(&cfg.Work, "work", 0, "how long each job runs")
	fs.BoolVar(&cfg.Workflows, "workflows", false, "work the graphs of a workflow run")
	fs.StringVar(&cfg.TLSCACertFile, "tls-ca-cert-file", "", "connect over TLS, checking agq's certificate against this CA (PEM)")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "client certificate (PEM)")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "its private key (PEM)")
	fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	chaos.RunWorker(ctx, cfg, os.Stdout)
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "agqchaos:", err)
	return 2
}
