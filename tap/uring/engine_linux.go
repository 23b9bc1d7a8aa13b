package uring

// How frames go through an Engine:
//
//  1. New maps a slab of Buffers × BufSize bytes, registers it as fixed
//     buffer 0, registers the TAP fds (RxFd first, then TxFds) as fixed
//     files, and hands every buffer to the kernel through a provided-buffer
//     ring (group 0), each at Headroom − VnetHdrLen so that the
//     virtio_net_hdr lands in the headroom and the frame at Headroom.
//  2. Read arms one IORING_OP_READ_MULTISHOT on RxFd (again whenever the
//     kernel ends it), waits in io_uring_enter for at least one completion
//     and returns every frame completed so far, lent: Frame.Buf is the
//     engine's buffer. Release gives the buffers back to the kernel's ring.
//  3. Write puts a virtio_net_hdr in each frame's headroom, prepares one
//     SQE per frame (WRITE_FIXED if the frame lies in the slab, a lent
//     frame being forwarded; WRITE otherwise) and submits the batch with
//     one io_uring_enter that also waits for the completions: a TAP write
//     completes inline.
//  4. Wake (any goroutine) writes an eventfd the ring polls, so that a
//     Read waiting in io_uring_enter returns; Close (the owning goroutine)
//     unmaps and closes everything.

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/tap"
	"golang.org/x/sys/unix"
)

// Defaults of Config.
const (
	DefaultEntries  = 256
	DefaultBuffers  = 256
	DefaultBufSize  = 2048
	DefaultHeadroom = 64
)

// Errors callers act on.
var (
	// ErrClosed: Read or Write after Close, or a Read woken by Wake.
	ErrClosed = errors.New("uring: engine closed")
	// ErrNoRx: Read on an engine without RxFd.
	ErrNoRx = errors.New("uring: engine has no receive fd")
	// ErrHeadroom: a Write buffer shorter than offset, or offset <
	// tap.VnetHdrLen.
	ErrHeadroom = errors.New("uring: offset leaves no room for the virtio_net_hdr")
	// ErrUnsupported: the kernel lacks io_uring or a feature the engine
	// needs (multishot read: Linux 6.7; provided-buffer rings: 5.19).
	ErrUnsupported = errors.New("uring: not supported by this kernel")
)

// Config describes an Engine. The zero value is not usable: set RxFd (or
// -1) and TxFds.
type Config struct {
	// RxFd is the TAP queue (opened with IFF_VNET_HDR, non-blocking) the
	// engine receives from, or -1 for a transmit-only engine. The engine
	// does not own it.
	RxFd int
	// TxFds are the TAP queues Write may write to, by index. The engine
	// does not own them.
	TxFds []int
	// Entries is the submission queue size (power of two);
	// 0 means DefaultEntries.
	Entries uint32
	// Buffers is the number of receive buffers (power of two, at most
	// 32768); 0 means DefaultBuffers.
	Buffers int
	// BufSize is each receive buffer's size, headroom included; 0 means
	// DefaultBufSize. A frame that fills it is dropped as truncated.
	BufSize int
	// Headroom is where a received frame starts in its buffer, at least
	// tap.VnetHdrLen; 0 means DefaultHeadroom.
	Headroom int
	// NoFixedBuffers makes Write use IORING_OP_WRITE even for frames in
	// the slab (to measure what registered buffers bring).
	NoFixedBuffers bool
}

func (c *Config) defaults() error {
	if c.Entries == 0 {
		c.Entries = DefaultEntries
	}
	if c.Buffers == 0 {
		c.Buffers = DefaultBuffers
	}
	if c.BufSize == 0 {
		c.BufSize = DefaultBufSize
	}
	if c.Headroom == 0 {
		c.Headroom = DefaultHeadroom
	}
	switch {
	case c.Entries&(c.Entries-1) != 0:
		return fmt.Errorf("uring: entries %d not a power of two", c.Entries)
	case c.Buffers&(c.Buffers-1) != 0 || c.Buffers > 1<<15:
		return fmt.Errorf("uring: buffers %d not a power of two ≤ 32768", c.Buffers)
	case c.Headroom < tap.VnetHdrLen || c.BufSize < c.Headroom+60:
		return fmt.Errorf("uring: headroom %d / buffer size %d: %w", c.Headroom, c.BufSize, ErrHeadroom)
	}
	return nil
}

