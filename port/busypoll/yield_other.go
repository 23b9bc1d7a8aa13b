//go:build !linux

package busypoll

import "runtime"

// yield lets other goroutines run (no portable sched_yield).
func yield() { runtime.Gosched() }
