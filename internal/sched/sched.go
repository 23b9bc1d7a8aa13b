package sched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// The slices the kernel accepts (sched_attr.sched_runtime of a
// SCHED_NORMAL or SCHED_BATCH thread, linux/kernel/sched/syscalls.c).
const (
	MinSlice = 100 * time.Microsecond
	MaxSlice = 100 * time.Millisecond
)

// ErrUnsupported is returned where the kernel has no per-thread slice.
var ErrUnsupported = errors.New("sched: this kernel has no per-thread time slice (Linux 6.12 or later)")

// CheckSlice refuses a slice the kernel would clamp.
func CheckSlice(d time.Duration) error {
	if d < MinSlice || d > MaxSlice {
		return fmt.Errorf("sched: slice %v outside [%v, %v]", d, MinSlice, MaxSlice)
	}
	return nil
}

// A Keeper gives every thread of the process a slice: the threads there
// are when it starts, and each new one within an interval.
type Keeper struct {
	slice   time.Duration
	applied atomic.Int64
	failed  atomic.Int64
	done    chan struct{}
}

// Keep sets slice on every thread of the process now and then looks for new
// threads every interval until ctx ends. It fails, setting nothing, if slice
// is out of range or the kernel has no per-thread slice (ErrUnsupported).
// Threads whose policy is not SCHED_NORMAL or SCHED_BATCH (an operator's
// real-time thread) are left as they are.
func Keep(ctx context.Context, slice, interval time.Duration, log *slog.Logger) (*Keeper, error) {
	if err := CheckSlice(slice); err != nil {
		return nil, err
	}
	if interval <= 0 {
		return nil, fmt.Errorf("sched: interval %v", interval)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Keeper{slice: slice, done: make(chan struct{})}
	seen, err := k.sweep(nil, log)
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(k.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if s, err := k.sweep(seen, log); err == nil {
				seen = s
			}
		}
	}()
	return k, nil
}

// Applied is how many threads got the slice so far.
func (k *Keeper) Applied() int64 { return k.applied.Load() }

// Failed is how many threads refused it (other than by ending first).
func (k *Keeper) Failed() int64 { return k.failed.Load() }

// Slice is the slice the Keeper gives.
func (k *Keeper) Slice() time.Duration { return k.slice }

// Done is closed when the Keeper has stopped looking for threads.
func (k *Keeper) Done() <-chan struct{} { return k.done }
