package sched

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// SetSlice gives thread tid (0: the calling thread) a slice of d, keeping
// its policy and nice value, and reads it back. A thread that is not
// SCHED_NORMAL or SCHED_BATCH is left alone (no error: slices are for
// those). ErrUnsupported: the kernel accepted the request and ignored it.
func SetSlice(tid int, d time.Duration) error {
	if err := CheckSlice(d); err != nil {
		return err
	}
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return fmt.Errorf("sched: sched_getattr(%d): %w", tid, err)
	}
	if a.Policy != unix.SCHED_NORMAL && a.Policy != unix.SCHED_BATCH {
		return nil
	}
	a.Size = unix.SizeofSchedAttr
	a.Runtime = uint64(d)
	// Keep the utilisation clamps unless asked to change them.
	a.Flags &^= unix.SCHED_FLAG_UTIL_CLAMP_MIN | unix.SCHED_FLAG_UTIL_CLAMP_MAX
	if err := unix.SchedSetAttr(tid, a, 0); err != nil {
		return fmt.Errorf("sched: sched_setattr(%d): %w", tid, err)
	}
	got, err := Slice(tid)
	if err != nil {
		return err
	}
	if got != d {
		return ErrUnsupported
	}
	return nil
}

// Slice returns thread tid's time slice (0: the calling thread); 0 on a
// kernel without per-thread slices or for a thread that is not SCHED_NORMAL
// or SCHED_BATCH.
func Slice(tid int) (time.Duration, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, fmt.Errorf("sched: sched_getattr(%d): %w", tid, err)
	}
	if a.Policy != unix.SCHED_NORMAL && a.Policy != unix.SCHED_BATCH {
		return 0, nil
	}
	return time.Duration(a.Runtime), nil
}

// sweep sets the slice on every thread of the process not in seen and
// returns the threads there are now. The first sweep (seen nil) fails if
// the kernel has no per-thread slice or refuses it.
func (k *Keeper) sweep(seen map[int]struct{}, log *slog.Logger) (map[int]struct{}, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("sched: %w", err)
	}
	now := make(map[int]struct{}, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		now[tid] = struct{}{}
		if _, ok := seen[tid]; ok {
			continue
		}
		switch err := SetSlice(tid, k.slice); {
		case err == nil:
			k.applied.Add(1)
		case errors.Is(err, unix.ESRCH):
			// The thread ended meanwhile.
		case seen == nil:
			return nil, err
		default:
			if k.failed.Add(1) == 1 {
				log.Warn("a thread refused its scheduler slice", "tid", tid, "err", err)
			}
		}
	}
	return now, nil
}
