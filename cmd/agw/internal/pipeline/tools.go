package pipeline

import (
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultTools is the set agw offers when the operator names none: filters
// that read their input and write their output and can neither run another
// program nor write a file of their choosing. Each is offered only if found
// on PATH. A few of them have such an option all the same (sort
// --compress-program and -o, uniq's output operand, date -s); argPolicies
// refuses those options.
//
// Left out on purpose, because they run other programs or scripts: shells
// (sh, bash, dash, zsh, busybox), interpreters (python, perl, ruby, node,
// php, lua, tclsh), awk and sed (awk's system() and sed's e command run
// shell commands, sed's w command writes files), ed and vi, and everything
// that wraps another command (env, xargs, find -exec, timeout, nice, nohup,
// stdbuf, setsid, chroot, sudo, watch, flock, parallel). Left out because
// they write files: tee, dd, split (whose --filter runs a shell too), tar.
// An operator who really wants one offers it by name through AGW_TOOLS.
var DefaultTools = []string{
	"base64", "cat", "column", "comm", "cut", "date", "echo", "false", "fmt",
	"fold", "grep", "head", "join", "jq", "md5sum", "nl", "paste", "printf",
	"rev", "seq", "sha256sum", "sleep", "sort", "tac", "tail", "tr", "true",
	"uniq", "wc",
}

// runsPrograms names tools known to run other programs, scripts or shell
// commands. They are never offered by default; offering one explicitly is
// allowed but worth a warning.
var runsPrograms = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true,
	"csh": true, "tcsh": true, "fish": true, "busybox": true,
	"python": true, "python3": true, "perl": true, "ruby": true, "node": true,
	"php": true, "lua": true, "tclsh": true, "awk": true, "gawk": true,
	"mawk": true, "nawk": true, "sed": true, "ed": true, "vi": true, "vim": true,
	"env": true, "xargs": true, "find": true, "timeout": true, "nice": true,
	"nohup": true, "stdbuf": true, "setsid": true, "chroot": true, "sudo": true,
	"su": true, "doas": true, "watch": true, "flock": true, "parallel": true,
	"split": true, "tar": true, "make": true, "git": true, "ssh": true,
	"strace": true, "script": true, "unshare": true, "nsenter": true,
}

// RunsPrograms reports whether tool is known to run other programs; offering
// it hands job submitters a shell on this machine.
func RunsPrograms(tool string) bool { return runsPrograms[tool] }

// ValidToolName checks that name is a bare program name: not a path, not
// "." or "..", nothing a shell or the kernel would read specially.
func ValidToolName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty tool name")
	case strings.ContainsRune(name, '/'):
		return fmt.Errorf("%q is a path; tools are bare names from the offered set", name)
	case name == "." || name == ".." || strings.HasPrefix(name, "-"):
		return fmt.Errorf("%q is not a tool name", name)
	case len(name) > 64:
		return fmt.Errorf("tool name %.20q… is too long", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-", r)) {
			return fmt.Errorf("tool name %q has a character other than letters, digits and ._+-", name)
		}
	}
	return nil
}

// Toolset is the set of tools a worker offers, each resolved once, at
// startup, to an absolute path: a job runs exactly the binary the worker
// announced, whatever happens to PATH later.
type Toolset struct {
	paths map[string]string
}

// ResolveTools looks up each name with lookPath (exec.LookPath when nil).
// With no names it resolves DefaultTools and leaves out those not found;
// with names it reports the ones not found in missing, so that the caller
// can warn about them. A name that is not a bare tool name is an error.
func ResolveTools(names []string, lookPath func(string) (string, error)) (ts *Toolset, missing []string, err error) {
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	explicit := len(names) > 0
	if !explicit {
		names = DefaultTools
	}
	ts = &Toolset{paths: make(map[string]string, len(names))}
	for _, name := range names {
		if err := ValidToolName(name); err != nil {
			return nil, nil, err
		}
		path, err := lookPath(name)
		if err == nil && !filepath.IsAbs(path) {
			path, err = filepath.Abs(path)
		}
		if err != nil {
			if explicit {
				missing = append(missing, name)
			}
			continue
		}
		ts.paths[name] = path
	}
	return ts, missing, nil
}

// NewToolset offers exactly the given name → absolute path pairs. Tests use
// it; agw itself uses ResolveTools.
func NewToolset(paths map[string]string) *Toolset {
	return &Toolset{paths: maps.Clone(paths)}
}

// Names lists the offered tools, sorted: the worker's capabilities.tools.
func (t *Toolset) Names() []string {
	names := make([]string, 0, len(t.paths))
	for name := range t.paths {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Len is the number of offered tools.
func (t *Toolset) Len() int { return len(t.paths) }

// lookup resolves a plan's tool name, or explains the refusal.
func (t *Toolset) lookup(task int, tool string) (string, error) {
	if err := ValidToolName(tool); err != nil {
		return "", refused(task, tool, "%v", err)
	}
	path, ok := t.paths[tool]
	if !ok {
		return "", refused(task, tool, "tool %q is not offered by this worker (offered: %s)", tool, strings.Join(t.Names(), ", "))
	}
	return path, nil
}
