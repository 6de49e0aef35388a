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
//
//	go run ./cmd/agqchaos -duration 2m
//	go run ./cmd/agqchaos -faults failover,pg-restart-immediate
//	go run ./cmd/agqchaos -tls -rate 400
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
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		worker(os.Args[2:])
		return
	}
	var cfg chaos.Config
	var faults, agqBin, dir string
	var asJSON, keep bool
	flag.IntVar(&cfg.Nodes, "nodes", 2, "agq nodes")
	flag.IntVar(&cfg.Workers, "workers", 6, "worker processes")
	flag.IntVar(&cfg.Producers, "producers", 4, "concurrent producers")
	flag.IntVar(&cfg.Rate, "rate", 200, "submissions per second")
	flag.DurationVar(&cfg.Duration, "duration", time.Minute, "how long faults are injected (each kind at least once)")
	flag.DurationVar(&cfg.StuckAfter, "stuck-after", time.Minute, "afterwards, wait for the acknowledged jobs while any of them moves; call\nthose left stuck when none has moved for this long")
	flag.StringVar(&faults, "faults", strings.Join(chaos.AllFaults, ","), "faults to cycle through")
	flag.BoolVar(&cfg.Fsync, "fsync", true, "keep PostgreSQL's fsync on")
	flag.BoolVar(&cfg.NoStandby, "no-standby", false, "one PostgreSQL without a standby (no failover fault)")
	flag.BoolVar(&cfg.TLS, "tls", false, "agq nodes listen only over TLS and require client certificates; every client uses TLS")
	flag.StringVar(&agqBin, "agq", "", "agq binary (default: built from this checkout)")
	flag.StringVar(&dir, "dir", "", "directory for the clusters and logs (default: a temporary one, removed unless -keep)")
	flag.BoolVar(&keep, "keep", false, "keep the directory")
	flag.BoolVar(&asJSON, "json", false, "print the report as JSON")
	flag.Parse()
	cfg.Faults = strings.Split(faults, ",")
	cfg.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dir == "" {
		d, err := os.MkdirTemp("", "agqchaos")
		check(err)
		dir = d
		if !keep {
			defer os.RemoveAll(dir)
		}
	}
	check(os.MkdirAll(dir, 0o711))
	check(os.Chmod(dir, 0o711)) // PostgreSQL may run as another user
	cfg.Dir = dir
	if agqBin == "" {
		agqBin = filepath.Join(dir, "agq")
		out, err := exec.Command("go", "build", "-o", agqBin, "github.com/agq/agq/cmd/agq").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "agqchaos: building agq: %v\n%s", err, out)
			os.Exit(2)
		}
	}
	cfg.AgqBin = agqBin
	self, err := os.Executable()
	check(err)
	cfg.WorkerCommand = []string{self, "worker"}

	rep, err := chaos.Run(ctx, cfg)
	if rep != nil {
		if asJSON {
			json.NewEncoder(os.Stdout).Encode(rep)
		} else {
			rep.Print(os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "agqchaos: %v (logs in %s)\n", err, dir)
		os.Exit(2)
	}
	if !rep.OK() {
		fmt.Fprintf(os.Stderr, "agqchaos: logs in %s\n", dir)
		os.Exit(1)
	}
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
	fs.StringVar(&cfg.TLSCACertFile, "tls-ca-cert-file", "", "connect over TLS, checking agq's certificate against this CA (PEM)")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "client certificate (PEM)")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "its private key (PEM)")
	fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	chaos.RunWorker(ctx, cfg, os.Stdout)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "agqchaos:", err)
		os.Exit(2)
	}
}
