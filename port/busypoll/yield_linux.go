package busypoll

import "golang.org/x/sys/unix"

// yield lets the other threads runnable on this CPU run first
// (sched_yield(2)); a raw system call, so that Go's scheduler does not
// take the caller's P away for it.
func yield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
