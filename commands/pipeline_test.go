package commands_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// respCommand encodes one command as redis-cli --pipe reads it.
func respCommand(b *strings.Builder, args ...string) {
	fmt.Fprintf(b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(b, "$%d\r\n%s\r\n", len(a), a)
	}
}

// Bulk loading as Redis documents it: redis-cli --pipe sends AUTH and
// 50,000 LPUSHes without waiting for replies. Every job is stored once,
// the submissions share groups, and the same load sent again stores
// nothing twice.
func TestRedisCLIPipeLoadsJobsInGroups(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	const n = 50000
	var in strings.Builder
	respCommand(&in, "AUTH", a.AdminKey)
	for i := range n {
		respCommand(&in, "LPUSH", "queue:bulk", fmt.Sprintf(`{"job_id":"bulk-%d","type":"t"}`, i))
	}
	sumBefore, countBefore := groupSizes(t, a, "submit")
	for load := range 2 {
		cliCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		cmd := a.RedisCLICommand(cliCtx, t, "--pipe")
		cmd.Stdin = strings.NewReader(in.String())
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), fmt.Sprintf("errors: 0, replies: %d", n+1)) {
			t.Fatalf("load %d: redis-cli --pipe: %v\n%s", load, err, out)
		}
		if depth, err := admin.LLen(ctx, "queue:bulk").Result(); err != nil || depth != n {
			t.Fatalf("after load %d: LLEN = %d, %v; want %d", load, depth, err, n)
		}
		if load == 0 {
			sum, count := groupSizes(t, a, "submit")
			if sum-sumBefore != n || (sum-sumBefore)/(count-countBefore) < 20 {
				t.Fatalf("%v submissions in %v groups, want groups of many", sum-sumBefore, count-countBefore)
			}
		}
	}
	for _, id := range []string{"bulk-0", "bulk-24999", fmt.Sprint("bulk-", n-1)} {
		if raw, _ := admin.Do(ctx, "JOB.GET", id).Text(); !strings.Contains(raw, `"status":"queued"`) {
			t.Fatalf("%s after the loads: %s", id, raw)
		}
	}
}

// A pipeline mixing submissions with reads, a refused job and a batch
// answers each command as running them one after the other would: a read
// sees the writes before it, LPUSH counts the queue as Redis does, and
// the same pipeline sent again stores nothing twice.
func TestPipelineMixingWritesAndReadsAnswersInOrder(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	job := func(id string) string { return fmt.Sprintf(`{"job_id":%q,"queue":"mix","type":"t"}`, id) }
	for round := range 2 {
		pipe := admin.Pipeline()
		cmds := []*redis.Cmd{
			pipe.Do(ctx, "JOB.SUBMIT", job("mix-1")),
			pipe.Do(ctx, "LPUSH", "queue:mix", job("mix-2")),
			pipe.Do(ctx, "JOB.GET", "mix-1"),
			pipe.Do(ctx, "JOB.SUBMIT", `{"job_id":"mix-bad",`),
			pipe.Do(ctx, "LPUSH", "queue:mix", job("mix-3")),
			pipe.Do(ctx, "LLEN", "queue:mix"),
			pipe.Do(ctx, "JOB.SUBMIT", "["+job("mix-4")+","+job("mix-5")+"]"),
			pipe.Do(ctx, "LPUSH", "queue:mix", job("mix-6")),
			pipe.Do(ctx, "JOB.SUBMIT", job("mix-1")),
			pipe.Do(ctx, "LPUSH", "queue:mix", job("mix-7")),
			pipe.Do(ctx, "LLEN", "queue:mix"),
		}
		pipe.Exec(ctx)
		lpush := []int64{2, 3, 6, 7}
		if round > 0 {
			lpush = []int64{7, 7, 7, 7} // nothing new: the depth as it is
		}
		want := []any{"mix-1", lpush[0], "job", "ERR invalid job: ", lpush[1], int64(3 + 4*round),
			[]any{"mix-4", "mix-5"}, lpush[2], "mix-1", lpush[3], int64(7)}
		for i, c := range cmds {
			got, err := c.Result()
			switch w := want[i].(type) {
			case string:
				switch {
				case w == "job":
					if s, _ := got.(string); !strings.Contains(s, `"job_id":"mix-1"`) || !strings.Contains(s, `"status":"queued"`) {
						t.Fatalf("round %d, reply %d: JOB.GET of the first = %v, %v", round, i, got, err)
					}
				case strings.HasPrefix(w, "ERR"):
					if err == nil || !strings.HasPrefix(err.Error(), w) {
						t.Fatalf("round %d, reply %d: a bad job = %v, %v; want %q…", round, i, got, err, w)
					}
				case got != w || err != nil:
					t.Fatalf("round %d, reply %d = %v, %v; want %v", round, i, got, err, w)
				}
			case []any:
				if s, _ := got.([]any); err != nil || !slices.Equal(s, w) {
					t.Fatalf("round %d, reply %d = %v, %v; want %v", round, i, got, err, w)
				}
			default:
				if got != w || err != nil {
					t.Fatalf("round %d, reply %d = %v, %v; want %v", round, i, got, err, w)
				}
			}
		}
	}
	if raw, _ := admin.Do(ctx, "JOB.GET", "mix-bad").Result(); raw != nil {
		t.Fatalf("the refused job was stored: %v", raw)
	}
}

