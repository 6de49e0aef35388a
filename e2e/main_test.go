package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agq/agq/internal/agqtest"
)

// binDir holds the binaries the tests build, for the whole test run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agq-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binDir = dir
	code := agqtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	agwPath   string
	buildErr  error
)

// agwBinary builds cmd/agw once per test run and returns its path.
func agwBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		agwPath = filepath.Join(binDir, "agw")
		buildErr = goBuild(agwPath, "github.com/agq/agq/cmd/agw")
	})
	if buildErr != nil {
		t.Fatalf("building agw: %v", buildErr)
	}
	return agwPath
}

var (
	agqBuildOnce sync.Once
	agqPath      string
	agqBuildErr  error
)

// agqBinary builds cmd/agq once per test run and returns its path, for the
// tests that need agq as a process of its own (signals, its log).
func agqBinary(t *testing.T) string {
	t.Helper()
	agqBuildOnce.Do(func() {
		agqPath = filepath.Join(binDir, "agq")
		agqBuildErr = goBuild(agqPath, "github.com/agq/agq/cmd/agq")
	})
	if agqBuildErr != nil {
		t.Fatalf("building agq: %v", agqBuildErr)
	}
	return agqPath
}

// goBuild builds pkg into out with the go command the tests run under,
// from this module (so that its go.mod decides every dependency's version).
func goBuild(out, pkg string) error {
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool(), append(args, pkg)...)
	cmd.Dir = ".." // the module's root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %v\n%s", args, err, b)
	}
	return nil
}

// goTool is the go command: on PATH, else the one of GOROOT.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}
