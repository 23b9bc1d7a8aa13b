package vswitch

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/port"
)

// TestPauseParksAndResumes: while paused, frames stay in the ports (the
// kernel's queues, here the memPort's channel) and nothing is forwarded;
// after Resume they all are, none lost.
func TestPauseParksAndResumes(t *testing.T) {
	sw, _ := newTestSwitch(t, `table=0, priority=100, in_port=3, actions=output:4`)
	a := newMemPort("a")
	a.wake = make(chan struct{}, 1)
	b := newMemPort("b")
	b.wake = make(chan struct{}, 1)
	if err := sw.AddPort(3, wakePort{a}); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddPort(4, wakePort{b}); err != nil {
		t.Fatal(err)
	}
	a.send(udpFrame(3, 4))
	testutil.WaitFor(t, 5*time.Second, "the first frame", func() (bool, error) { return len(b.written()) == 1, nil })
	if err := sw.Pause(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !sw.Paused() {
		t.Fatal("not paused")
	}
	for range 5 {
		a.send(udpFrame(3, 4))
	}
	// A worker that had not parked would forward the frames within this
	// window (many worker iterations).
	time.Sleep(50 * time.Millisecond) // the window the test is about: nothing may be forwarded while paused
	if n := len(b.written()); n != 1 {
		t.Fatalf("%d frames forwarded while paused, want only the first", n)
	}
	if n := len(a.in); n != 5 {
		t.Fatalf("%d frames wait in the port, want 5", n)
	}
	sw.Resume()
	testutil.WaitFor(t, 5*time.Second, "the frames that waited", func() (bool, error) { return len(b.written()) == 6, nil })
}

// TestPauseTimeout: a worker that cannot be woken and gets no frame does
// not park; Pause gives up and resumes.
func TestPauseTimeout(t *testing.T) {
	sw, _ := newTestSwitch(t, `table=0, priority=100, in_port=3, actions=output:4`)
	stuck, out := &readCounter{memPort: newMemPort("stuck")}, newMemPort("out")
	out.wake = make(chan struct{}, 1)
	if err := sw.AddPort(3, stuck); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddPort(4, wakePort{out}); err != nil {
		t.Fatal(err)
	}
	stuck.send(udpFrame(3, 4))
	testutil.WaitFor(t, 5*time.Second, "a frame forwarded", func() (bool, error) { return len(out.written()) == 1, nil })
	// Past park and blocked in its second Read: this worker cannot park now.
	testutil.WaitFor(t, 5*time.Second, "the worker back in Read", func() (bool, error) {
		return stuck.reads.Load() == 2, fmt.Errorf("%d Reads", stuck.reads.Load())
	})
	if err := sw.Pause(30 * time.Millisecond); err == nil {
		t.Fatal("Pause of a worker that cannot be woken succeeded")
	}
	if sw.Paused() {
		t.Error("still paused after a failed Pause")
	}
}

// readCounter is a memPort that counts the Reads its worker has entered,
// so that a test knows when the worker is blocked in Read (past park).
type readCounter struct {
	*memPort
	reads atomic.Int32
}

func (p *readCounter) Read(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	p.reads.Add(1)
	return p.memPort.Read(bufs, meta, offset)
}
