package e2e

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// screenshotDir is where the browser test leaves its screenshots: the
// dashboard's documentation, which shows them, when AGQ_SCREENSHOTS=docs
// (to refresh them), else a directory of the test's own, so that a test
// run leaves the checkout as it was.
func screenshotDir(t *testing.T) string {
	if os.Getenv("AGQ_SCREENSHOTS") == "docs" {
		return "../docs/dashboard"
	}
	return shots(t)
}

var (
	shotsOnce sync.Once
	shotsDir  string
)

// shots is one directory for all of a run's screenshots.
func shots(t *testing.T) string {
	shotsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agq-screenshots")
		if err != nil {
			t.Fatal(err)
		}
		shotsDir = dir
		t.Logf("screenshots in %s", dir)
	})
	return shotsDir
}

// browserAt starts headless Chromium (a missing browser is a failure:
// .ci/install-deps installs it) with extra options, and returns a browser
// context.
func browserAt(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	exe := "/usr/bin/chromium"
	if _, err := os.Stat(exe); err != nil {
		if exe, err = exec.LookPath("chromium"); err != nil {
			t.Fatal("chromium is not installed: run .ci/install-deps")
		}
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}, extra...)...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// run runs browser steps with a deadline.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs one browser action that answers a value, with a deadline.
func value[T any](t *testing.T, ctx context.Context, what string, action chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// screenshot saves the page as name.png and checks it is not blank.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	buf := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		t.Fatalf("screenshot %s is not a PNG: %v", name, err)
	}
	colours := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[(r>>11)<<10|(g>>11)<<5|bl>>11] = true
		}
	}
	if len(colours) < 16 || b.Dx() < 300 || b.Dy() < 300 {
		t.Fatalf("screenshot %s looks blank: %dx%d, %d colours", name, b.Dx(), b.Dy(), len(colours))
	}
	dir := screenshotDir(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// count reads one count cell of the overview's queue table.
func count(t *testing.T, ctx context.Context, queue, column string) string {
	t.Helper()
	// Read in one script: the live refresh may replace the cell between
	// a node lookup and a read of it.
	s := value(t, ctx, "reading "+queue+" "+column, chromedp.Evaluate[string](fmt.Sprintf(
		`document.querySelector('tr[data-queue=%q] td[data-count=%q]').textContent`, queue, column)))
	return strings.TrimSpace(s)
}

// click presses an action button and waits for the page it leads to.
func click(t *testing.T, ctx context.Context, action, target string) {
	t.Helper()
	value(t, ctx, "marking the page", chromedp.Evaluate[bool](`window.beforeAction = true`))
	// The live refresh may swap the button for its copy just as it is
	// found: then it is found again.
	button := chromedp.CSS(fmt.Sprintf(`button[data-action=%q][data-target=%q]`, action, target))
	for attempt := 1; ; attempt++ {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := chromedp.Do(c, chromedp.Click(button))
		cancel()
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("%s %s: %v", action, target, err)
		}
	}
	// The form posts and the browser lands on a new page with the outcome.
	agqtest.Eventually(t, 15*time.Second, func() error {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		outcome, err := chromedp.Run(c, chromedp.Evaluate[string](
			`window.beforeAction ? "" : ((document.querySelector(".notice, .error") || {}).textContent || "")`))
		if err != nil || outcome == "" {
			return fmt.Errorf("no outcome yet (%v)", err)
		}
		if value(t, ctx, "reading the outcome", chromedp.Evaluate[bool](`!!document.querySelector(".error")`)) {
			t.Fatalf("%s %s: %s", action, target, outcome)
		}
		return nil
	})
}

func queueStats(t *testing.T, c *redis.Client, queue string) map[string]int64 {
	t.Helper()
	v, err := c.Do(context.Background(), "QUEUE.STATS", queue).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	switch m := v.(type) {
	case map[any]any:
		for k, v := range m {
			if n, ok := v.(int64); ok {
				out[k.(string)] = n
			}
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if n, ok := m[i+1].(int64); ok {
				out[m[i].(string)] = n
			}
		}
	}
	return out
}

