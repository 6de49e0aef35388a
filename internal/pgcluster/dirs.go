package pgcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

const (
	// relocatedRoot holds clusters whose data dir the postgres user cannot
	// reach when agq runs as root.
	relocatedRoot = "/var/lib/agq"
	// maxSocketPath leaves headroom below the kernel's 107-byte limit.
	maxSocketPath = 100
	socketName    = ".s.PGSQL.5432"
	// shortSocketRoot is fixed rather than $TMPDIR, which may be long or
	// unreachable by the postgres user.
	shortSocketRoot = "/tmp"
)

// runAs is the unprivileged user that runs PostgreSQL when agq is root,
// because postgres refuses to run as root.
type runAs struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32
}

// lookupRunAs returns nil when agq is not root: postgres then runs as us.
func lookupRunAs() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: agq runs as root and PostgreSQL refuses to, so it needs the user postgres "+
			"(Debian/Ubuntu: apt-get install -y postgresql creates it): %v", ErrNoPostgresUser, err)
	}
	r := &runAs{name: u.Username}
	if r.uid, err = parseID(u.Uid); err != nil {
		return nil, err
	}
	if r.gid, err = parseID(u.Gid); err != nil {
		return nil, err
	}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("listing groups of user postgres: %w", err)
	}
	for _, g := range gids {
		id, err := parseID(g)
		if err != nil {
			return nil, err
		}
		r.groups = append(r.groups, id)
	}
	return r, nil
}

func parseID(s string) (uint32, error) {
	id, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("parsing user or group id %q: %w", s, err)
	}
	return uint32(id), nil
}

// ServerCredential returns the credential PostgreSQL's processes run with,
// for programs that start them some other way (an HA manager): nil when we
// are not root, else the postgres user, since postgres refuses root.
func ServerCredential() (*syscall.Credential, error) {
	r, err := lookupRunAs()
	if err != nil {
		return nil, err
	}
	return r.credential(), nil
}

// credential is nil when postgres runs as us.
func (r *runAs) credential() *syscall.Credential {
	if r == nil {
		return nil
	}
	return &syscall.Credential{Uid: r.uid, Gid: r.gid, Groups: r.groups}
}

// layout says where the cluster and its socket live.
type layout struct {
	clusterDir string
	socketDir  string
	// tmpSocketDir is set when socketDir is the short dir under /tmp, which
	// Close removes again.
	tmpSocketDir bool
	// relocated is set when the cluster lives under /var/lib/agq because
	// the postgres user cannot reach the data dir.
	relocated bool
	// blockedAt is the directory the postgres user cannot search.
	blockedAt string
}

// chooseLayout picks <dataDir>/pg and <dataDir>/run where possible. dataDir
// must be absolute and exist.
func chooseLayout(dataDir string, r *runAs) (layout, error) {
	id := dataDirID(dataDir)
	l := layout{
		clusterDir: filepath.Join(dataDir, "pg"),
		socketDir:  filepath.Join(dataDir, "run"),
	}
	if r != nil {
		blocked, err := firstUnsearchable(dataDir, r)
		if err != nil {
			return layout{}, err
		}
		if blocked != "" {
			// Never chmod the user's directories; move the cluster instead.
			l.relocated, l.blockedAt = true, blocked
			l.clusterDir = filepath.Join(relocatedRoot, "pg-"+id)
			l.socketDir = "" // <dataDir>/run is unreachable too
		}
	}
	if l.socketDir == "" || len(filepath.Join(l.socketDir, socketName)) > maxSocketPath {
		l.socketDir = filepath.Join(shortSocketRoot, "agq-"+id)
		l.tmpSocketDir = true
	}
	return l, nil
}

// dataDirID names the per-data-dir fallback directories.
func dataDirID(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return hex.EncodeToString(sum[:])[:12]
}

// firstUnsearchable returns the first directory on the way to dir (dir
// included) that r has no search permission on, or "" if r can reach dir.
// ACLs are not consulted.
func firstUnsearchable(dir string, r *runAs) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("resolving data dir: %w", err)
	}
	var chain []string
	for p := real; ; p = filepath.Dir(p) {
		chain = append(chain, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	slices.Reverse(chain)
	for _, p := range chain {
		info, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("checking access to data dir: %w", err)
		}
		if !canSearch(info, r) {
			return p, nil
		}
	}
	return "", nil
}

func canSearch(info fs.FileInfo, r *runAs) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	perm := info.Mode().Perm()
	switch {
	case st.Uid == r.uid:
		return perm&0o100 != 0
	case st.Gid == r.gid || slices.Contains(r.groups, st.Gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// ensurePrivateDir creates dir (mode 0700) or checks an existing one, and
// hands it to r. It refuses a symlink or a directory owned by anyone but us
// or r, because a shared place such as /tmp lets others create it first.
func ensurePrivateDir(dir string, r *runAs) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("checking %s: %w", dir, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", dir)
	}
	owner := info.Sys().(*syscall.Stat_t).Uid
	if owner != uint32(os.Geteuid()) && (r == nil || owner != r.uid) {
		return fmt.Errorf("refusing to use %s: it is owned by uid %d", dir, owner)
	}
	if r != nil {
		if err := os.Chown(dir, int(r.uid), int(r.gid)); err != nil {
			return fmt.Errorf("handing %s to user %s: %w", dir, r.name, err)
		}
	}
	// Mkdir's mode is subject to umask, and an old dir may have another.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("setting mode of %s: %w", dir, err)
	}
	return nil
}
