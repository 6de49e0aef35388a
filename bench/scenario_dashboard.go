package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// pageTiming is one dashboard page's response times.
type pageTiming struct {
	page        string
	first, best time.Duration
}

// dashboardPages fills a database of its own with jobs as a month of work
// leaves them, starts agq on it with its dashboard, signs in and times each
// page: the first request and the best of them, each (when there are
// several) spaced past the dashboard's two-second cache, so that each one
// reads the database.
func dashboardPages(ctx context.Context, cl *cluster, bin string, jobs, samples int, progress func(string, ...any)) ([]pageTiming, error) {
	if _, err := cl.admin.Exec(ctx, "CREATE DATABASE agqdash"); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "agqb-dash")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	adminKey, httpAddr := hex.EncodeToString(key), freeAddr()
	cmd := exec.CommandContext(ctx, bin, "--listen", freeAddr(), "--http-listen", httpAddr, "--database-url", cl.url("agqdash"),
		"--data-dir", dir, "--admin-key", adminKey, "--log-level", "warn",
		// The month of jobs stays while pages are timed.
		"--retain-completed", "2000h", "--retain-failed", "2000h")
	log, err := os.Create(filepath.Join(dir, "agq.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	base := "http://" + httpAddr + "/"
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: time.Minute}
	if err := waitSidePort(client, base, log.Name()); err != nil {
		return nil, err
	}
	progress("dashboard: filling %d jobs", jobs)
	conn, err := pgx.Connect(ctx, cl.url("agqdash"))
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if err := fillDashboard(ctx, conn, jobs); err != nil {
		return nil, err
	}
	if err := signIn(client, base, adminKey); err != nil {
		return nil, err
	}
	return timePages(client, base, jobs, samples)
}

// waitSidePort waits up to a minute for agq's /readyz to answer 200.
func waitSidePort(client *http.Client, base, logName string) error {
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if res, err := client.Get(base + "readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Since(start) > time.Minute {
			return fmt.Errorf("agq's side port did not answer (log in %s)", logName)
		}
	}
}

// fillDashboard writes the month of jobs and analyzes them, so that the
// planner sees the tables as they are.
func fillDashboard(ctx context.Context, conn *pgx.Conn, jobs int) error {
	if _, err := conn.Exec(ctx, fillJobs, jobs); err != nil {
		return fmt.Errorf("filling: %w", err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		return err
	}
	return nil
}

// signIn signs the client's cookie jar in as admin.
func signIn(client *http.Client, base, adminKey string) error {
	res, err := client.PostForm(base+"login", url.Values{"key": {adminKey}})
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.Request.URL.Path != "/" {
		return fmt.Errorf("signing in ended on %s", res.Request.URL)
	}
	return nil
}

// timePages requests each page samples times and keeps the first and best
// response times.
func timePages(client *http.Client, base string, jobs, samples int) ([]pageTiming, error) {
	// A job in the middle of the month, and the middle of the failed list.
	mid := fmt.Sprintf("j%08d", jobs/2)
	midFinished := time.Now().Add(-15 * 24 * time.Hour).UTC().Format(time.RFC3339Nano)
	pages := []struct{ name, path string }{
		{"overview", ""},
		{"queue, newest queued", "queue?name=ready&status=queued"},
		{"queue, completed, half-way down", "queue?name=ready&status=completed&before=" + mid},
		{"job", "job?id=" + mid},
		{"failed, newest", "failed"},
		{"failed, half-way down", "failed?before_t=" + url.QueryEscape(midFinished) + "&before_id=" + mid},
		{"workers", "workers"},
		{"schedules", "schedules"},
		{"search by id", "search?id=" + mid},
	}
	var out []pageTiming
	for _, p := range pages {
		t := pageTiming{page: p.name}
		for i := range samples {
			if samples > 1 {
				time.Sleep(2100 * time.Millisecond) // past the dashboard's cache
			}
			d, err := timeGet(client, base+p.path)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			if i == 0 {
				t.first, t.best = d, d
			}
			t.best = min(t.best, d)
		}
		out = append(out, t)
	}
	return out, nil
}

// timeGet is how long GET u takes, reading the whole body.
func timeGet(client *http.Client, u string) (time.Duration, error) {
	start := time.Now()
	res, err := client.Get(u)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	d := time.Since(start)
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %d", res.StatusCode)
	}
	return d, nil
}

// fillJobs writes $1 jobs as a month of steady work leaves them (the
// layout of store's EXPLAIN test): 97% finished over 30 days, 1% of them
// failed, then 2% waiting and 1% running on 300 workers, over six queues.
const fillJobs = `
WITH q AS (INSERT INTO queues (name) VALUES ('ready'), ('email'), ('reports'), ('video'), ('etl'), ('audit') ON CONFLICT DO NOTHING),
w AS (
	INSERT INTO workers (worker_id, principal, state, hostname, agw_version, capabilities, metadata, last_heartbeat_at, stats)
	SELECT 'worker-' || g, 'w', CASE WHEN g <= 300 THEN 'ACTIVE' WHEN g % 2 = 0 THEN 'DEAD' ELSE 'UNREGISTERED' END,
	       'host-' || g, '1.0.0', ARRAY['sort', 'grep', 'echo'], '{}', now() - (g % 30) * interval '1 second',
	       '{"active_jobs": 1, "completed_jobs_total": 1200, "failed_jobs_total": 12}'
	FROM generate_series(1, 400) g
)
INSERT INTO jobs (id, queue, type, payload, status, attempt, max_attempts, timeout_seconds, run_at, worker_id,
                  lease_expires_at, result, errors, created_at, started_at, finished_at, updated_at)
SELECT 'j' || lpad(g::text, 8, '0'),
       CASE WHEN g % 1000 = 17 THEN 'audit'
            ELSE (ARRAY['ready', 'ready', 'ready', 'email', 'reports', 'video', 'etl'])[1 + (g / 3) % 7] END,
       'type-' || g % 4,
       jsonb_build_object('n', g, 'input', '/data/in/' || g || '.csv'),
       status,
       CASE status WHEN 'failed' THEN 3 WHEN 'running' THEN 1 ELSE 0 END,
       3, 3600, created,
       CASE status WHEN 'running' THEN 'worker-' || (1 + (g / 3) % 300) END,
       CASE status WHEN 'running' THEN now() + interval '10 minutes' END,
       CASE status WHEN 'completed' THEN '{"output": "ok"}'::jsonb END,
       CASE status WHEN 'failed' THEN '[{"attempt": 3, "error": "exit status 1"}]'::jsonb ELSE '[]' END,
       created,
       CASE WHEN status IN ('running', 'completed', 'failed') THEN created + interval '1 second' END,
       CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN created + (1 + g % 120) * interval '1 second' END,
       created
FROM (
    SELECT g, now() - interval '30 days' + g * (interval '30 days' / $1::int) AS created,
           CASE WHEN g <= $1::int * 97 / 100 THEN
                    CASE WHEN g % 100 = 7 THEN 'failed' WHEN g % 50 = 11 THEN 'cancelled' ELSE 'completed' END
                WHEN g % 3 = 0 THEN 'running'
                ELSE 'queued'
           END AS status
    FROM generate_series(1, $1::int) g
) s`
