//go:build !linux

package sched

import (
	"log/slog"
	"time"
)

// SetSlice reports ErrUnsupported: only Linux has per-thread slices.
func SetSlice(tid int, d time.Duration) error {
	if err := CheckSlice(d); err != nil {
		return err
	}
	return ErrUnsupported
}

// Slice reports ErrUnsupported: only Linux has per-thread slices.
func Slice(tid int) (time.Duration, error) { return 0, ErrUnsupported }

func (k *Keeper) sweep(seen map[int]struct{}, log *slog.Logger) (map[int]struct{}, error) {
	return nil, ErrUnsupported
}
