package iofloor

import (
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Meter measures a benchmark's frames: wall time, the process's CPU time
// (user + system, every thread: getrusage(RUSAGE_SELF)) and its context
// switches (voluntary + involuntary). The kernel work of the loop runs in
// the benchmark's own system calls, so it is in the CPU time.
type Meter struct {
	t0  time.Time
	ru0 unix.Rusage
}

// StartMeter starts measuring.
func StartMeter() Meter {
	var m Meter
	_ = unix.Getrusage(unix.RUSAGE_SELF, &m.ru0)
	m.t0 = time.Now()
	return m
}

// Report adds frames/s, cpu-ns/frame and ctxsw/frame for frames moved since
// StartMeter, and syscalls/frame when syscalls (the mechanism's own system
// calls, counted by the benchmark) is not negative.
func (m Meter) Report(b *testing.B, frames int, syscalls int) {
	wall := time.Since(m.t0)
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	if frames <= 0 {
		return
	}
	cpu := tvNs(ru.Utime) + tvNs(ru.Stime) - tvNs(m.ru0.Utime) - tvNs(m.ru0.Stime)
	ctx := ru.Nvcsw + ru.Nivcsw - m.ru0.Nvcsw - m.ru0.Nivcsw
	f := float64(frames)
	b.ReportMetric(f/wall.Seconds(), "frames/s")
	b.ReportMetric(float64(cpu)/f, "cpu-ns/frame")
	b.ReportMetric(float64(ctx)/f, "ctxsw/frame")
	if syscalls >= 0 {
		b.ReportMetric(float64(syscalls)/f, "syscalls/frame")
	}
}

func tvNs(t unix.Timeval) int64 { return t.Sec*1e9 + t.Usec*1e3 }

// Latencies collects round-trip times.
type Latencies struct {
	d []time.Duration
}

// Add records one round trip.
func (l *Latencies) Add(d time.Duration) { l.d = append(l.d, d) }

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100), 0
// without samples.
func (l *Latencies) Percentile(p float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Report adds p50-ns and p99-ns to b.
func (l *Latencies) Report(b *testing.B) {
	b.ReportMetric(float64(l.Percentile(50).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(l.Percentile(99).Nanoseconds()), "p99-ns")
}
