package vswitch

// Packet capture (gvsctl capture, docs/operations.md "Packet capture"). The way of a captured frame:
//
//  1. StartCapture publishes a *Capture in the port's entry (an
//     atomic.Pointer). Workers load that pointer once per batch: with no
//     capture running the whole cost is one atomic load per batch and per
//     destination, and nothing is allocated.
//  2. Frames are captured where they enter the switch (rx: right after
//     the port's Read, before the pipeline may rewrite them) and where
//     they leave it (tx: just before the port's Write). Directions are the
//     switch's, as in the port counters: rx is what the port delivered to
//     the switch (what a pod sent), tx is what the switch gave the port.
//  3. Each frame is copied, truncated at the snap length, into a buffer
//     from the capture's own free list and queued on a bounded channel.
//     Nothing ever waits: when the queue or the buffers are exhausted the
//     frame is counted as dropped. GSO super-frames are captured whole,
//     without their virtio_net_hdr, as tcpdump on a TAP shows them.
//  4. On a port that is a Framer (the tunnel) the frame is put behind the
//     outer headers the port says it has on the wire (for vxlan0: IPv4
//     between the node and the remote one, UDP between the ports the
//     datagram used, VXLAN with the frame's VNI), so that the capture reads
//     like one taken on the underlay. The port writes them into the
//     worker's scratch space, and they are copied with the frame.
//  5. The reader (Next) drains the queue and returns buffers with Release.
//     Stop, RemovePort and Close end the capture; Next then returns the
//     frames still queued and after them ErrCaptureStopped.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gvswitch/gvs/port"
)

// Capture errors.
var (
	// ErrCaptureBusy: the port already has a capture running.
	ErrCaptureBusy = errors.New("vswitch: a capture is already running on this port")
	// ErrTooManyCaptures: MaxCaptures captures are running on the switch.
	ErrTooManyCaptures = errors.New("vswitch: too many captures running")
	// ErrCaptureStopped: the capture ended and every queued frame was read.
	ErrCaptureStopped = errors.New("vswitch: capture stopped")
)

// CaptureDir selects the frames a capture takes, seen from the switch.
type CaptureDir uint8

// Capture directions.
const (
	// CaptureRx takes the frames the switch reads from the port.
	CaptureRx CaptureDir = 1 << iota
	// CaptureTx takes the frames the switch writes to the port.
	CaptureTx
	// CaptureBoth takes both.
	CaptureBoth = CaptureRx | CaptureTx
)

// String returns "in", "out" or "both".
func (d CaptureDir) String() string {
	switch d {
	case CaptureRx:
		return "in"
	case CaptureTx:
		return "out"
	case CaptureBoth:
		return "both"
	}
	return fmt.Sprintf("CaptureDir(%d)", uint8(d))
}

// ParseCaptureDir parses "in" (or "rx"), "out" (or "tx") and "both" (or "").
func ParseCaptureDir(s string) (CaptureDir, error) {
	switch s {
	case "in", "rx":
		return CaptureRx, nil
	case "out", "tx":
		return CaptureTx, nil
	case "both", "":
		return CaptureBoth, nil
	}
	return 0, fmt.Errorf("vswitch: capture direction %q: want in, out or both", s)
}

// Capture defaults and limits.
const (
	// DefaultSnaplen is the default snap length: tcpdump's, and larger
	// than any super-frame (packet.MaxSuperFrame) plus the outer headers
	// of a tunnel (MaxWireHeader), so nothing is truncated by default.
	DefaultSnaplen = 262144
	// MinSnaplen is the smallest snap length accepted: vxlan0's outer
	// headers and an inner Ethernet header fit.
	MinSnaplen = 64
	// DefaultCaptureQueue is the default number of frames in flight
	// between the workers and the reader.
	DefaultCaptureQueue = 4096
	// MaxCaptures is the most captures one switch runs at a time. Each
	// may hold its queue of buffers (up to ≈ 40 MiB with the defaults), so
	// the total is bounded, whatever the number of ports.
	MaxCaptures = 8
	// captureSmallBuf is the size of the recycled buffers; larger frames
	// (super-frames, jumbo frames) get buffers of their own, bounded by
	// captureMaxBigBytes in flight.
	captureSmallBuf    = 2048
	captureMaxBigBytes = 32 << 20
)

