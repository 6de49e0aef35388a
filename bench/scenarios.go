package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// scenarioEnv is what the scenarios run against: one cluster, one agq, one
// River, and agq's worker connections.
type scenarioEnv struct {
	o        options
	cl       *cluster
	s        *agqServer
	rv       *riverSide
	ws       []*worker // nil once the idle scenario has closed them
	bin, tmp string    // agq's binary and the directory of built binaries
	say      func(string, ...any)
	progress io.Writer
}

// runScenarios adds the rows of each selected group of scenarios to r, in
// a fixed order, stopping at the first error.
func (e *scenarioEnv) runScenarios(ctx context.Context, r *report) error {
	o := e.o
	named := func(s string) bool { return strings.Contains(","+o.only+",", ","+s+",") }
	want := func(s string) bool { return o.only == "" || named(s) }
	groups := []struct {
		selected bool
		rows     func(context.Context, *report) error
	}{
		{want("burn"), e.burnRows},
		{want("workers") || want("client") || want("agw"), func(ctx context.Context, r *report) error {
			rows := workerRowsOf{client: want("workers") || want("client"), agw: want("workers") || want("agw")}
			return workerRows(ctx, o, rows, e.cl, e.s, e.rv, e.tmp, r, e.say)
		}},
		{want("python"), func(ctx context.Context, r *report) error { return pythonRows(ctx, o, e.cl, e.s, r, e.say) }},
		{want("workflows"), e.workflowRows},
		{want("wake"), e.wakeRows},
		{want("fair"), e.fairRows},
		{want("namespaces"), e.namespaceRows},
		{want("continuous"), e.continuousRows},
		{want("submit"), e.submitRows},
		{want("submit") || want("batches"), e.batchRows},
		{want("latency"), e.latencyRows},
		{want("idle") && o.idle > 0, e.idleRows},
		{want("dashboard") && o.dashboardJobs > 0, e.dashboardRows},
		// Millions of rows to load: only when asked for by name.
		{named("history") && o.historyJobs > 0, e.historyRows},
	}
	for _, g := range groups {
		if !g.selected {
			continue
		}
		if err := g.rows(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// burnRound is one run of the burn-downs.
type burnRound struct{ agq, river, running, pipelined, batched measure }

// burnRows times agq's burn-downs, plain and with each way of saving round
// trips, beside River's, o.repeat times; the rows have the medians.
func (e *scenarioEnv) burnRows(ctx context.Context, r *report) error {
	o := e.o
	var as, bs, ars, aps, abs []measure
	for i := range max(o.repeat, 1) {
		m, err := e.burnRound(ctx, i)
		if err != nil {
			return err
		}
		as, bs, ars, aps, abs = append(as, m.agq), append(bs, m.river), append(ars, m.running), append(aps, m.pipelined), append(abs, m.batched)
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
	return nil
}

// burnRound runs the burn-downs once; the first round prints PostgreSQL's
// statements when o.statements asks for them.
func (e *scenarioEnv) burnRound(ctx context.Context, i int) (burnRound, error) {
	o, cl, s, ws, say := e.o, e.cl, e.s, e.ws, e.say
	statements := o.statements && i == 0
	printStatements := func(db string) error {
		if !statements {
			return nil
		}
		return cl.statementsPrint(ctx, db, o.jobs, e.progress)
	}
	var m burnRound
	var err error
	say("burn-down of %d jobs, %d agq worker connections (run %d of %d)", o.jobs, o.workers, i+1, max(o.repeat, 1))
	if m.agq, err = agqBurnDown(ctx, cl, s, ws, o.jobs, false, statements); err != nil {
		return m, fmt.Errorf("agq burn-down: %w", err)
	}
	if err := printStatements("agq"); err != nil {
		return m, err
	}
	if m.river, err = riverBurnDown(ctx, cl, e.rv, o.jobs, statements); err != nil {
		return m, fmt.Errorf("river burn-down: %w", err)
	}
	if err := printStatements("river"); err != nil {
		return m, err
	}
	say("burn-down with JOB.UPDATE running")
	if m.running, err = agqBurnDown(ctx, cl, s, ws, o.jobs, true, false); err != nil {
		return m, fmt.Errorf("agq burn-down: %w", err)
	}
	say("burn-down with each report pipelined with the next RPOP")
	if m.pipelined, err = agqBurnDownPipelined(ctx, cl, s, ws, o.jobs, false); err != nil {
		return m, fmt.Errorf("agq pipelined burn-down: %w", err)
	}
	say("burn-down with BLMPOP COUNT %d and pipelined reports", o.batch)
	if m.batched, err = agqBurnDownBatched(ctx, cl, s, ws, o.jobs, o.batch, statements); err != nil {
		return m, fmt.Errorf("agq batched burn-down: %w", err)
	}
	if err := printStatements("agq"); err != nil {
		return m, err
	}
	say("jobs/s: agq %.0f, with running %.0f, report and next pop pipelined %.0f, batched %.0f; River %.0f",
		m.agq.rate(), m.running.rate(), m.pipelined.rate(), m.batched.rate(), m.river.rate())
	return m, nil
}

// workflowRows times a fan-in's release of its child, and a burn-down of
// three-step jobs beside a plain one.
func (e *scenarioEnv) workflowRows(ctx context.Context, r *report) error {
	o, cl, s, ws, say := e.o, e.cl, e.s, e.ws, e.say
	say("fan-in: %d parents and one child after all of them", o.fanIn)
	d, err := agqFanIn(ctx, s, ws, o.fanIn, o.batch)
	if err != nil {
		return fmt.Errorf("agq fan-in: %w", err)
	}
	r.add(fmt.Sprintf("fan-in of %s: last parent's completion to the child's pickup", thousands(o.fanIn)), millis(d), "—", "")
	chain := o.fanIn / 2
	say("chain of %d jobs: cancelled from its first, then restored", chain)
	cancelled, restored, err := agqChain(ctx, cl, s, chain)
	if err != nil {
		return fmt.Errorf("agq chain: %w", err)
	}
	r.add(fmt.Sprintf("chain of %s, each after the one before: JOB.CANCEL of the first until all are cancelled", thousands(chain)), millis(cancelled), "—", "")
	r.add(fmt.Sprintf("chain of %s: JOB.RETRY of the first until all others are pending again", thousands(chain)), millis(restored), "—", "")
	// Each burn-down starts once the one before it is moved into history
	// and vacuumed, and the plain ones take about as long as the
	// three-step ones (three times the jobs): each leaves the same few
	// seconds of its own moves out of its measure.
	plain := 3 * o.jobs
	say("burn-down of %d three-step jobs, and of %d plain ones beside it", o.jobs, plain)
	settle := func() error { return settleAgq(ctx, cl, time.Minute) }
	if err := settle(); err != nil {
		return err
	}
	if o.statements {
		if err := cl.statementsReset(ctx, "agq"); err != nil {
			return err
		}
	}
	st, err := agqBurnDownSteps(ctx, cl, s, ws, o.jobs, true)
	if err != nil {
		return fmt.Errorf("agq three-step burn-down: %w", err)
	}
	if o.statements {
		if err := cl.statementsPrint(ctx, "agq", o.jobs, e.progress); err != nil {
			return err
		}
	}
	if err := settle(); err != nil {
		return err
	}
	p, err := agqBurnDown(ctx, cl, s, ws, plain, false, false)
	if err != nil {
		return fmt.Errorf("agq burn-down: %w", err)
	}
	if err := settle(); err != nil {
		return err
	}
	sep, err := agqBurnDownSteps(ctx, cl, s, ws, o.jobs, false)
	if err != nil {
		return fmt.Errorf("agq three-step burn-down, a command a call: %w", err)
	}
	if err := settle(); err != nil {
		return err
	}
	pad, err := agqBurnDownPadded(ctx, cl, s, ws, plain)
	if err != nil {
		return fmt.Errorf("agq burn-down with PINGs: %w", err)
	}
	say("burn-down of %d three-step jobs, and of %d plain ones, through one Worker of the client package", o.jobs, plain)
	if err := settle(); err != nil {
		return err
	}
	cst, err := agqBurnDownClientSteps(ctx, cl, s, o.jobs, o.workers, false)
	if err != nil {
		return fmt.Errorf("agq three-step burn-down through the client package: %w", err)
	}
	if err := settle(); err != nil {
		return err
	}
	cp, err := agqBurnDownClientSteps(ctx, cl, s, plain, o.workers, true)
	if err != nil {
		return fmt.Errorf("agq burn-down through the client package: %w", err)
	}
	say("jobs/s: three-step %.0f (a command a call %.0f), plain %.0f, plain with three PINGs %.0f; client package: three-step %.0f, plain %.0f",
		st.rate(), sep.rate(), p.rate(), pad.rate(), cst.rate(), cp.rate())
	r.add(fmt.Sprintf("burn-down of three-step jobs, %d jobs (STEP.BEGIN, STEP.COMPLETE … NEXT ×2, then STEP.COMPLETE and JOB.UPDATE completed pipelined, with DELIVERY)", o.jobs),
		perSecond(st.rate()), "—", fmt.Sprintf("%.2f of plain", st.rate()/p.rate()))
	r.add(fmt.Sprintf("burn-down of three-step jobs: plain burn-down beside it, %d jobs", plain), perSecond(p.rate()), "—", "")
	r.add("burn-down of three-step jobs, each step's STEP.BEGIN and STEP.COMPLETE sent alone", perSecond(sep.rate()), "—",
		fmt.Sprintf("%.2f of plain", sep.rate()/p.rate()))
	r.add("burn-down of three-step jobs: plain jobs with its round trips, three PINGs between pop and report (no step stored)",
		perSecond(pad.rate()), "—", fmt.Sprintf("%.2f of plain", pad.rate()/p.rate()))
	r.add("burn-down of three-step jobs: CPU per job, agq / PostgreSQL / the benchmark's clients (plain)",
		micros(st.cost.agqCPU)+" / "+micros(st.cost.pgCPU)+" / "+micros(st.cost.self)+
			" ("+micros(p.cost.agqCPU)+" / "+micros(p.cost.pgCPU)+" / "+micros(p.cost.self)+")", "", "")
	r.add("burn-down of three-step jobs: write transactions / WAL bytes per job (plain)",
		fmt.Sprintf("%.2f / %.0f (%.2f / %.0f)", st.cost.commits, st.cost.walBytes, p.cost.commits, p.cost.walBytes), "", "")
	r.add("burn-down of plain jobs with three PINGs: CPU per job, agq / PostgreSQL / the benchmark's clients",
		micros(pad.cost.agqCPU)+" / "+micros(pad.cost.pgCPU)+" / "+micros(pad.cost.self), "", "")
	r.add(fmt.Sprintf("burn-down of three-step jobs through one Worker of the client package, %d slots (client.Step ×3)", o.workers),
		perSecond(cst.rate()), "—", fmt.Sprintf("%.2f of plain", cst.rate()/cp.rate()))
	r.add(fmt.Sprintf("burn-down of three-step jobs: plain jobs through the same Worker beside it, %d jobs", plain), perSecond(cp.rate()), "—", "")
	r.add("burn-down of three-step jobs through the client package: CPU per job, agq / PostgreSQL / the Worker (plain)",
		micros(cst.cost.agqCPU)+" / "+micros(cst.cost.pgCPU)+" / "+micros(cst.cost.self)+
			" ("+micros(cp.cost.agqCPU)+" / "+micros(cp.cost.pgCPU)+" / "+micros(cp.cost.self)+")", "", "")
	return nil
}

// continuousRows submits and works at once for o.continuous, on agq and
// then on River.
func (e *scenarioEnv) continuousRows(ctx context.Context, r *report) error {
	o := e.o
	e.say("continuous: %d producers of single jobs while working, %v", o.producers, o.continuous)
	a, err := agqContinuous(ctx, e.s, e.ws, o.producers, o.continuous)
	if err != nil {
		return fmt.Errorf("agq continuous: %w", err)
	}
	b, err := riverContinuous(ctx, e.rv, o.producers, o.continuous)
	if err != nil {
		return fmt.Errorf("river continuous: %w", err)
	}
	r.rates("continuous: submitted", float64(a.submitted)/a.d.Seconds(), float64(b.submitted)/b.d.Seconds())
	r.rates("continuous: completed", float64(a.completed)/a.d.Seconds(), float64(b.completed)/b.d.Seconds())
	r.add("continuous: backlog at the end", fmt.Sprint(a.submitted-a.completed), fmt.Sprint(b.submitted-b.completed), "")
	return nil
}

// submitRows times single submissions from one and from many producers,
// redis-cli --pipe, and one pipelined connection.
func (e *scenarioEnv) submitRows(ctx context.Context, r *report) error {
	o, s, say := e.o, e.s, e.say
	for _, p := range []int{1, o.producers} {
		say("submit: single jobs from %d producers", p)
		a, err := agqSubmit(ctx, s, o.submitJobs, p, 1)
		if err != nil {
			return fmt.Errorf("agq submit: %w", err)
		}
		b, err := riverSubmit(ctx, e.rv, o.submitJobs, p, 1)
		if err != nil {
			return fmt.Errorf("river submit: %w", err)
		}
		r.rates(fmt.Sprintf("submit: single jobs, %d producers", p), a, b)
	}
	say("submit: redis-cli --pipe of %d LPUSHes", o.pipeJobs)
	a, err := agqPipeLoad(ctx, s, o.pipeJobs)
	if err != nil {
		return fmt.Errorf("agq redis-cli --pipe: %w", err)
	}
	r.add("submit: redis-cli --pipe", perSecond(a), "—", "")
	say("submit: one connection, pipeline of 100")
	if a, err = agqPipelined(ctx, s, o.submitJobs, 100); err != nil {
		return fmt.Errorf("agq pipelined submit: %w", err)
	}
	r.add("submit: one connection, pipeline of 100", perSecond(a), "—", "")
	return nil
}

// batchRows times submissions in batches of 1,000, o.repeat times; the row
// has the medians.
func (e *scenarioEnv) batchRows(ctx context.Context, r *report) error {
	o := e.o
	var as, bs []float64
	for i := range max(o.repeat, 1) {
		e.say("submit: batches of 1,000 (run %d of %d)", i+1, max(o.repeat, 1))
		a, err := agqSubmit(ctx, e.s, o.submitJobs, 1, 1000)
		if err != nil {
			return fmt.Errorf("agq batch submit: %w", err)
		}
		b, err := riverSubmit(ctx, e.rv, o.submitJobs, 1, 1000)
		if err != nil {
			return fmt.Errorf("river batch submit: %w", err)
		}
		e.say("jobs/s: agq %.0f, River %.0f", a, b)
		as, bs = append(as, a), append(bs, b)
	}
	slices.Sort(as)
	slices.Sort(bs)
	r.rates("submit: batches of 1,000 (JOB.SUBMIT array / InsertMany)", as[len(as)/2], bs[len(bs)/2])
	return nil
}

// latencyRows times from submission to pickup by one idle worker.
func (e *scenarioEnv) latencyRows(ctx context.Context, r *report) error {
	e.say("pickup latency over %d jobs, one idle worker", e.o.latency)
	a, err := agqPickup(ctx, e.s, e.ws[0], e.o.latency)
	if err != nil {
		return fmt.Errorf("agq pickup: %w", err)
	}
	b, err := riverPickup(ctx, e.rv, e.o.latency)
	if err != nil {
		return fmt.Errorf("river pickup: %w", err)
	}
	r.latencies("pickup latency, idle worker", a, b)
	return nil
}

// idleRows measures agq holding o.idle blocked connections. It closes the
// worker connections first, so that only the idle ones are counted.
func (e *scenarioEnv) idleRows(ctx context.Context, r *report) error {
	o := e.o
	closeWorkers(e.ws)
	e.ws = nil
	e.say("%d idle blocked connections", o.idle)
	res, err := agqIdle(ctx, e.cl, e.s, o.idle, max(o.latency/3, 10), o.settle)
	if err != nil {
		return fmt.Errorf("agq idle: %w", err)
	}
	r.add(fmt.Sprintf("%d idle blocked BRPOPs: agq RSS", res.conns), fmt.Sprintf("%.0f MB", float64(res.rss)/(1<<20)), "", "")
	r.add(fmt.Sprintf("%d idle blocked BRPOPs: database connections", res.conns), fmt.Sprint(res.dbConns), "", "")
	r.latencies(fmt.Sprintf("%d idle blocked BRPOPs: pickup", res.conns), res.latencies, nil)
	return nil
}

// dashboardRows times the dashboard's pages over o.dashboardJobs jobs.
func (e *scenarioEnv) dashboardRows(ctx context.Context, r *report) error {
	o := e.o
	e.say("dashboard pages over %d jobs", o.dashboardJobs)
	pages, err := dashboardPages(ctx, e.cl, e.bin, o.dashboardJobs, max(o.dashboardSamples, 1), e.say)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	for _, p := range pages {
		r.add(fmt.Sprintf("dashboard over %d jobs: %s (first / best)", o.dashboardJobs, p.page),
			millis(p.first)+" / "+millis(p.best), "", "")
	}
	return nil
}
