//go:build unix && !linux

package pipeline

import "syscall"

// sysProcAttr puts each task in a process group of its own, so that a
// timeout or a cancellation reaches everything the task started.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
