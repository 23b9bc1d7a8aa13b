package tap

import (
	"runtime"
	"sync/atomic"
)

// fdGuard keeps a descriptor open while it is in use: acquire before each
// use, release after; close refuses new uses and waits for those in
// progress, after which the descriptor may be closed without another
// goroutine writing to whatever file reuses its number. The zero value is
// open.
type fdGuard struct {
	n atomic.Int64 // uses in progress, plus guardClosed once closed
}

const guardClosed = 1 << 40

// acquire reports whether the descriptor may be used (not closed); if so,
// the caller must release it.
func (g *fdGuard) acquire() bool {
	if g.n.Add(1) >= guardClosed {
		g.n.Add(-1)
		return false
	}
	return true
}

// release ends a use that acquire allowed.
func (g *fdGuard) release() { g.n.Add(-1) }

// close refuses further uses and returns once none is in progress. Only
// the first call may close the descriptor afterwards (the caller makes
// sure, as Device.Close does with its closed flag).
func (g *fdGuard) close() {
	g.n.Add(guardClosed)
	for g.n.Load() != guardClosed {
		runtime.Gosched() // a use in progress is one system call long
	}
}
