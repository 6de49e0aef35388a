package main

import "syscall"

// protectSecrets makes agw non-dumpable: its /proc/<pid>/environ and
// memory become unreadable to other processes of the same user, so a job
// cannot read AGQ_KEY out of its parent. (The command line stays readable;
// hence the advice to pass the key through the environment.) Tools get a
// dumpable process again when they exec.
func protectSecrets() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
