package pgcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// debianBinGlob is where Debian and Ubuntu install each major version.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

const installHint = "install the PostgreSQL server (Debian/Ubuntu: apt-get install -y postgresql)"

// FindBinaries returns the directory holding initdb and postgres. A
// non-empty binDir is used as is; otherwise PATH is searched first, then the
// highest version under /usr/lib/postgresql/*/bin. The error wraps
// ErrNoBinaries and says what to install.
func FindBinaries(binDir string) (string, error) {
	if binDir != "" {
		if hasServerBinaries(binDir) {
			return filepath.Abs(binDir)
		}
		return "", fmt.Errorf("%w: no initdb and postgres in BinDir %s; point BinDir at the directory holding them or %s",
			ErrNoBinaries, binDir, installHint)
	}
	if dir, ok := binariesOnPath(); ok {
		return dir, nil
	}
	if dir, ok := highestDebianBinDir(); ok {
		return dir, nil
	}
	return "", fmt.Errorf("%w: no initdb and postgres on PATH or under %s; %s or set BinDir",
		ErrNoBinaries, debianBinGlob, installHint)
}

// binariesOnPath resolves symlinks so that a PATH entry such as
// /usr/local/bin/postgres -> /usr/lib/postgresql/15/bin/postgres yields the
// real directory, where initdb must sit next to postgres.
func binariesOnPath() (string, bool) {
	path, err := exec.LookPath("postgres")
	if err != nil {
		return "", false
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", false
	}
	dir := filepath.Dir(real)
	if !hasServerBinaries(dir) {
		return "", false
	}
	abs, err := filepath.Abs(dir)
	return abs, err == nil
}

func highestDebianBinDir() (string, bool) {
	dirs, _ := filepath.Glob(debianBinGlob)
	dirs = slices.DeleteFunc(dirs, func(d string) bool { return !hasServerBinaries(d) })
	if len(dirs) == 0 {
		return "", false
	}
	best := slices.MaxFunc(dirs, func(a, b string) int {
		return slices.Compare(versionOf(a), versionOf(b))
	})
	return best, true
}

// versionOf parses "/usr/lib/postgresql/9.6/bin" as [9 6]; so 15 sorts
// above 9.6, which a string comparison would get wrong.
func versionOf(binDir string) []int {
	var version []int
	for part := range strings.SplitSeq(filepath.Base(filepath.Dir(binDir)), ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			n = -1
		}
		version = append(version, n)
	}
	return version
}

func hasServerBinaries(dir string) bool {
	return isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres"))
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}