// CaptureConfig configures a capture. The zero value captures both
// directions with the default snap length and queue.
type CaptureConfig struct {
	// Dir selects the directions; 0 means CaptureBoth.
	Dir CaptureDir
	// Snaplen is the most bytes kept of each frame; 0 means DefaultSnaplen.
	Snaplen int
	// Queue is the most frames queued for the reader; 0 means
	// DefaultCaptureQueue. Frames beyond it are dropped (and counted).
	Queue int
}

// CapturedFrame is one captured frame. Data is the frame's first
// min(OrigLen, snap length) bytes; it belongs to the reader until Release.
type CapturedFrame struct {
	Time    time.Time
	Dir     CaptureDir // CaptureRx or CaptureTx
	OrigLen int
	Data    []byte
}

// CaptureStats are a capture's counters. Captured frames were queued for
// the reader; dropped frames were lost because the queue or the buffers
// were full.
type CaptureStats struct {
	Captured, Dropped uint64
}

// Capture is a running capture on one port. Its hooks are called by any
// number of workers; Next, Release and Pending by one reader goroutine.
// Stop may be called from anywhere, more than once.
type Capture struct {
	s      *Switch
	e      *portEntry
	dir    CaptureDir
	snap   int
	framer Framer // the port's outer headers, or nil
	hdr    int    // their length

	q        chan CapturedFrame
	free     chan []byte
	nSmall   atomic.Int64 // small buffers allocated so far (≤ cap(free))
	bigBytes atomic.Int64 // bytes of big buffers in flight

	captured, dropped atomic.Uint64

	done     chan struct{}
	stopOnce sync.Once
}

// captureTotals are the switch-wide capture counters, summed over every
// capture the switch ran.
type captureTotals struct {
	captured, dropped counter
	active            atomic.Int64
}

// CaptureTotals are the switch-wide capture counters: frames captured and
// dropped by all captures so far, and the captures running now.
type CaptureTotals struct {
	Captured, Dropped uint64
	Active            int
}

// CaptureTotals returns the switch-wide capture counters.
func (s *Switch) CaptureTotals() CaptureTotals {
	return CaptureTotals{
		Captured: s.capTotals.captured.n.Load(),
		Dropped:  s.capTotals.dropped.n.Load(),
		Active:   int(s.capTotals.active.Load()),
	}
}

// StartCapture starts capturing on port no. Only one capture may run on a
// port at a time (ErrCaptureBusy), and MaxCaptures on the switch
// (ErrTooManyCaptures). The capture ends with Stop, or when the
// port is removed or the switch closed.
func (s *Switch) StartCapture(no uint32, cfg CaptureConfig) (*Capture, error) {
	if cfg.Dir == 0 {
		cfg.Dir = CaptureBoth
	}
	if cfg.Dir&^CaptureBoth != 0 {
		return nil, fmt.Errorf("vswitch: invalid capture direction %d", cfg.Dir)
	}
	if cfg.Snaplen == 0 {
		cfg.Snaplen = DefaultSnaplen
	}
	if cfg.Snaplen < MinSnaplen || cfg.Snaplen > DefaultSnaplen {
		return nil, fmt.Errorf("vswitch: snap length %d outside %d..%d", cfg.Snaplen, MinSnaplen, DefaultSnaplen)
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultCaptureQueue
	}
	// Holding mu orders this against RemovePort: either the port is gone
	// already, or its removal will see and stop this capture.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	e, ok := (*s.ports.Load())[no]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrNoSuchPort, no)
	}
	if n := s.capTotals.active.Load(); n >= MaxCaptures {
		return nil, fmt.Errorf("%w: %d of %d; stop one first", ErrTooManyCaptures, n, MaxCaptures)
	}
	c := &Capture{
		s: s, e: e, dir: cfg.Dir, snap: cfg.Snaplen, framer: e.framer,
		q:    make(chan CapturedFrame, cfg.Queue),
		free: make(chan []byte, cfg.Queue),
		done: make(chan struct{}),
	}
	if c.framer != nil {
		c.hdr = c.framer.WireHeaderLen()
	}
	if !e.capture.CompareAndSwap(nil, c) {
		return nil, fmt.Errorf("%w: port %d (%s)", ErrCaptureBusy, no, e.name())
	}
	s.capTotals.active.Add(1)
	s.log.Info("capture started", "port", no, "name", e.name(), "dir", cfg.Dir.String(), "snaplen", cfg.Snaplen)
	return c, nil
}

// endCapture stops the capture of a port being removed.
func (e *portEntry) endCapture() {
	if c := e.capture.Load(); c != nil {
		c.Stop()
	}
}

