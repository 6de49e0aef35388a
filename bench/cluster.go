package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/pgcluster"
)

// cluster is the one PostgreSQL both systems run on, with its defaults:
// fsync and synchronous_commit on, as users run it.
type cluster struct {
	pg    *pgcluster.Cluster
	dir   string
	admin *pgxpool.Pool
	// updates are each database's counts of row updates
	// (tableUpdates) when its statements' counts were last reset.
	updates map[string]map[string][2]int64
}

func startCluster(ctx context.Context, statements bool, extra string) (*cluster, error) {
	dir, err := os.MkdirTemp("", "agqb")
	if err != nil {
		return nil, err
	}
	// As root, postgres runs as its own user and must be able to enter it.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	settings := map[string]string{"max_connections": "300"}
	if statements {
		settings["shared_preload_libraries"] = "pg_stat_statements"
		settings["pg_stat_statements.track_utility"] = "off"
		settings["pg_stat_statements.track_planning"] = "on"
	}
	for _, kv := range strings.Split(extra, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			settings[k] = v
		} else if kv != "" {
			return nil, fmt.Errorf("-pg: %q is not key=value", kv)
		}
	}
	pg, err := pgcluster.Open(pgcluster.Config{DataDir: dir, Logger: zerolog.New(io.Discard), Settings: settings})
	if err != nil {
		return nil, err
	}
	if err := pg.Start(ctx); err != nil {
		return nil, err
	}
	admin, err := pgxpool.New(ctx, pg.ConnString("postgres"))
	if err != nil {
		return nil, err
	}
	c := &cluster{pg: pg, dir: dir, admin: admin}
	for _, db := range []string{"agq", "river"} {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

func (c *cluster) url(db string) string { return c.pg.ConnString(db) }

func (c *cluster) close() {
	c.admin.Close()
	c.pg.Close()
	os.RemoveAll(c.dir)
}

// counters is what PostgreSQL and the processes have done so far.
type counters struct {
	at      time.Time
	commits int64 // transaction ids taken so far: write transactions
	wal     string
	pgCPU   time.Duration
	agqCPU  time.Duration
	selfCPU time.Duration
}

func (c *cluster) sample(ctx context.Context, db string, agqPID int) (counters, error) {
	s := counters{at: time.Now()}
	// Write transactions are counted by the transaction ids they took:
	// pg_stat_database's counters reach it up to seconds late.
	err := c.admin.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_lsn()::text`).
		Scan(&s.commits, &s.wal)
	s.pgCPU = postgresCPU()
	if agqPID > 0 {
		s.agqCPU = processCPU(agqPID)
	}
	s.selfCPU = processCPU(os.Getpid())
	return s, err
}

// perJob is the cost of one job between two samples.
type perJob struct {
	commits, walBytes   float64
	pgCPU, agqCPU, self time.Duration
}

func (c *cluster) perJob(ctx context.Context, a, b counters, jobs int) perJob {
	var wal float64
	c.admin.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)`, b.wal, a.wal).Scan(&wal)
	n := float64(max(jobs, 1))
	return perJob{
		commits:  float64(b.commits-a.commits) / n,
		walBytes: wal / n,
		pgCPU:    (b.pgCPU - a.pgCPU) / time.Duration(max(jobs, 1)),
		agqCPU:   (b.agqCPU - a.agqCPU) / time.Duration(max(jobs, 1)),
		self:     (b.selfCPU - a.selfCPU) / time.Duration(max(jobs, 1)),
	}
}

// waitEvents samples what the database's sessions wait on until ctx ends.
func (c *cluster) waitEvents(ctx context.Context, db string) map[string]int {
	counts, _ := c.sampleRows(ctx, 20*time.Millisecond, `
		SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
		WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid()`, db)
	return counts
}

// sampleRows runs query every period until ctx ends, counting the text
// rows it answers; samples is how often it ran.
func (c *cluster) sampleRows(ctx context.Context, period time.Duration, query string, args ...any) (counts map[string]int, samples int) {
	counts = map[string]int{}
	for ctx.Err() == nil {
		samples++
		rows, err := c.admin.Query(context.Background(), query, args...)
		if err == nil {
			for rows.Next() {
				var w string
				if rows.Scan(&w) == nil {
					counts[w]++
				}
			}
			rows.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(period):
		}
	}
	return counts, samples
}

