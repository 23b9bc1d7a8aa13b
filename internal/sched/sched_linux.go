package sched

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
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
	return setRuntime(tid, uint64(d))
}

// ResetSlice gives thread tid (0: the calling thread) the kernel's default
// slice back.
func ResetSlice(tid int) error { return setRuntime(tid, 0) }

// setRuntime sets sched_runtime, which is the slice of a fair thread (0:
// the default).
func setRuntime(tid int, ns uint64) error {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return fmt.Errorf("sched: sched_getattr(%d): %w", tid, err)
	}
	if a.Policy != unix.SCHED_NORMAL && a.Policy != unix.SCHED_BATCH {
		return nil
	}
	a.Size = unix.SizeofSchedAttr
	a.Runtime = ns
	// Leave the utilisation clamps as they are.
	a.Flags &^= unix.SCHED_FLAG_UTIL_CLAMP_MIN | unix.SCHED_FLAG_UTIL_CLAMP_MAX
	if err := unix.SchedSetAttr(tid, a, 0); err != nil {
		return fmt.Errorf("sched: sched_setattr(%d): %w", tid, err)
	}
	if ns == 0 {
		return nil
	}
	got, err := Slice(tid)
	if err != nil {
		return err
	}
	if got != time.Duration(ns) {
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

// probe sets the slice on a throwaway thread, which ends with it.
func probe(d time.Duration) error {
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends here
		done <- SetSlice(0, d)
	}()
	return <-done
}

// sweep gives every thread of the process not in seen the slice the
// Keeper wants now and returns the threads there are.
func (k *Keeper) sweep(seen map[int]struct{}) (map[int]struct{}, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("sched: %w", err)
	}
	var ns uint64
	if k.short.Load() {
		ns = uint64(k.cfg.Slice)
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
		switch err := setRuntime(tid, ns); {
		case err == nil:
			k.applied.Add(1)
		case errors.Is(err, unix.ESRCH):
			// The thread ended meanwhile.
		default:
			if k.failed.Add(1) == 1 {
				k.cfg.Log.Warn("a thread refused its scheduler slice", "tid", tid, "err", err)
			}
		}
	}
	return now, nil
}

// newLoad follows the CPU pressure where the kernel reports it, else the
// CPUs' busy share.
func newLoad() load {
	p := newPressureSampler()
	if _, err := p(); err == nil {
		return load{name: "CPU pressure", on: PressureOn, off: PressureOff, sample: p}
	}
	return load{name: "CPU busy share", on: BusyOn, off: BusyOff, sample: newCPUSampler()}
}

// newPressureSampler returns a function that reports the share of wall
// time since its last call in which some runnable task waited for a CPU
// (the "some" line of /proc/pressure/cpu: its total is in µs).
func newPressureSampler() func() (float64, error) {
	var last uint64
	var at time.Time
	buf := make([]byte, 256)
	return func() (float64, error) {
		head, err := readHead("/proc/pressure/cpu", buf)
		if err != nil {
			return 0, err
		}
		total, err := parsePressure(head)
		if err != nil {
			return 0, err
		}
		now := time.Now()
		prev, dt := last, now.Sub(at)
		first := at.IsZero()
		last, at = total, now
		if first || dt <= 0 || total < prev {
			return 0, nil
		}
		return min(float64(total-prev)/float64(dt.Microseconds()), 1), nil
	}
}

// parsePressure returns the total (µs) of the "some" line of a PSI file:
// "some avg10=0.00 avg60=0.00 avg300=0.00 total=0".
func parsePressure(b []byte) (uint64, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := bytes.Fields(line)
	if len(f) != 5 || string(f[0]) != "some" || !bytes.HasPrefix(f[4], []byte("total=")) {
		return 0, fmt.Errorf("sched: CPU pressure %q, want the some line", line)
	}
	v, err := strconv.ParseUint(string(f[4][len("total="):]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sched: CPU pressure %q: %w", line, err)
	}
	return v, nil
}

// newCPUSampler returns a function that reports the fraction of the
// machine's CPU time that was busy (not idle, waiting for I/O or stolen by
// the hypervisor) since its last call, from the first line of /proc/stat.
func newCPUSampler() func() (float64, error) {
	var last [2]uint64 // busy, total
	buf := make([]byte, 512)
	return func() (float64, error) {
		busy, total, err := readCPU(buf)
		if err != nil {
			return 0, err
		}
		db, dt := busy-last[0], total-last[1]
		last = [2]uint64{busy, total}
		if dt == 0 || db > dt {
			return 0, nil
		}
		return float64(db) / float64(dt), nil
	}
}

// readCPU reads the machine's busy and total CPU time in ticks from the
// "cpu" line of /proc/stat: user nice system idle iowait irq softirq steal
// (guest time is counted in user already).
func readCPU(buf []byte) (busy, total uint64, err error) {
	head, err := readHead("/proc/stat", buf)
	if err != nil {
		return 0, 0, err
	}
	return parseCPU(head)
}

// readHead reads the start of a /proc file, up to len(buf) bytes, into buf.
func readHead(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sched: %w", err)
	}
	n, err := f.Read(buf)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("sched: %s: %w", path, err)
	}
	return buf[:n], nil
}

func parseCPU(b []byte) (busy, total uint64, err error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, 0, fmt.Errorf("sched: /proc/stat starts %q, want the cpu line", line)
	}
	for i, v := range f[1:9] {
		x, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("sched: /proc/stat: %q: %w", line, err)
		}
		total += x
		if i != 3 && i != 4 && i != 7 { // idle, iowait, steal
			busy += x
		}
	}
	return busy, total, nil
}