// Frame is a received frame, lent by the engine until Release: the frame
// is Buf[Headroom:Headroom+Len]; the bytes before it are free headroom
// (the virtio_net_hdr's 10 bytes included) for outer headers.
type Frame struct {
	Buf []byte
	Len int
	// GSO is the frame's offload metadata (zero for a complete frame; a
	// partial checksum of a non-GSO frame has been completed).
	GSO packet.GSO
	bid uint16
}

// Stats are an engine's counters.
type Stats struct {
	RxFrames, RxDrops, RxRearms uint64
	TxFrames, TxErrors          uint64
	// Syscalls counts io_uring_enter calls (the engine makes no other
	// system call per frame).
	Syscalls uint64
}

// user_data tags of the engine's operations.
const (
	tagRx   = 1
	tagTx   = 2
	tagWake = 3
)

// Engine is one thread's io_uring for TAP ports (see the package doc).
type Engine struct {
	cfg    Config
	r      *ring
	slab   []byte // Buffers × BufSize, registered as fixed buffer 0
	pbr    []byte // provided-buffer ring
	pbufs  []pbuf
	pbTail uint16
	wakeFd int

	rxArmed   bool
	rxQueue   []rxDone // completions reaped, not yet returned by Read
	txPending int
	txOK      int
	txErr     int32
	closed    atomic.Bool
	woken     bool

	rxFrames, rxDrops, rxRearms, txFrames, txErrors uint64
}

type rxDone struct {
	bid uint16
	n   int32
}

// New sets up an engine on the calling OS thread. It fails with
// ErrUnsupported on a kernel without io_uring (or with it disabled,
// /proc/sys/kernel/io_uring_disabled) or without provided-buffer rings.
func New(cfg Config) (*Engine, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r, err := newRing(cfg.Entries, 0, false)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			err = fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		return nil, err
	}
	e := &Engine{cfg: cfg, r: r, wakeFd: -1, rxQueue: make([]rxDone, 0, cfg.Buffers)}
	if err := e.init(); err != nil {
		e.release()
		return nil, err
	}
	return e, nil
}

func (e *Engine) init() error {
	c := &e.cfg
	var err error
	prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS
	if e.slab, err = unix.Mmap(-1, 0, c.Buffers*c.BufSize, prot, flags); err != nil {
		return fmt.Errorf("uring: buffers: %w", err)
	}
	iov := unix.Iovec{Base: &e.slab[0]}
	iov.SetLen(len(e.slab))
	if err := register(e.r.fd, registerBuffers, unsafe.Pointer(&iov), 1); err != nil {
		return fmt.Errorf("uring: IORING_REGISTER_BUFFERS: %w", err)
	}
	fds := make([]int32, 0, 1+len(c.TxFds))
	fds = append(fds, int32(c.RxFd))
	for _, fd := range c.TxFds {
		fds = append(fds, int32(fd))
	}
	if err := register(e.r.fd, registerFiles, unsafe.Pointer(&fds[0]), uint32(len(fds))); err != nil {
		return fmt.Errorf("uring: IORING_REGISTER_FILES: %w", err)
	}
	if c.RxFd >= 0 {
		if err := e.initBufRing(); err != nil {
			return err
		}
	}
	if e.wakeFd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("uring: eventfd: %w", err)
	}
	s := e.r.get()
	s.opcode, s.fd, s.opFlags, s.userData = opPollAdd, int32(e.wakeFd), pollIn, tagWake
	return e.r.submit(0)
}

func (e *Engine) initBufRing() error {
	c := &e.cfg
	size := c.Buffers * int(unsafe.Sizeof(pbuf{}))
	var err error
	if e.pbr, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return fmt.Errorf("uring: buffer ring: %w", err)
	}
	e.pbufs = unsafe.Slice((*pbuf)(unsafe.Pointer(&e.pbr[0])), c.Buffers)
	reg := bufReg{ringAddr: uint64(uintptr(unsafe.Pointer(&e.pbr[0]))), ringEntries: uint32(c.Buffers)}
	if err := register(e.r.fd, registerPbufRing, unsafe.Pointer(&reg), 1); err != nil {
		if errors.Is(err, unix.EINVAL) {
			err = fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		return fmt.Errorf("uring: IORING_REGISTER_PBUF_RING: %w", err)
	}
	for i := range c.Buffers {
		e.provide(uint16(i))
	}
	e.publish()
	return nil
}

