//go:build !linux

package sched

import (
	"time"
)

// SetSlice reports ErrUnsupported: only Linux has per-thread slices.
func SetSlice(tid int, d time.Duration) error {
	if err := CheckSlice(d); err != nil {
		return err
	}
	return ErrUnsupported
}

// ResetSlice reports ErrUnsupported: only Linux has per-thread slices.
func ResetSlice(tid int) error { return ErrUnsupported }

// Slice reports ErrUnsupported: only Linux has per-thread slices.
func Slice(tid int) (time.Duration, error) { return 0, ErrUnsupported }

func probe(time.Duration) error { return ErrUnsupported }

func (k *Keeper) sweep(map[int]struct{}) (map[int]struct{}, error) { return nil, ErrUnsupported }

func newLoad() load {
	return load{name: "nothing", sample: func() (float64, error) { return 0, ErrUnsupported }}
}
