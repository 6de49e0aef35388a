package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/internal/chaos"
)

// A short chaos run, as CI runs it: every kind of fault once (agq nodes and
// workers killed, a worker stopped past its heartbeats, PostgreSQL
// restarted fast and immediate, the primary killed and its synchronous
// standby promoted), then the restarts of a single PostgreSQL without a
// standby, with the nodes listening only over TLS and every client on it,
// then under Patroni (with etcd): a switchover done by Patroni, and the
// primary's postmaster killed so that Patroni fails over to the
// synchronous standby; and a workflow run (graphs of step jobs that
// sleep, wait for a signal the producer sends or for one nobody sends, or
// spawn children and await them) under agq's, the workers' and
// PostgreSQL's faults, where no step answered +OK may run again, no child
// start before its parent ended (nor a parent wake before its children
// did), no signal answered +OK go untaken by its wait, and no wait time
// out with its signal stored.
// Nothing acknowledged may be lost or left unfinished,
// no completion answered OK may be missing, no late report accepted, and
// every fault must be recovered from: a worker on every node completing
// jobs again without a restart, and a node leading.
func TestShortChaosRunLosesNothing(t *testing.T) {
	bin := t.TempDir()
	build := func(name, pkg string) string {
		out := filepath.Join(bin, name)
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
		return out
	}
	agq, self := build("agq", "github.com/agq/agq/cmd/agq"), build("agqchaos", ".")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"PrimaryAndStandby", []string{"-faults", "agq-kill,worker-kill,worker-stop,pg-restart-fast,pg-restart-immediate,failover"}},
		{"SinglePostgresOverTLS", []string{"-tls", "-no-standby", "-faults", "pg-restart-fast,pg-restart-immediate"}},
		{"Patroni", []string{"-patroni", "-faults", "switchover,primary-kill"}},
		{"Workflows", []string{"-workflows", "-rate", "30", "-faults", "agq-kill,worker-kill,worker-stop,pg-restart-immediate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "agqchaos")
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if !t.Failed() {
					os.RemoveAll(dir)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			args := append([]string{"-agq", agq, "-dir", dir, "-json", "-fsync=false", "-duration", "5s",
				"-stuck-after", "30s", "-nodes", "2", "-workers", "4", "-rate", "100"}, tc.args...)
			cmd := exec.CommandContext(ctx, self, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			runErr := cmd.Run()
			t.Logf("progress:\n%s", stderr.String())
			var rep chaos.Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("agqchaos: %v; report %q: %v (logs in %s)", runErr, stdout.String(), err, dir)
			}
			var printed bytes.Buffer
			rep.Print(&printed)
			t.Logf("report:\n%s", printed.String())
			if left := processesNaming(t, dir, bin); len(left) > 0 {
				t.Errorf("processes left running: %v", left)
			}
			if runErr != nil || !rep.OK() {
				t.Fatalf("the chaos run failed: %v (logs in %s)", runErr, dir)
			}
			if asked := slices.Contains(tc.args, "-tls"); rep.TLS != asked {
				t.Errorf("asked for TLS: %v; the report says TLS: %v", asked, rep.TLS)
			}
			if rep.WorkerCapacity <= 0 || rep.CompletionRate <= 0 {
				t.Errorf("the report gives no capacity (%v/s) or completion rate (%v/s)", rep.WorkerCapacity, rep.CompletionRate)
			}
			if rep.Acknowledged == 0 || rep.Completed != rep.Acknowledged {
				t.Fatalf("%d acknowledged, %d completed", rep.Acknowledged, rep.Completed)
			}
			if asked := slices.Contains(tc.args, "-workflows"); rep.Workflows != asked || (asked && rep.StepsCompleted == 0) {
				t.Errorf("asked for workflows: %v; the report says %v with %d steps completed", asked, rep.Workflows, rep.StepsCompleted)
			} else if asked && (rep.SignalsOK == 0 || rep.ChildrenSpawned == 0 || rep.LapsesTimedOut == 0) {
				t.Errorf("a workflow run with %d signals answered +OK, %d children spawned, %d waits timed out as they must",
					rep.SignalsOK, rep.ChildrenSpawned, rep.LapsesTimedOut)
			}
			if strings.Contains(tc.args[len(tc.args)-1], "worker-stop") && rep.ReportsRefused == 0 {
				t.Errorf("the worker stopped while it held a job had no report refused")
			}
			ran := map[string]bool{}
			for _, f := range rep.Faults {
				ran[f.Kind] = true
				if (f.Kind == "primary-kill" || f.Kind == "failover") && f.WritePause == 0 {
					t.Errorf("%s: no pause in writes measured with the primary dead", f.Kind)
				}
			}
			for _, kind := range strings.Split(tc.args[len(tc.args)-1], ",") {
				if !ran[kind] {
					t.Errorf("fault %s was not run: %+v", kind, rep.Faults)
				}
			}
		})
	}
}

// processesNaming lists the processes whose command line names one of
// dirs: the run's agq nodes, PostgreSQL, Patroni and etcd name its
// directory, its workers the binary's.
func processesNaming(t *testing.T, dirs ...string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && slices.ContainsFunc(dirs, func(d string) bool { return strings.Contains(string(b), d) }) {
			left = append(left, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return left
}
