package vswitch

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Pausing (a live handoff to another process, internal/daemon's
// handoff.go): Pause parks every worker before its next Read, so that
// frames wait in the kernel (a TAP's queue, a socket's buffer) rather than
// being read by this switch; Resume lets them read on. Writes are not
// blocked, but with every worker parked nothing is forwarded.

// Interrupter is an optional interface of a port queue whose blocked Read
// can be made to return port.ErrWoken without frames, for Pause, by a
// queue that does not want the idle trimmer's wake-ups (Waker), such as
// vxlan.Queue.
type Interrupter interface {
	Interrupt()
}

// Pender is an optional interface of a port queue that keeps frames of
// its own between Reads (vxlan.Queue: the rest of a receive batch). A
// worker does not park while its queue has frames pending: the next Read
// returns them without waiting, and parked they would be lost with the
// process that holds them. The reading goroutine calls it.
type Pender interface {
	Pending() bool
}

// ErrPauseTimeout is returned by Pause when a worker did not park in time.
var ErrPauseTimeout = errors.New("vswitch: pause: workers did not park in time")

// pauser is the switch's pause state.
type pauser struct {
	// gate is nil while running; while paused, a channel closed by
	// Resume, on which the parked workers wait.
	gate   chan struct{}
	parked int // workers waiting on gate
}

// Pause parks every worker before its next Read and returns once all are
// parked (a worker that was forwarding a batch finishes it first), or
// fails with ErrPauseTimeout after timeout, resumed. While paused the
// switch reads nothing; ports may still be added (their workers park at
// once) and removed. Pausing a paused switch is a no-op.
func (s *Switch) Pause(timeout time.Duration) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.pause.gate == nil {
		s.pause.gate = make(chan struct{})
		s.pausing.Store(true)
	}
	s.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for {
		m := *s.ports.Load()
		want := 0
		for _, e := range m {
			want += len(e.q)
			for _, q := range e.q {
				switch w := q.(type) {
				case Interrupter:
					w.Interrupt()
				case Waker:
					w.Wake()
				}
			}
		}
		s.mu.Lock()
		got := s.pause.parked
		s.mu.Unlock()
		if got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			s.Resume()
			return fmt.Errorf("%w: %d of %d parked after %v", ErrPauseTimeout, got, want, timeout)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// Resume lets the parked workers read again. Resuming a running switch is
// a no-op.
func (s *Switch) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pause.gate != nil {
		close(s.pause.gate)
		s.pause.gate = nil
		s.pausing.Store(false)
	}
}

// Paused reports whether the switch is paused.
func (s *Switch) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pause.gate != nil
}

// park waits, if the switch is paused, until it is resumed or ctx ends.
// Workers call it before each Read; running, it costs one lock-free load.
func (s *Switch) park(ctx context.Context, q Port) {
	if !s.pausing.Load() {
		return
	}
	if p, ok := q.(Pender); ok && p.Pending() {
		return
	}
	s.mu.Lock()
	g := s.pause.gate
	if g == nil {
		s.mu.Unlock()
		return
	}
	s.pause.parked++
	s.mu.Unlock()
	select {
	case <-g:
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.pause.parked--
	s.mu.Unlock()
}