// provide puts buffer bid back in the ring (published by publish).
func (e *Engine) provide(bid uint16) {
	c := &e.cfg
	b := &e.pbufs[int(e.pbTail)&(c.Buffers-1)]
	off := int(bid)*c.BufSize + c.Headroom - tap.VnetHdrLen
	b.addr = uint64(uintptr(unsafe.Pointer(&e.slab[off])))
	b.len = uint32(c.BufSize - c.Headroom + tap.VnetHdrLen)
	b.bid = bid
	e.pbTail++
}

// publish stores the ring's tail (the u16 at byte 14).
func (e *Engine) publish() {
	p := (*uint32)(unsafe.Pointer(&e.pbr[12]))
	// Bytes 12–13 are the first entry's bid, which the kernel reads only
	// as an entry: storing the 32-bit word keeps them and makes the tail
	// store atomic.
	for {
		old := atomic.LoadUint32(p)
		nv := old&0xffff | uint32(e.pbTail)<<16
		if atomic.CompareAndSwapUint32(p, old, nv) {
			return
		}
	}
}

// Read waits for at least one received frame and returns up to
// len(frames), lent until Release. It returns ErrClosed after Wake or
// Close.
func (e *Engine) Read(frames []Frame) (int, error) {
	if e.cfg.RxFd < 0 {
		return 0, ErrNoRx
	}
	for {
		if e.closed.Load() || e.woken {
			return 0, ErrClosed
		}
		if !e.rxArmed {
			s := e.r.get()
			if s == nil {
				if err := e.r.submit(0); err != nil {
					return 0, err
				}
				continue
			}
			s.opcode, s.flags, s.fd, s.userData = opReadMultishot, sqeFixedFile|sqeBufferSelect, 0, tagRx
			e.rxArmed = true
		}
		e.reap()
		if len(e.rxQueue) > 0 {
			return e.take(frames), nil
		}
		if err := e.r.submit(1); err != nil {
			return 0, err
		}
		e.reap()
		if len(e.rxQueue) > 0 {
			return e.take(frames), nil
		}
	}
}

// take moves queued completions into frames.
func (e *Engine) take(frames []Frame) int {
	c := &e.cfg
	n := 0
	used := 0
	for _, d := range e.rxQueue {
		if n == len(frames) {
			break
		}
		used++
		buf := e.slab[int(d.bid)*c.BufSize : (int(d.bid)+1)*c.BufSize]
		raw := buf[c.Headroom-tap.VnetHdrLen : c.Headroom-tap.VnetHdrLen+int(d.n)]
		g, ok := vnet(raw, int(d.n) >= c.BufSize-c.Headroom+tap.VnetHdrLen)
		if !ok {
			e.rxDrops++
			e.provide(d.bid)
			continue
		}
		frames[n] = Frame{Buf: buf, Len: int(d.n) - tap.VnetHdrLen, GSO: g, bid: d.bid}
		n++
	}
	e.rxQueue = e.rxQueue[:copy(e.rxQueue, e.rxQueue[used:])]
	if n < used {
		e.publish()
	}
	e.rxFrames += uint64(n)
	return n
}

// vnet parses a received virtio_net_hdr + frame, completes a partial
// checksum of a complete frame and returns the GSO metadata.
func vnet(raw []byte, full bool) (packet.GSO, bool) {
	if full || len(raw) < tap.VnetHdrLen+14 {
		return packet.GSO{}, false
	}
	h, err := tap.ParseVnetHdr(raw)
	if err != nil {
		return packet.GSO{}, false
	}
	if h.IsGSO() {
		return packet.GSO{Type: h.GSOType() &^ tap.GSOECN, NeedsCsum: h.NeedsCsum(), HdrLen: h.HdrLen(),
			Size: h.GSOSize(), CsumStart: h.CsumStart(), CsumOffset: h.CsumOffset()}, true
	}
	if h.NeedsCsum() {
		tap.CompleteChecksum(raw[tap.VnetHdrLen:], int(h.CsumStart()), int(h.CsumOffset()))
	}
	return packet.GSO{}, true
}

// Release gives lent frames' buffers back to the kernel.
func (e *Engine) Release(frames []Frame) {
	if len(frames) == 0 || e.pbr == nil {
		return
	}
	for i := range frames {
		e.provide(frames[i].bid)
		frames[i] = Frame{}
	}
	e.publish()
}

