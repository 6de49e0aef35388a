package pipeline

import "syscall"

// sysProcAttr puts each task in a process group of its own, so that a
// timeout or a cancellation reaches everything the task started, and has the
// kernel kill the task if agw itself dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
