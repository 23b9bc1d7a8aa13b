package sched

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCheckSlice(t *testing.T) {
	for _, d := range []time.Duration{0, 99 * time.Microsecond, 101 * time.Millisecond, -time.Millisecond} {
		if err := CheckSlice(d); err == nil {
			t.Errorf("CheckSlice(%v) accepted a slice the kernel would clamp", d)
		}
		if _, err := Keep(context.Background(), d, time.Second, nil); err == nil {
			t.Errorf("Keep(%v) started", d)
		}
	}
	for _, d := range []time.Duration{MinSlice, time.Millisecond, MaxSlice} {
		if err := CheckSlice(d); err != nil {
			t.Errorf("CheckSlice(%v): %v", d, err)
		}
	}
}

// TestKeepNewThreads checks that the threads there are and the threads Go
// starts afterwards all get the slice.
func TestKeepNewThreads(t *testing.T) {
	const slice = 300 * time.Microsecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k, err := Keep(ctx, slice, 10*time.Millisecond, nil)
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if k.Applied() == 0 {
		t.Fatal("no thread got the slice")
	}
	if got, err := Slice(0); err != nil || got != slice {
		t.Fatalf("this thread's slice %v (%v), want %v", got, err, slice)
	}

	initial := k.Applied()
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
	for range n {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			deadline := time.Now().Add(5 * time.Second)
			for {
				got, err := Slice(0)
				if err == nil && got == slice {
					break
				}
				if time.Now().After(deadline) {
					errs <- errors.New("a new thread kept its slice " + got.String())
					return
				}
				_ = unix.Nanosleep(&unix.Timespec{Nsec: 2e6}, nil)
			}
			<-release
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if k.Applied() <= initial {
		t.Errorf("no new thread got the slice (%d before, %d after)", initial, k.Applied())
	}
	cancel()
	select {
	case <-k.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the Keeper did not stop with its context")
	}
	if k.Failed() != 0 {
		t.Errorf("%d threads refused the slice", k.Failed())
	}
}

// TestSetSliceKeepsNice checks that a thread's nice value survives.
func TestSetSliceKeepsNice(t *testing.T) {
	done := make(chan error)
	go func() {
		// Never unlocked: the thread ends with the goroutine, nice value
		// and all.
		runtime.LockOSThread()
		if err := unix.Setpriority(unix.PRIO_PROCESS, 0, 3); err != nil {
			done <- err
			return
		}
		if err := SetSlice(0, 2*time.Millisecond); err != nil {
			done <- err
			return
		}
		// getpriority(2) returns 20 − nice.
		if p, err := unix.Getpriority(unix.PRIO_PROCESS, 0); err != nil || 20-p != 3 {
			done <- fmt.Errorf("nice %d after SetSlice (%v), want 3", 20-p, err)
			return
		}
		if got, err := Slice(0); err != nil || got != 2*time.Millisecond {
			done <- fmt.Errorf("slice %v (%v)", got, err)
			return
		}
		done <- nil
	}()
	if err := <-done; errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
}
