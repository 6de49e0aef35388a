package pgcluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperDataDirEnv makes TestHelperProcess act as an agq that starts a
// cluster and then waits to be killed.
const helperDataDirEnv = "PGCLUSTER_HELPER_DATA_DIR"

func TestPostgresStopsWhenAgqIsKilled(t *testing.T) {
	t.Parallel()
	dataDir := newDataDir(t)

	agq := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	agq.Env = append(os.Environ(), helperDataDirEnv+"="+dataDir)
	var stderr bytes.Buffer
	agq.Stderr = &stderr
	stdin, err := agq.StdinPipe() // closing it ends the helper if we fail
	requireNoError(t, err)
	stdout, err := agq.StdoutPipe()
	requireNoError(t, err)
	requireNoError(t, agq.Start())
	t.Cleanup(func() {
		stdin.Close()
		agq.Process.Kill()
		agq.Wait()
	})

	pid, err := readPostmasterPid(stdout, testTimeout)
	if err != nil {
		agq.Process.Kill()
		agq.Wait()
		t.Fatalf("helper did not start postgres: %v\n%s", err, stderr.String())
	}
	if !processAlive(pid) {
		t.Fatalf("postgres (pid %d) is not running", pid)
	}
	t.Cleanup(func() {
		if processAlive(pid) {
			syscall.Kill(pid, syscall.SIGQUIT) // do not leak it when the test fails
		}
	})

	requireNoError(t, agq.Process.Signal(syscall.SIGKILL))
	agq.Wait()
	waitFor(t, stopTimeout, func() bool { return !processAlive(pid) },
		"postgres still runs after its agq was killed")

	// The kernel released the flock, and the next agq starts cleanly.
	c := openCluster(t, dataDir)
	startCluster(t, c)
	requireEqual(t, queryInt(t, c, "SELECT 1"), 1)
}

// TestHelperProcess is the agq that TestPostgresStopsWhenAgqIsKilled kills.
func TestHelperProcess(t *testing.T) {
	dataDir := os.Getenv(helperDataDirEnv)
	if dataDir == "" {
		return // only meaningful as the child of TestPostgresStopsWhenAgqIsKilled
	}
	c, err := Open(Config{DataDir: dataDir, Settings: testSettings})
	requireNoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	requireNoError(t, c.Start(ctx))
	fmt.Printf("postmaster %d\n", c.pm.pid())
	io.Copy(io.Discard, os.Stdin) // until killed, or the parent goes away
	c.Close()
}

func readPostmasterPid(r io.Reader, timeout time.Duration) (int, error) {
	found := make(chan int, 1)
	go func() {
		scanner := bufio.NewScanner(r)
		for scanner.Scan() {
			if rest, ok := strings.CutPrefix(scanner.Text(), "postmaster "); ok {
				if pid, err := strconv.Atoi(rest); err == nil {
					found <- pid
				}
			}
		}
		close(found)
	}()
	select {
	case pid, ok := <-found:
		if !ok {
			return 0, fmt.Errorf("helper exited")
		}
		return pid, nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("timed out after %s", timeout)
	}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-deadline:
			t.Fatal(msg)
		case <-ticker.C:
		}
	}
}

func TestFindBinaries(t *testing.T) {
	t.Parallel()

	t.Run("FindsInitdbNextToPostgres", func(t *testing.T) {
		t.Parallel()
		dir, err := FindBinaries("")
		requireNoError(t, err)
		if !hasServerBinaries(dir) {
			t.Fatalf("%s lacks initdb or postgres", dir)
		}
	})

	t.Run("OrdersVersionsNumerically", func(t *testing.T) {
		t.Parallel()
		older := versionOf("/usr/lib/postgresql/9.6/bin")
		newer := versionOf("/usr/lib/postgresql/15/bin")
		if slices.Compare(older, newer) >= 0 {
			t.Fatalf("9.6 (%v) does not sort below 15 (%v)", older, newer)
		}
	})
}
