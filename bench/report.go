package main

import (
	"fmt"
	"io"
	"time"
)

// report collects rows and prints them as one markdown table.
type report struct {
	rows [][4]string
}

func (r *report) add(what, agq, river, ratio string) {
	r.rows = append(r.rows, [4]string{what, agq, river, ratio})
}

// rates adds a throughput row with its agq/River ratio.
func (r *report) rates(what string, agq, river float64) {
	ratio := "—"
	if river > 0 {
		ratio = fmt.Sprintf("%.2f", agq/river)
	}
	r.add(what, perSecond(agq), perSecond(river), ratio)
}

// costs adds the per-job rows of two burn-downs.
func (r *report) costs(what string, agq, river measure) {
	r.add(what+": write transactions per job", fmt.Sprintf("%.2f", agq.cost.commits), fmt.Sprintf("%.2f", river.cost.commits), "")
	r.add(what+": WAL bytes per job", fmt.Sprintf("%.0f", agq.cost.walBytes), fmt.Sprintf("%.0f", river.cost.walBytes), "")
	r.add(what+": CPU per job, agq / River process", micros(agq.cost.agqCPU), micros(river.cost.self), "")
	r.add(what+": CPU per job, PostgreSQL", micros(agq.cost.pgCPU), micros(river.cost.pgCPU), "")
	r.add(what+": CPU per job, benchmark clients", micros(agq.cost.self), "—", "")
	r.add(what+": PostgreSQL waits (share of samples)", agq.waits, river.waits, "")
}

func (r *report) latencies(what string, agq, river []time.Duration) {
	a, b := sortDurations(agq), sortDurations(river)
	for _, p := range []struct {
		name string
		pct  float64
	}{{"p50", 50}, {"p90", 90}, {"p99", 99}, {"max", 100}} {
		rb := "—"
		if len(b) > 0 {
			rb = millis(percentile(b, p.pct))
		}
		r.add(what+" "+p.name, millis(percentile(a, p.pct)), rb, "")
	}
}

func (r *report) print(w io.Writer) {
	fmt.Fprintln(w, "| work | agq | River | agq / River |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, row := range r.rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", row[0], row[1], row[2], row[3])
	}
}

func perSecond(v float64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f jobs/s", v)
}

func micros(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func percent(n, total int) string {
	if total == 0 {
		return "0%"
	}
	return fmt.Sprintf("%d%%", (100*n+total/2)/total)
}
