package port

import (
	"fmt"
	"sync/atomic"
)

// BudgetFloor is how many receive buffers a port takes from a Budget even
// when it is spent: enough to read at all, and a small batch.
const BudgetFloor = 8

// Budget is an allowance of frame-buffer memory shared by the ports of a
// switch: the bound of what their receive buffers may hold resident at
// once, whatever number of pods is busy.
//
// A port's receive buffers are address space, and cost memory only once
// the kernel has written a frame into them. A port that reads into more
// buffers as it gets busier (a TAP's batch, package tap; an io_uring
// receive ring, package tap/uring) takes a buffer's bytes from the budget
// before it lets the kernel fill that buffer for the first time since its
// pages were given back, and returns them when it gives the pages back
// (ReleasePages). A port always gets its first BudgetFloor buffers
// (Force), so that no pod goes deaf when the budget is spent: the whole
// switch holds at most the budget plus that floor for each busy port. When
// the budget is spent, a busy port works with the buffers it has, and the
// frames it cannot take at once wait in the kernel's queue of its TAP,
// where they would wait anyway behind a slower reader.
//
// A nil *Budget is no bound: Take gives what is asked, the rest does
// nothing. All methods are safe for concurrent use and allocate nothing.
type Budget struct {
	total  int64
	free   atomic.Int64
	denied atomic.Uint64
}

// NewBudget returns a budget of total bytes.
func NewBudget(total int64) (*Budget, error) {
	if total <= 0 {
		return nil, fmt.Errorf("port: buffer budget of %d bytes: want more than 0", total)
	}
	b := &Budget{total: total}
	b.free.Store(total)
	return b, nil
}

// Take takes n bytes from b and reports whether it could: it takes all of
// them or nothing. A refusal is counted (Denied).
func (b *Budget) Take(n int64) bool {
	if b == nil {
		return true
	}
	for {
		free := b.free.Load()
		if free < n {
			b.denied.Add(1)
			return false
		}
		if b.free.CompareAndSwap(free, free-n) {
			return true
		}
	}
}

// Force takes n bytes from b even when that overdraws it: a port's floor,
// the buffers it needs to read at all.
func (b *Budget) Force(n int64) {
	if b != nil {
		b.free.Add(-n)
	}
}

// Give returns n bytes taken by Take or Force.
func (b *Budget) Give(n int64) {
	if b != nil {
		b.free.Add(n)
	}
}

// Total is the budget's size in bytes (0 for a nil budget).
func (b *Budget) Total() int64 {
	if b == nil {
		return 0
	}
	return b.total
}

// InUse is how many bytes are taken now; more than Total while the ports'
// floors overdraw the budget.
func (b *Budget) InUse() int64 {
	if b == nil {
		return 0
	}
	return b.total - b.free.Load()
}

// Denied counts the Takes refused since b was made.
func (b *Budget) Denied() uint64 {
	if b == nil {
		return 0
	}
	return b.denied.Load()
}
