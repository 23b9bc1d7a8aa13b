package sched

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/internal/testutil"
)

func TestCheckSlice(t *testing.T) {
	for _, d := range []time.Duration{0, 99 * time.Microsecond, 101 * time.Millisecond, -time.Millisecond} {
		if err := CheckSlice(d); err == nil {
			t.Errorf("CheckSlice(%v) accepted a slice the kernel would clamp", d)
		}
		if _, err := Keep(context.Background(), Config{Slice: d, Always: true}); err == nil {
			t.Errorf("Keep(%v) started", d)
		}
	}
	for _, d := range []time.Duration{MinSlice, time.Millisecond, MaxSlice} {
		if err := CheckSlice(d); err != nil {
			t.Errorf("CheckSlice(%v): %v", d, err)
		}
	}
}

// onThread runs f on a thread of its own, which ends with it.
func onThread(f func() error) error {
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with f
		done <- f()
	}()
	return <-done
}

// kernelSlice is the kernel's default slice, or skips the test on a kernel
// without per-thread slices.
func kernelSlice(t *testing.T) time.Duration {
	t.Helper()
	var d time.Duration
	err := onThread(func() error {
		if err := ResetSlice(0); err != nil {
			return err
		}
		var err error
		d, err = Slice(0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if d == 0 {
		t.Skip(ErrUnsupported)
	}
	return d
}

// threadSlices waits up to 5 s for every thread of the process to have
// slice want and reports those that do not.
func threadSlices(t *testing.T, want time.Duration) {
	t.Helper()
	var wrong []string
	if testutil.Eventually(5*time.Second, func() bool {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		wrong = wrong[:0]
		for _, e := range ents {
			tid, _ := strconv.Atoi(e.Name())
			if d, err := Slice(tid); err == nil && d != want {
				wrong = append(wrong, fmt.Sprintf("%d: %v", tid, d))
			}
		}
		return len(wrong) == 0
	}) {
		return
	}
	t.Errorf("threads without the slice %v: %v", want, wrong)
}

// TestKeepAlways checks that the threads there are and the threads Go
// starts afterwards all get the slice.
func TestKeepAlways(t *testing.T) {
	kernelSlice(t)
	const slice = 300 * time.Microsecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k, err := Keep(ctx, Config{Slice: slice, Always: true, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if k.Applied() == 0 || !k.Short() {
		t.Fatalf("no thread got the slice (short %v)", k.Short())
	}
	if got, err := Slice(0); err != nil || got != slice {
		t.Fatalf("this thread's slice %v (%v), want %v", got, err, slice)
	}

	// Locked goroutines each hold a thread; more of them than there are
	// threads makes Go start new ones.
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := len(ents) + 2
	var wg sync.WaitGroup
	errs := make(chan error, n)
	release := make(chan struct{})
	var held atomic.Int32 // goroutines that hold their thread (or gave up)
	for range n {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			err := testutil.Poll(5*time.Second, "the Keeper to give a new thread the slice", func() (bool, error) {
				got, err := Slice(0)
				return err == nil && got == slice, fmt.Errorf("it has %v (%v)", got, err)
			})
			held.Add(1)
			if err != nil {
				errs <- err
				return
			}
			<-release
		})
	}
	// All n at once, each on a thread of its own, before any is released.
	testutil.WaitFor(t, 10*time.Second, "every goroutine on a thread of its own", func() (bool, error) {
		return held.Load() == int32(n), fmt.Errorf("%d of %d", held.Load(), n)
	})
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	cancel()
	select {
	case <-k.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the Keeper did not stop with its context")
	}
	if k.Failed() != 0 || k.Switches() != 0 {
		t.Errorf("%d threads refused the slice; %d switches with Always", k.Failed(), k.Switches())
	}
}

// TestKeepFollowsLoad drives a Keeper with a made-up load: short slices
// from its on value, kept down to its off value, the default below.
func TestKeepFollowsLoad(t *testing.T) {
	def := kernelSlice(t)
	const slice = 200 * time.Microsecond
	var cur atomic.Uint64
	set := func(f float64) { cur.Store(math.Float64bits(f)) }
	var samples atomic.Int64 // the Keeper's samplings so far
	ld := load{name: "made-up load", on: 0.6, off: 0.2, sample: func() (float64, error) {
		samples.Add(1)
		return math.Float64frombits(cur.Load()), nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k, err := keep(ctx, Config{Slice: slice, Interval: 5 * time.Millisecond}, ld)
	if err != nil {
		t.Fatal(err)
	}
	if k.Short() {
		t.Fatal("short slices on an idle machine")
	}
	threadSlices(t, def)

	if k.Follows() != "made-up load ≥ 0.60" {
		t.Errorf("Follows %q", k.Follows())
	}
	set(ld.on)
	threadSlices(t, slice)
	if !k.Short() || k.Switches() != 1 {
		t.Fatalf("busy: short %v after %d switches", k.Short(), k.Switches())
	}
	set((ld.on + ld.off) / 2) // between the two: no change
	from := samples.Load()
	testutil.WaitFor(t, 5*time.Second, "five samplings of the load between on and off", func() (bool, error) {
		return samples.Load() >= from+5, nil
	})
	if !k.Short() || k.Switches() != 1 {
		t.Fatalf("half busy: short %v after %d switches", k.Short(), k.Switches())
	}
	set(ld.off / 2)
	threadSlices(t, def)
	if k.Short() || k.Switches() != 2 {
		t.Fatalf("idle again: short %v after %d switches", k.Short(), k.Switches())
	}
	if k.Failed() != 0 {
		t.Errorf("%d threads refused", k.Failed())
	}
}

// TestSetSliceKeepsNice checks that a thread's nice value survives.
func TestSetSliceKeepsNice(t *testing.T) {
	def := kernelSlice(t)
	err := onThread(func() error {
		if err := unix.Setpriority(unix.PRIO_PROCESS, 0, 3); err != nil {
			return err
		}
		if err := SetSlice(0, 2*time.Millisecond); err != nil {
			return err
		}
		// getpriority(2) returns 20 − nice.
		if p, err := unix.Getpriority(unix.PRIO_PROCESS, 0); err != nil || 20-p != 3 {
			return fmt.Errorf("nice %d after SetSlice (%v), want 3", 20-p, err)
		}
		if got, err := Slice(0); err != nil || got != 2*time.Millisecond {
			return fmt.Errorf("slice %v (%v)", got, err)
		}
		if err := ResetSlice(0); err != nil {
			return err
		}
		if got, err := Slice(0); err != nil || got != def {
			return fmt.Errorf("slice %v after ResetSlice (%v), want %v", got, err, def)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestParseCPU(t *testing.T) {
	busy, total, err := parseCPU([]byte("cpu  100 5 50 800 20 3 2 1 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"))
	if err != nil || busy != 160 || total != 981 {
		t.Errorf("parseCPU: busy %d total %d (%v), want 160 981", busy, total, err)
	}
	for _, s := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 3 4 5 6 7 x\n", "intr 1 2 3 4 5 6 7 8 9\n"} {
		if _, _, err := parseCPU([]byte(s)); err == nil {
			t.Errorf("parseCPU(%q) accepted", s)
		}
	}
	sample := newCPUSampler()
	if _, err := sample(); err != nil {
		t.Fatal(err)
	}
	if f, err := sample(); err != nil || f < 0 || f > 1 {
		t.Errorf("busy fraction %v (%v)", f, err)
	}
}

func TestParsePressure(t *testing.T) {
	v, err := parsePressure([]byte("some avg10=36.61 avg60=50.25 avg300=37.29 total=11662249007\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	if err != nil || v != 11662249007 {
		t.Errorf("parsePressure: %d (%v)", v, err)
	}
	for _, s := range []string{"", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "some avg10=0.00 avg60=0.00 avg300=0.00 total=x\n", "some avg10=0.00 avg60=0.00 avg300=0.00\n", "some a b c sum=1\n"} {
		if _, err := parsePressure([]byte(s)); err == nil {
			t.Errorf("parsePressure(%q) accepted", s)
		}
	}
	// The sampler: a share of wall time, on a kernel with PSI.
	sample := newPressureSampler()
	if _, err := sample(); err != nil {
		t.Skipf("no CPU pressure here: %v", err)
	}
	time.Sleep(20 * time.Millisecond) // the sampling interval the test is about
	if f, err := sample(); err != nil || f < 0 || f > 1 {
		t.Errorf("pressure %v (%v)", f, err)
	}
	if ld := newLoad(); ld.name != "CPU pressure" || ld.on != PressureOn || ld.off != PressureOff {
		t.Errorf("with PSI the Keeper follows %q (%v, %v)", ld.name, ld.on, ld.off)
	}
}

func FuzzParsePressure(f *testing.F) {
	f.Add([]byte("some avg10=36.61 avg60=50.25 avg300=37.29 total=11662249007\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := parsePressure(b); err != nil && v != 0 {
			t.Errorf("an error with value %d", v)
		}
	})
}

func FuzzParseCPU(f *testing.F) {
	f.Add([]byte("cpu  100 5 50 800 20 3 2 1 7 0\n"))
	f.Add([]byte("cpu 18446744073709551615 1 1 1 1 1 1 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		busy, total, err := parseCPU(b)
		if err != nil && (busy != 0 || total != 0) {
			t.Errorf("an error with values %d %d", busy, total)
		}
	})
}
