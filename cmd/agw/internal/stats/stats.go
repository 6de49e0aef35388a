// Package stats samples what agw reports in each heartbeat.
//
// The machine-wide figures describe the host, not agw: cpu_usage_percent is
// the share of all CPUs busy since the previous sample (from /proc/stat),
// memory_mb is the memory in use on the host (MemTotal − MemAvailable from
// /proc/meminfo, in MiB), and disk_available_gb is the space available to
// an unprivileged user on the file system of agw's job directory (statfs,
// in GiB, rounded down). That is what an operator deciding whether a worker
// host is overloaded needs; agw's own footprint is small and constant, and
// the tools it runs are what loads the host. Where /proc or statfs is
// missing (not Linux), those figures are 0.
package stats

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"
)

// Counters are the job counts the worker keeps.
type Counters struct {
	Active    int64
	Completed int64 // jobs reported completed
	Failed    int64 // jobs reported failed, including those stopped by a shutdown
}

// Stats is the stats JSON of WORKER.HEARTBEAT.
type Stats struct {
	ActiveJobs         int64   `json:"active_jobs"`
	CompletedJobsTotal int64   `json:"completed_jobs_total"`
	FailedJobsTotal    int64   `json:"failed_jobs_total"`
	UptimeSeconds      int64   `json:"uptime_seconds"`
	CPUUsagePercent    float64 `json:"cpu_usage_percent"`
	MemoryMB           int64   `json:"memory_mb"`
	DiskAvailableGB    int64   `json:"disk_available_gb"`
}

// Sampler takes samples; the CPU figure of each covers the time since the
// previous one (or since NewSampler, for the first).
type Sampler struct {
	dir      string
	started  time.Time
	readFile func(string) ([]byte, error)
	diskFree func(string) (uint64, error)

	mu      sync.Mutex
	prevCPU cpuTimes
}

// NewSampler starts sampling; dir is the directory whose file system's free
// space is reported.
func NewSampler(dir string) *Sampler {
	s := &Sampler{dir: dir, started: time.Now(), readFile: os.ReadFile, diskFree: diskAvailable}
	s.prevCPU, _ = s.cpu()
	return s
}

// Sample returns the current figures with the given counters.
func (s *Sampler) Sample(c Counters) Stats {
	st := Stats{
		ActiveJobs:         c.Active,
		CompletedJobsTotal: c.Completed,
		FailedJobsTotal:    c.Failed,
		UptimeSeconds:      int64(time.Since(s.started) / time.Second),
	}
	if now, err := s.cpu(); err == nil {
		s.mu.Lock()
		st.CPUUsagePercent = now.percentSince(s.prevCPU)
		s.prevCPU = now
		s.mu.Unlock()
	}
	if raw, err := s.readFile("/proc/meminfo"); err == nil {
		if used, err := memoryUsedKiB(raw); err == nil {
			st.MemoryMB = int64(used / 1024)
		}
	}
	if free, err := s.diskFree(s.dir); err == nil {
		st.DiskAvailableGB = int64(free >> 30)
	}
	return st
}

// cpuTimes are the machine-wide busy and total jiffies since boot.
type cpuTimes struct{ busy, total uint64 }

func (s *Sampler) cpu() (cpuTimes, error) {
	raw, err := s.readFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseCPU(raw)
}

// parseCPU reads the aggregate "cpu" line of /proc/stat: user nice system
// idle iowait irq softirq steal (guest time is already in user). Idle and
// iowait are idle; the rest is busy.
func parseCPU(procStat []byte) (cpuTimes, error) {
	line, _, _ := bytes.Cut(procStat, []byte("\n"))
	fields := bytes.Fields(line)
	if len(fields) < 5 || string(fields[0]) != "cpu" {
		return cpuTimes{}, fmt.Errorf("no cpu line in /proc/stat")
	}
	var t cpuTimes
	for i, f := range fields[1:min(len(fields), 9)] {
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.total += v
		if i != 3 && i != 4 { // idle, iowait
			t.busy += v
		}
	}
	return t, nil
}

// percentSince is the busy share between prev and t, to one decimal.
func (t cpuTimes) percentSince(prev cpuTimes) float64 {
	if t.total <= prev.total || t.busy < prev.busy {
		return 0
	}
	p := 100 * float64(t.busy-prev.busy) / float64(t.total-prev.total)
	return math.Round(p*10) / 10
}

// memoryUsedKiB is MemTotal − MemAvailable from /proc/meminfo.
func memoryUsedKiB(meminfo []byte) (uint64, error) {
	var total, avail uint64
	var haveTotal, haveAvail bool
	for _, line := range bytes.Split(meminfo, []byte("\n")) {
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		fields := bytes.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseUint(string(fields[0]), 10, 64)
		if err != nil {
			continue
		}
		switch string(name) {
		case "MemTotal":
			total, haveTotal = v, true
		case "MemAvailable":
			avail, haveAvail = v, true
		}
	}
	if !haveTotal || !haveAvail || avail > total {
		return 0, fmt.Errorf("/proc/meminfo has no MemTotal and MemAvailable")
	}
	return total - avail, nil
}