// Pipelined LPUSHes to an empty queue answer its length after each push,
// 1, 2, 3…, as Redis does, though they share commits.
func TestPipelinedLPushesCountAsRedis(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	const n = 1200 // more than a group
	pipe := admin.Pipeline()
	pushes := make([]*redis.IntCmd, n)
	for i := range pushes {
		pushes[i] = pipe.LPush(ctx, "queue:counted", fmt.Sprintf(`{"type":"t","payload":%d}`, i))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range pushes {
		if got := c.Val(); got != int64(i+1) {
			t.Fatalf("LPUSH %d answered %d, want %d", i, got, i+1)
		}
	}
}

// The cookbook's bulk-load script runs as printed, one job per line of its
// input.
func TestCookbookBulkLoadScript(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	page, err := os.ReadFile("../docs/cookbook.md")
	if err != nil {
		t.Fatal(err)
	}
	_, script, ok := strings.Cut(string(page), "```sh title=\"bulk-load.sh\"\n")
	if script, _, ok = strings.Cut(script, "\n```"); !ok {
		t.Fatal("docs/cookbook.md has no bulk-load.sh block")
	}
	path := filepath.Join(t.TempDir(), "bulk-load.sh")
	if err := os.WriteFile(path, []byte(script+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	var jobs strings.Builder
	for i := range n {
		fmt.Fprintf(&jobs, `{"job_id":"import-%d","type":"sort","payload":"é %d"}`+"\n", i, i)
	}
	host, port, _ := net.SplitHostPort(a.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", path, "imports")
	cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+a.AdminKey, "AGQ_HOST="+host, "AGQ_PORT="+port)
	cmd.Stdin = strings.NewReader(jobs.String())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("errors: 0, replies: %d", n)) {
		t.Fatalf("bulk-load.sh: %v\n%s", err, out)
	}
	if depth, err := a.Admin(t).LLen(ctx, "queue:imports").Result(); err != nil || depth != n {
		t.Fatalf("LLEN after the load = %d, %v; want %d", depth, err, n)
	}
}

// A pipeline of step calls about two jobs from one connection answers in
// order: completions join groups, a refused one is its own reply, and a
// completion and a report about the same job keep their order.
func TestPipelinedStepCallsAnswerInOrder(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "piper", "t")
	submit(t, admin, map[string]any{"type": "t", "queue": "steps-pipe"})
	submit(t, admin, map[string]any{"type": "t", "queue": "steps-pipe"})
	j1, j2 := popStep(t, w, "steps-pipe"), popStep(t, w, "steps-pipe")
	sumBefore, _ := groupSizes(t, a, "step_complete")
	pipe := w.c.Pipeline()
	do := func(j stepJob, cmd, step string, args ...any) *redis.Cmd {
		all := append([]any{cmd, j.id, step}, args...)
		return pipe.Do(ctx, append(all, "DELIVERY", j.d.Delivery)...)
	}
	execute := `{"execute":true,"attempt":1}`
	cmds := []*redis.Cmd{
		do(j1, "STEP.BEGIN", "a"),
		do(j1, "STEP.COMPLETE", "a", `1`),
		do(j2, "STEP.COMPLETE", "x", `0`),
		do(j2, "STEP.BEGIN", "b"),
		do(j2, "STEP.COMPLETE", "b", `2`),
		do(j1, "STEP.COMPLETE", "a", `1`), // re-sent
		do(j1, "STEP.BEGIN", "c"),
		do(j2, "STEP.BEGIN", "c"),
		do(j1, "STEP.COMPLETE", "c"),
		do(j2, "STEP.COMPLETE", "c", `"two"`),
		pipe.Do(ctx, "JOB.UPDATE", j1.id, fmt.Sprintf(`{"status":"completed","delivery":%q}`, j1.d.Delivery)),
		do(j1, "STEP.COMPLETE", "c"), // after the report: the job is done
		do(j2, "STEP.BEGIN", "a", `{"input":1}`),
	}
	pipe.Exec(ctx)
	want := []string{execute, "OK", "ERR step x was not begun", execute, "OK", "OK", execute, execute,
		"OK", "OK", "OK", "ERR", execute}
	for i, c := range cmds {
		got, err := c.Text()
		switch {
		case strings.HasPrefix(want[i], "ERR"):
			if err == nil || !strings.HasPrefix(err.Error(), want[i]) {
				t.Errorf("reply %d = %q, %v; want %q…", i, got, err, want[i])
			}
		case got != want[i] || err != nil:
			t.Errorf("reply %d = %q, %v; want %q", i, got, err, want[i])
		}
	}
	for id, want := range map[string]string{j1.id: `a:1 c:null`, j2.id: `b:2 c:"two" a:null`} {
		var got []string
		for _, s := range jobSteps(t, admin, id) {
			got = append(got, s.StepID+":"+string(s.Output))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("%s: steps %v, want %s", id, got, want)
		}
	}
	if sum, _ := groupSizes(t, a, "step_complete"); sum-sumBefore != 7 {
		t.Errorf("%v completions went through their group, want 7", sum-sumBefore)
	}
}

// A pipeline of STEP.BEGINs about many jobs, as a worker of many slots
// sends them, is served as one run: the begins share groups.
func TestPipelinedStepBeginsShareGroups(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	w := registerWorker(t, a, "beginner", "t")
	const n = 24
	jobs := make([]stepJob, n)
	for i := range jobs {
		submit(t, admin, map[string]any{"type": "t", "queue": "steps-begins"})
		jobs[i] = popStep(t, w, "steps-begins")
	}
	sumBefore, countBefore := groupSizes(t, a, "step_begin")
	pipe := w.c.Pipeline()
	cmds := make([]*redis.Cmd, n)
	for i, j := range jobs {
		cmds[i] = pipe.Do(ctx, "STEP.BEGIN", j.id, "first", `{"input":`+strconv.Itoa(i)+`}`, "DELIVERY", j.d.Delivery)
	}
	pipe.Exec(ctx)
	for i, c := range cmds {
		if got, err := c.Text(); got != `{"execute":true,"attempt":1}` || err != nil {
			t.Errorf("STEP.BEGIN of job %d = %q, %v", i, got, err)
		}
	}
	sum, count := groupSizes(t, a, "step_begin")
	if sum-sumBefore != n || count-countBefore > 3 {
		t.Errorf("%v begins in %v groups, want %d in at most 3", sum-sumBefore, count-countBefore, n)
	}
	for i, j := range jobs {
		if steps := jobSteps(t, admin, j.id); len(steps) != 1 || steps[0].Status != "running" || string(steps[0].Input) != strconv.Itoa(i) {
			t.Errorf("job %d: steps %+v", i, steps)
		}
	}
}