// reap consumes every completion in the CQ.
func (e *Engine) reap() {
	for c := e.r.peek(); c != nil; c = e.r.peek() {
		switch c.userData {
		case tagRx:
			if c.res > 0 && c.flags&cqeFBuffer != 0 {
				e.rxQueue = append(e.rxQueue, rxDone{bid: uint16(c.flags >> cqeBufShift), n: c.res})
			} else if c.flags&cqeFBuffer != 0 {
				e.provide(uint16(c.flags >> cqeBufShift))
				e.publish()
			}
			if c.flags&cqeFMore == 0 {
				// The kernel ended the multishot read (buffers ran out:
				// ENOBUFS, or an error): arm it again on the next Read.
				e.rxArmed = false
				e.rxRearms++
			}
		case tagTx:
			e.txPending--
			if c.res >= 0 {
				e.txOK++
			} else {
				e.txErrors++
				if e.txErr == 0 {
					e.txErr = -c.res
				}
			}
		case tagWake:
			e.woken = true
		}
		e.r.advance()
	}
}

// Write writes each frame bufs[i][offset:] to TxFds[port] with a
// virtio_net_hdr made from gso[i] (zero if gso is nil or shorter), in one
// io_uring_enter for the whole batch, and waits for every completion. It
// returns the number of frames the kernel took.
func (e *Engine) Write(port int, bufs [][]byte, gso []packet.GSO, offset int) (int, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	if offset < tap.VnetHdrLen {
		return 0, ErrHeadroom
	}
	if port < 0 || port >= len(e.cfg.TxFds) {
		return 0, fmt.Errorf("uring: no port %d", port)
	}
	slab := uintptr(unsafe.Pointer(&e.slab[0]))
	for _, b := range bufs {
		if len(b) < offset {
			return 0, ErrHeadroom
		}
	}
	e.txOK = 0
	for i, b := range bufs {
		pkt := b[offset-tap.VnetHdrLen:]
		var g packet.GSO
		if i < len(gso) {
			g = gso[i]
		}
		tap.VnetHdr(pkt).Put(g)
		s := e.r.get()
		if s == nil {
			if err := e.flush(); err != nil {
				return e.txOK, err
			}
			s = e.r.get()
		}
		addr := uintptr(unsafe.Pointer(&pkt[0]))
		s.opcode, s.flags, s.fd = opWrite, sqeFixedFile, int32(1+port)
		s.addr, s.len, s.userData = uint64(addr), uint32(len(pkt)), tagTx
		if !e.cfg.NoFixedBuffers && addr >= slab && addr+uintptr(len(pkt)) <= slab+uintptr(len(e.slab)) {
			s.opcode, s.bufIndex = opWriteFixed, 0
		}
		e.txPending++
	}
	err := e.flush()
	runtime.KeepAlive(bufs)
	n := e.txOK
	if e.txErr != 0 {
		err = errors.Join(err, fmt.Errorf("uring: write: %w", unix.Errno(e.txErr)))
		e.txErr = 0
	}
	e.txFrames += uint64(n)
	return n, err
}

// flush submits the prepared SQEs and waits until every pending write has
// completed.
func (e *Engine) flush() error {
	if err := e.r.submit(uint32(max(e.txPending, 0))); err != nil {
		return err
	}
	e.reap()
	for e.txPending > 0 {
		if err := e.r.submit(uint32(e.txPending)); err != nil {
			return err
		}
		e.reap()
	}
	return nil
}

// Wake makes a Read waiting in another goroutine (or the next one) return
// ErrClosed. It may be called from any goroutine, once the engine's owner
// is done with Write too; the owner then calls Close.
func (e *Engine) Wake() {
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(e.wakeFd, one[:])
}

// Close releases the ring and the buffers. Call it from the owning
// goroutine, after Read has returned; lent frames become invalid.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return ErrClosed
	}
	e.release()
	return nil
}

func (e *Engine) release() {
	if e.r != nil {
		e.r.close()
	}
	for _, m := range [][]byte{e.pbr, e.slab} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	e.pbr, e.slab, e.pbufs = nil, nil, nil
	if e.wakeFd >= 0 {
		unix.Close(e.wakeFd)
		e.wakeFd = -1
	}
}

// Stats returns the engine's counters (owning goroutine only).
func (e *Engine) Stats() Stats {
	return Stats{RxFrames: e.rxFrames, RxDrops: e.rxDrops, RxRearms: e.rxRearms,
		TxFrames: e.txFrames, TxErrors: e.txErrors, Syscalls: e.r.syscalls.Load()}
}

// SetupFlags returns the IORING_SETUP_* flags the ring runs with
// (SINGLE_ISSUER|DEFER_TASKRUN on 6.1+).
func (e *Engine) SetupFlags() uint32 { return e.r.flags }