// Stop detaches the capture from its port. Frames already queued can still
// be read with Next.
func (c *Capture) Stop() {
	c.stopOnce.Do(func() {
		c.e.capture.CompareAndSwap(c, nil)
		close(c.done)
		c.s.capTotals.active.Add(-1)
		st := c.Stats()
		c.s.log.Info("capture stopped", "port", c.e.no, "name", c.e.name(), "captured", st.Captured, "dropped", st.Dropped)
	})
}

// Done is closed when the capture stops.
func (c *Capture) Done() <-chan struct{} { return c.done }

// Stats returns the capture's counters.
func (c *Capture) Stats() CaptureStats {
	return CaptureStats{Captured: c.captured.Load(), Dropped: c.dropped.Load()}
}

// Pending returns the number of frames queued for the reader.
func (c *Capture) Pending() int { return len(c.q) }

// Next returns the next captured frame, waiting for one. After Stop it
// returns the frames still queued, then ErrCaptureStopped. It returns
// ctx.Err() when ctx ends first.
func (c *Capture) Next(ctx context.Context) (CapturedFrame, error) {
	select {
	case f := <-c.q:
		return f, nil
	default:
	}
	select {
	case f := <-c.q:
		return f, nil
	case <-ctx.Done():
		return CapturedFrame{}, ctx.Err()
	case <-c.done:
		select {
		case f := <-c.q:
			return f, nil
		default:
			return CapturedFrame{}, ErrCaptureStopped
		}
	}
}

// Release gives f's buffer back to the capture.
func (c *Capture) Release(f CapturedFrame) {
	b := f.Data[:cap(f.Data)]
	if len(b) != captureSmallBuf {
		c.bigBytes.Add(-int64(len(b)))
		return
	}
	select {
	case c.free <- b:
	default:
	}
}

// buffer returns a buffer of at least n bytes, or nil when the capture is
// out of buffers.
func (c *Capture) buffer(n int) []byte {
	if n <= captureSmallBuf {
		select {
		case b := <-c.free:
			return b
		default:
		}
		if c.nSmall.Add(1) <= int64(cap(c.free)) {
			return make([]byte, captureSmallBuf)
		}
		c.nSmall.Add(-1)
		return nil
	}
	if c.bigBytes.Add(int64(n)) > captureMaxBigBytes {
		c.bigBytes.Add(-int64(n))
		return nil
	}
	return make([]byte, n)
}

// rx captures the batch w just read (frames at Headroom).
func (c *Capture) rx(w *worker, n int) {
	if c.dir&CaptureRx == 0 {
		return
	}
	now := time.Now()
	for i := 0; i < n; i++ {
		m := &w.meta[i]
		if m.Size < 0 || m.Size > len(w.bufs[i])-Headroom {
			continue // process drops it as malformed
		}
		c.put(w, now, CaptureRx, w.bufs[i][Headroom:Headroom+m.Size], m)
	}
}

// tx captures the frames w queued for the capture's port (frames at
// Headroom), before the port's Write may change them.
func (c *Capture) tx(w *worker, p *pending) {
	if c.dir&CaptureTx == 0 {
		return
	}
	now := time.Now()
	for i, b := range p.bufs {
		m := &p.meta[i]
		c.put(w, now, CaptureTx, b[Headroom:Headroom+m.Size], m)
	}
}

// put copies one frame, behind the port's outer headers if it has any,
// into the queue, or counts it as dropped.
func (c *Capture) put(w *worker, now time.Time, dir CaptureDir, frame []byte, m *port.Meta) {
	orig := c.hdr + len(frame)
	n := min(orig, c.snap)
	b := c.buffer(n)
	if b == nil {
		c.countDrop()
		return
	}
	k := 0
	if c.framer != nil {
		c.framer.PutWireHeader(w.wire[:c.hdr], m, dir == CaptureRx)
		k = copy(b[:n], w.wire[:c.hdr])
	}
	copy(b[k:n], frame)
	select {
	case c.q <- CapturedFrame{Time: now, Dir: dir, OrigLen: orig, Data: b[:n]}:
		c.captured.Add(1)
		c.s.capTotals.captured.n.Add(1)
	default:
		c.Release(CapturedFrame{Data: b})
		c.countDrop()
	}
}

func (c *Capture) countDrop() {
	c.dropped.Add(1)
	c.s.capTotals.dropped.n.Add(1)
}
