package stats

import "syscall"

// diskAvailable is the space an unprivileged user may still use on dir's
// file system, in bytes.
func diskAvailable(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
