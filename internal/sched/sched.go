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

// When a Keeper without Config.Always gives the short slice (from an
// interval with the On value or more) and takes it back (from one under
// Off). It reads the kernel's CPU pressure (PSI, /proc/pressure/cpu, line
// "some": the share of time in which at least one runnable task waited for
// a CPU) where the kernel has it, and the machine's busy share of CPU time
// (/proc/stat) where it does not. On the 2-vCPU lab a bulk TCP stream
// holds the pressure at ≈ 0.85 and the CPUs ≈ 85 % busy; a thousand round
// trips a second (each waking four gvs threads) ≈ 0.25–0.35 and ≈ 55–70 %.
const (
	PressureOn  = 0.5
	PressureOff = 0.3
	BusyOn      = 0.85
	BusyOff     = 0.65
)

// DefaultInterval is Config.Interval's default.
const DefaultInterval = 200 * time.Millisecond

// ErrUnsupported is returned where the kernel has no per-thread slice.
var ErrUnsupported = errors.New("sched: this kernel has no per-thread time slice (Linux 6.12 or later)")

// CheckSlice refuses a slice the kernel would clamp.
func CheckSlice(d time.Duration) error {
	if d < MinSlice || d > MaxSlice {
		return fmt.Errorf("sched: slice %v outside [%v, %v]", d, MinSlice, MaxSlice)
	}
	return nil
}

// Config is what a Keeper does.
type Config struct {
	// Slice is the short slice, MinSlice to MaxSlice.
	Slice time.Duration
	// Always gives the threads Slice whatever the load. Without it they
	// have Slice only while tasks wait for the machine's CPUs (PressureOn
	// and PressureOff, or BusyOn and BusyOff without PSI). When CPUs are
	// free a woken thread gets one anyway, and a short slice only makes
	// it preempt the processes it serves (our reading of why the idle
	// round trip got slower with short slices always on).
	Always bool
	// Interval is how often the Keeper samples the CPUs and looks for
	// new threads (0: DefaultInterval).
	Interval time.Duration
	// Log gets the Keeper's changes at debug level and its failures.
	Log *slog.Logger
}

// A Keeper gives every thread of the process the short slice, or the
// kernel's default, as Config says: the threads there are when it starts,
// those it finds at each interval, and all of them when it changes its mind.
type Keeper struct {
	cfg      Config
	load     load
	short    atomic.Bool
	applied  atomic.Int64
	failed   atomic.Int64
	switches atomic.Int64
	done     chan struct{}
}

// Keep starts a Keeper that runs until ctx ends. It fails, setting
// nothing, if the slice is out of range or the kernel has no per-thread
// slice (ErrUnsupported). Threads whose policy is not SCHED_NORMAL or
// SCHED_BATCH (an operator's real-time thread) are left as they are, and
// so is every thread's nice value.
func Keep(ctx context.Context, cfg Config) (*Keeper, error) {
	return keep(ctx, cfg, newLoad())
}

// load is what a Keeper follows: sample reports the value since its last
// call; on and off are its thresholds.
type load struct {
	name    string
	on, off float64
	sample  func() (float64, error)
}

func keep(ctx context.Context, cfg Config, ld load) (*Keeper, error) {
	if err := CheckSlice(cfg.Slice); err != nil {
		return nil, err
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("sched: interval %v", cfg.Interval)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := probe(cfg.Slice); err != nil {
		return nil, err
	}
	k := &Keeper{cfg: cfg, load: ld, done: make(chan struct{})}
	if !cfg.Always {
		if _, err := ld.sample(); err != nil {
			return nil, err
		}
	}
	k.short.Store(cfg.Always)
	seen, err := k.sweep(nil)
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(k.done)
		t := time.NewTicker(cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !cfg.Always && k.decide() {
				seen = nil // every thread changes
			}
			if s, err := k.sweep(seen); err == nil {
				seen = s
			}
		}
	}()
	return k, nil
}

// decide samples the load and reports whether the threads' slice changes.
func (k *Keeper) decide() bool {
	f, err := k.load.sample()
	if err != nil {
		return false
	}
	short := k.short.Load()
	switch {
	case !short && f >= k.load.on:
		short = true
	case short && f < k.load.off:
		short = false
	default:
		return false
	}
	k.short.Store(short)
	k.switches.Add(1)
	k.cfg.Log.Debug("thread time slices", "short", short, k.load.name, f)
	return true
}

// Short reports whether the threads have the short slice now.
func (k *Keeper) Short() bool { return k.short.Load() }

// Switches is how many times the Keeper changed the threads' slice.
func (k *Keeper) Switches() int64 { return k.switches.Load() }

// Applied is how many times a thread got a slice set.
func (k *Keeper) Applied() int64 { return k.applied.Load() }

// Failed is how many times a thread refused it (other than by ending
// first).
func (k *Keeper) Failed() int64 { return k.failed.Load() }

// Follows says what the Keeper follows and when it gives the short slice,
// for people ("CPU pressure ≥ 0.50"); "" with Config.Always.
func (k *Keeper) Follows() string {
	if k.cfg.Always {
		return ""
	}
	return fmt.Sprintf("%s ≥ %.2f", k.load.name, k.load.on)
}

// Config is the Keeper's configuration, defaults filled in.
func (k *Keeper) Config() Config { return k.cfg }

// Done is closed when the Keeper has stopped.
func (k *Keeper) Done() <-chan struct{} { return k.done }