// connections counts the database's sessions from an application.
func (c *cluster) connections(ctx context.Context, db, app string) int {
	var n int
	c.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`, db, app).Scan(&n)
	return n
}

var clockTick = 100 // USER_HZ on Linux

// processCPU is the user and system CPU a process has used.
func processCPU(pid int) time.Duration {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / time.Duration(clockTick)
}

// postgresCPU sums the CPU of every postgres process of the machine (the
// benchmark's cluster is the only one it expects), and of those that
// exited: the postmaster reaps them, so their time is its children's.
func postgresCPU() time.Duration {
	var total time.Duration
	for _, d := range postgresCPUByKind() {
		total += d
	}
	return total
}

// statFields are the fields of /proc/<pid>/stat after the command name:
// state, ppid, … (f[11], f[12] are utime and stime; f[13], f[14] the
// reaped children's).
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
}

// rss is a process's resident memory in bytes.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// postgresCPUByKind is postgresCPU split by what each process is, from its
// title: a backend's database, or the auxiliary process ("autovacuum",
// "walwriter", "checkpointer", …); "exited" is the time of processes the
// postmaster reaped (autovacuum workers among them).
func postgresCPUByKind() map[string]time.Duration {
	by := map[string]time.Duration{}
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range procs {
		comm, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		kind := "postmaster"
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
			if title, ok := strings.CutPrefix(strings.ReplaceAll(string(cmd), "\x00", " "), "postgres: "); ok {
				// A backend's title is "user database host state".
				if f := strings.Fields(title); len(f) > 0 {
					kind = f[0]
					if len(f) > 1 && !slices.Contains([]string{"autovacuum", "logical", "walwriter", "checkpointer", "background"}, f[0]) {
						kind = "backend " + f[1]
					}
				}
			}
		}
		by[kind] += processCPU(pid)
		if f := statFields(pid); len(f) > 14 {
			if parent, _ := os.ReadFile(fmt.Sprintf("/proc/%s/comm", f[1])); strings.TrimSpace(string(parent)) != "postgres" {
				cu, _ := strconv.ParseInt(f[13], 10, 64)
				cs, _ := strconv.ParseInt(f[14], 10, 64)
				by["exited"] += time.Duration(cu+cs) * time.Second / time.Duration(clockTick)
			}
		}
	}
	return by
}

// cpuByKindPerJob formats the growth from a to b of postgresCPUByKind, per
// job of n, largest first.
func cpuByKindPerJob(a, b map[string]time.Duration, n int) string {
	type kv struct {
		k string
		d time.Duration
	}
	var all []kv
	for k, v := range b {
		if d := v - a[k]; d > 0 {
			all = append(all, kv{k, d / time.Duration(max(n, 1))})
		}
	}
	slices.SortFunc(all, func(x, y kv) int { return cmp.Compare(y.d, x.d) })
	parts := make([]string, len(all))
	for i, e := range all {
		parts[i] = fmt.Sprintf("%s %.0f µs", e.k, float64(e.d.Nanoseconds())/1e3)
	}
	return strings.Join(parts, ", ")
}

// autovacuums samples what autovacuum workers of the whole cluster work
// on until ctx ends: each database and relation, by the share of samples.
func (c *cluster) autovacuums(ctx context.Context) string {
	counts, samples := c.sampleRows(ctx, 50*time.Millisecond, `
		SELECT datname || ': ' || regexp_replace(query, '^autovacuum: ', '') FROM pg_stat_activity
		WHERE backend_type = 'autovacuum worker' AND query <> ''`)
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range counts {
		all = append(all, kv{k, n})
	}
	slices.SortFunc(all, func(x, y kv) int { return cmp.Compare(y.n, x.n) })
	parts := []string{}
	for i, e := range all {
		if i == 6 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d%%", e.k, 100*e.n/max(samples, 1)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// autovacuumsQuiet waits until no autovacuum worker of the cluster is
// busy, or for at most limit.
func (c *cluster) autovacuumsQuiet(ctx context.Context, limit time.Duration) error {
	for start := time.Now(); time.Since(start) < limit; time.Sleep(200 * time.Millisecond) {
		var busy int
		if err := c.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' AND query <> ''`).Scan(&busy); err != nil {
			return err
		}
		if busy == 0 {
			return nil
		}
	}
	return nil
}