func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, heartbeatEvery(time.Second))
	admin := a.Admin(t)
	ctx := context.Background()
	base := "http://" + a.HTTPAddr + "/"

	// Work nobody takes yet, a schedule, and a worker serving "ready".
	for i := range 3 {
		submit(t, admin, fmt.Sprintf(`{"job_id":"mail-%d","queue":"email","payload":{"to":"user%d@example.com"}}`, i, i))
	}
	for i := range 2 {
		submit(t, admin, fmt.Sprintf(`{"queue":"reports","type":"monthly","run_at":"2099-01-01T00:00:00Z","payload":{"n":%d}}`, i))
	}
	if err := admin.Do(ctx, "SCHEDULE.CREATE", `{"name":"nightly-report","cron":"0 3 * * *","timezone":"Europe/Paris","queue":"reports","job":{"type":"monthly"}}`).Err(); err != nil {
		t.Fatal(err)
	}
	startAgw(t, a.Addr, "agw-1", a.CreateKey(t, "worker", "agw-1"), "AGW_QUEUES=ready", "AGW_CONCURRENCY=2")
	submit(t, admin, `{"job_id":"sorted","plan":{"tasks":[{"tool":"sort"},{"tool":"uniq","args":["-c"]}]},"inputs":{"stdin":"b\na\nb\n"}}`)
	submit(t, admin, `{"job_id":"broken","max_attempts":1,"plan":{"tasks":[{"tool":"false"}]}}`)
	waitJob(t, admin, "sorted", 20*time.Second)
	if j := waitJob(t, admin, "broken", 20*time.Second); j.Status != "failed" {
		t.Fatalf("broken: %+v", j)
	}

	b := browserAt(t)
	t.Run("SignInShowsTheQueuesTheDatabaseHolds", func(t *testing.T) {
		run(t, b, "sign-in page", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.ID(`key`)))
		screenshot(t, b, "login")
		run(t, b, "signing in",
			chromedp.SendKeys(chromedp.ID(`key`), a.AdminKey),
			chromedp.Click(chromedp.ID(`signin`)),
			chromedp.WaitVisible(chromedp.ID(`queues`)))
		for _, q := range []string{"email", "reports", "ready"} {
			st := queueStats(t, admin, q)
			want := map[string]int64{"waiting": st["queued"] + st["scheduled"], "running": st["running"], "retrying": st["retrying"], "failed": st["failed"]}
			for col, n := range want {
				if got := count(t, b, q, col); got != strconv.FormatInt(n, 10) {
					t.Errorf("%s %s: the page shows %s, QUEUE.STATS %d", q, col, got, n)
				}
			}
		}
	})

	t.Run("AJobSubmittedOverRESPAppearsWithoutAReload", func(t *testing.T) {
		value(t, b, "marking the page", chromedp.Evaluate[bool](`window.notReloaded = true`))
		submit(t, admin, `{"job_id":"mail-new","queue":"email"}`)
		agqtest.Eventually(t, 15*time.Second, func() error {
			if got := count(t, b, "email", "waiting"); got != "4" {
				return fmt.Errorf("email waiting shows %s", got)
			}
			return nil
		})
		if !value(t, b, "checking for a reload", chromedp.Evaluate[bool](`window.notReloaded === true`)) {
			t.Fatal("the page was reloaded")
		}
		screenshot(t, b, "overview")
	})

	t.Run("RetryAFailedJobFromThePage", func(t *testing.T) {
		run(t, b, "failed page", chromedp.Navigate(base+"failed"), chromedp.WaitVisible(chromedp.ID(`failed`)))
		screenshot(t, b, "failed")
		click(t, b, "retry", "broken")
		// agw runs it again (and it fails again): a second attempt in its history.
		agqtest.Eventually(t, 20*time.Second, func() error {
			if j := getJob(t, admin, "broken"); len(j.Errors) != 2 || j.Status != "failed" {
				return fmt.Errorf("after the retry: %s with %d errors", j.Status, len(j.Errors))
			}
			return nil
		})
	})

	t.Run("CancelARunningJobFromThePage", func(t *testing.T) {
		secs := uniqueSleep(60)
		submit(t, admin, `{"job_id":"long-sleep","plan":{"tasks":[{"tool":"sleep","args":["`+secs+`"]}]}}`)
		waitProcesses(t, 15*time.Second, 1, "sleep", secs)
		run(t, b, "job page", chromedp.Navigate(base+"job?id=long-sleep"), chromedp.WaitVisible(chromedp.ID(`job-attempt`)))
		screenshot(t, b, "job")
		click(t, b, "cancel", "long-sleep")
		if j := waitJob(t, admin, "long-sleep", 15*time.Second); j.Status != "cancelled" {
			t.Fatalf("after cancelling from the page: %+v", j)
		}
		waitProcesses(t, 10*time.Second, 0, "sleep", secs)
	})

	t.Run("AJobsGraphIsDrawn", func(t *testing.T) {
		graph := `[{"job_id":"extract","plan":{"tasks":[{"tool":"echo","args":["rows"]}]}},
			{"job_id":"clean-orders","queue":"etl","after":["extract"]},{"job_id":"clean-customers","queue":"etl","after":["extract"]},
			{"job_id":"join","queue":"etl","after":["clean-orders","clean-customers"]},{"job_id":"publish","queue":"etl","after":["join"]},
			{"job_id":"notify","queue":"etl","after":["join"],"on_parent_failure":"run"}]`
		if err := admin.Do(ctx, "JOB.SUBMIT", graph).Err(); err != nil {
			t.Fatal(err)
		}
		if j := waitJob(t, admin, "extract", 20*time.Second); j.Status != "completed" {
			t.Fatalf("extract: %+v", j)
		}
		run(t, b, "graph", chromedp.Navigate(base+"job?id=join"), chromedp.WaitVisible(chromedp.ID(`job-graph`)))
		// Its two parents, their parent, its two children, and itself;
		// a click on a box opens that job's page.
		if n := value(t, b, "counting the graph's jobs", chromedp.Evaluate[float64](`document.querySelectorAll("#job-graph a").length`)); n != 6 {
			t.Fatalf("the graph draws %v jobs, want 6", n)
		}
		screenshot(t, b, "job-graph")
		run(t, b, "following the graph", chromedp.Click(`#job-graph a[href$="id=extract"] rect`),
			chromedp.WaitVisible(chromedp.ID(`job-graph`)))
		if title := value(t, b, "reading the title", chromedp.Text(chromedp.CSS(`h1`))); !strings.Contains(title, "extract") {
			t.Fatalf("a click on extract's box opened %q", title)
		}
	})

	t.Run("SearchFindsAJobByID", func(t *testing.T) {
		run(t, b, "searching",
			chromedp.Navigate(base),
			chromedp.SendKeys(chromedp.CSS(`input[name="id"]`), "sorted\n"),
			chromedp.WaitVisible(chromedp.ID(`job-attempt`)))
		title := value(t, b, "reading the title", chromedp.Text(chromedp.CSS(`h1`)))
		if !strings.Contains(title, "sorted") {
			t.Fatalf("search landed on %q", title)
		}
	})

	t.Run("PauseAQueueAndABlockedPopGetsNothingUntilResumed", func(t *testing.T) {
		popper := a.Client(t, redis.Options{Username: "popper", Password: a.CreateKey(t, "worker", "popper")})
		if err := popper.Do(ctx, "WORKER.REGISTER", `{"worker_id":"popper","hostname":"test","agw_version":"test","capabilities":{"tools":[]}}`).Err(); err != nil {
			t.Fatal(err)
		}
		beat, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			for beat.Err() == nil {
				_ = popper.Do(beat, "WORKER.HEARTBEAT", "popper").Err()
				time.Sleep(300 * time.Millisecond)
			}
		}()
		run(t, b, "queue page", chromedp.Navigate(base+"queue?name=email"), chromedp.WaitVisible(chromedp.ID(`jobs`)))
		click(t, b, "pause-queue", "email")
		screenshot(t, b, "queue")
		got := make(chan []string, 1)
		go func() {
			v, err := popper.BRPop(ctx, 0, "queue:email").Result()
			if err != nil {
				v = []string{"error", err.Error()}
			}
			got <- v
		}()
		select {
		case v := <-got:
			t.Fatalf("a paused queue gave a blocked BRPOP %q", v)
		case <-time.After(3 * time.Second):
		}
		click(t, b, "resume-queue", "email")
		select {
		case v := <-got:
			if v[0] != "queue:email" {
				t.Fatalf("BRPOP after the resume: %q", v)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the blocked BRPOP got nothing after the queue was resumed from the page")
		}
	})

	t.Run("SchedulesPage", func(t *testing.T) {
		run(t, b, "schedules page", chromedp.Navigate(base+"schedules"), chromedp.WaitVisible(chromedp.ID(`schedules`)))
		click(t, b, "trigger-schedule", "nightly-report")
		click(t, b, "pause-schedule", "nightly-report")
		raw, err := admin.Do(ctx, "SCHEDULE.GET", "nightly-report").Text()
		if err != nil || !strings.Contains(raw, `"enabled":false`) || !strings.Contains(raw, `"fires":1`) {
			t.Fatalf("after trigger and pause from the page: %s (%v)", raw, err)
		}
		screenshot(t, b, "schedules")
	})

	t.Run("DrainAWorkerAndAgwStopsTakingJobs", func(t *testing.T) {
		run(t, b, "workers page", chromedp.Navigate(base+"workers"), chromedp.WaitVisible(chromedp.ID(`workers`)))
		screenshot(t, b, "workers")
		click(t, b, "drain", "agw-1")
		waitWorker(t, admin, "agw-1", "DRAINING")
		// Three heartbeats: agw has heard it, and a job for it stays put.
		time.Sleep(3 * time.Second)
		submit(t, admin, `{"job_id":"after-drain","plan":{"tasks":[{"tool":"true"}]}}`)
		time.Sleep(3 * time.Second)
		if j := getJob(t, admin, "after-drain"); j.Status != "queued" || j.Attempt != 0 {
			t.Fatalf("a drained agw took a job: %+v", j)
		}
	})

	t.Run("ReadableOnAPhone", func(t *testing.T) {
		run(t, b, "phone-sized overview",
			chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
			chromedp.Navigate(base),
			chromedp.WaitVisible(chromedp.ID(`queues`)))
		if value(t, b, "measuring", chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`)) {
			t.Error("the overview is wider than a phone's screen")
		}
		screenshot(t, b, "overview-phone")
	})
}
