package testutil

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTB records a failure instead of ending the test; Fatalf must stop
// the caller, so it panics and the test recovers.
type fakeTB struct {
	testing.TB
	msg string
}

type fatal struct{}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(fatal{})
}

func run(fn func(tb testing.TB)) (msg string) {
	f := &fakeTB{}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				panic(r)
			}
			msg = f.msg
		}
	}()
	fn(f)
	return ""
}

func TestWaitForReturnsWhenTrue(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	msg := run(func(tb testing.TB) {
		WaitFor(tb, 5*time.Second, "three", func() (bool, error) {
			return n.Load() == 3, fmt.Errorf("n is %d", n.Load())
		})
	})
	if msg != "" {
		t.Fatal(msg)
	}
}

func TestWaitForTimesOut(t *testing.T) {
	start := time.Now()
	msg := run(func(tb testing.TB) {
		WaitFor(tb, 30*time.Millisecond, "never", func() (bool, error) {
			return false, errors.New("still 2")
		})
	})
	if want := "timed out after 30ms waiting for never: still 2"; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("gave up after %v, before the timeout", d)
	}
	msg = run(func(tb testing.TB) {
		WaitFor(tb, 0, "nothing", func() (bool, error) { return false, nil })
	})
	if !strings.HasSuffix(msg, "waiting for nothing") {
		t.Errorf("message %q", msg)
	}
}

func TestEventually(t *testing.T) {
	if !Eventually(time.Second, func() bool { return true }) {
		t.Error("a true condition did not hold")
	}
	if Eventually(20*time.Millisecond, func() bool { return false }) {
		t.Error("a false condition held")
	}
}

func TestPoll(t *testing.T) {
	var n atomic.Int32
	done := make(chan error, 1)
	go func() { // Poll runs where t.Fatal must not: off the test's goroutine
		done <- Poll(5*time.Second, "three", func() (bool, error) { return n.Add(1) == 3, nil })
	}()
	if err := <-done; err != nil {
		t.Errorf("Poll of a condition that comes: %v", err)
	}
	still := errors.New("still 2")
	err := Poll(20*time.Millisecond, "never", func() (bool, error) { return false, still })
	if want := "timed out after 20ms waiting for never: still 2"; err == nil || err.Error() != want || !errors.Is(err, still) {
		t.Errorf("Poll of a condition that never comes: %v, want %q wrapping cond's error", err, want)
	}
}
