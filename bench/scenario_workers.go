package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
)

// workerRowsOf selects the worker rows.
type workerRowsOf struct{ client, agw bool }

// workerRows measures the workers a user runs — one process of the client
// package, and agw — each beside River's burn-down in the same run.
func workerRows(ctx context.Context, o options, rows workerRowsOf, cl *cluster, s *agqServer, rv *riverSide, binDir string, r *report, say func(string, ...any)) error {
	var agw string
	if rows.agw {
		var err error
		if agw, err = buildCommand(ctx, binDir, "agw"); err != nil {
			return err
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var cs, gs, bs []measure
	for i := range max(o.repeat, 1) {
		var c, g measure
		if rows.client {
			say("burn-down of %d jobs by one client package worker of %d slots (run %d of %d)", o.jobs, clientSlots, i+1, max(o.repeat, 1))
			var err error
			if c, err = agqBurnDownClient(ctx, cl, s, o.jobs, i); err != nil {
				return fmt.Errorf("agq client package burn-down: %w", err)
			}
		}
		b, err := riverBurnDown(ctx, cl, rv, o.jobs, false)
		if err != nil {
			return fmt.Errorf("river burn-down: %w", err)
		}
		if rows.agw {
			say("burn-down of %d jobs by agw, concurrency %d, running true", o.jobs, agwConcurrency)
			var err error
			if g, err = agqBurnDownAgw(ctx, cl, s, agw, o.jobs, i); err != nil {
				return fmt.Errorf("agw burn-down: %w", err)
			}
		}
		say("jobs/s: client package %.0f (%.2f× River), agw %.0f (%.2f× River); River %.0f", c.rate(), c.rate()/b.rate(), g.rate(), g.rate()/b.rate(), b.rate())
		cs, gs, bs = append(cs, c), append(gs, g), append(bs, b)
	}
	c, g, b := median(cs), median(gs), median(bs)
	if rows.client {
		r.rates(fmt.Sprintf("burn-down, client package worker (one process, %d slots, no-op handler), %d jobs", clientSlots, o.jobs), c.rate(), b.rate())
		r.add("burn-down client package: write transactions / WAL bytes per job", fmt.Sprintf("%.2f / %.0f", c.cost.commits, c.cost.walBytes), "", "")
		r.add("burn-down client package: CPU per job, agq / PostgreSQL / client process", micros(c.cost.agqCPU)+" / "+micros(c.cost.pgCPU)+" / "+micros(c.cost.self), "", "")
		r.add("burn-down client package: PostgreSQL waits (share of samples)", c.waits, b.waits, "")
	}
	if rows.agw {
		r.rates(fmt.Sprintf("burn-down, agw (concurrency %d, each job runs true), %d jobs", agwConcurrency, o.jobs), g.rate(), b.rate())
	}
	return nil
}
