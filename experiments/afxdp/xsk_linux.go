package afxdp

// How frames go through a Socket:
//
//  1. Open maps the UMEM (Frames × FrameSize bytes) and registers it,
//     sizes and maps the four rings, binds the socket to the interface's
//     queue (copy mode), loads the redirect program with an XSKMAP holding
//     the socket, and links it to the interface. The first half of the
//     UMEM's frames go to the fill ring, the second half are TX frames.
//  2. Read takes descriptors off the RX ring (after a poll(2) when it is
//     empty) and lends them as Frames; Release puts their UMEM frames back
//     on the fill ring.
//  3. Write first takes the completion ring's finished TX frames back,
//     copies each frame into a free TX frame, produces a TX descriptor
//     each, and kicks the kernel once per batch with sendto(2): in copy
//     mode the kernel transmits the whole TX ring inside that call.
//  4. Wake writes an eventfd the waiting poll(2) watches; Close unmaps and
//     closes everything, which detaches the program.

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Defaults of Config.
const (
	DefaultFrames    = 4096
	DefaultFrameSize = 2048
	DefaultRingSize  = 1024
)

// Errors callers act on.
var (
	// ErrClosed: Read after Wake or Close.
	ErrClosed = errors.New("afxdp: socket closed")
	// ErrZeroCopy: the driver has no AF_XDP zero-copy (veth has none).
	ErrZeroCopy = errors.New("afxdp: zero-copy not supported by the driver")
	// ErrTooLarge: a frame does not fit in a UMEM frame.
	ErrTooLarge = errors.New("afxdp: frame larger than a UMEM frame")
	// ErrUnsupported: no AF_XDP in this kernel (CONFIG_XDP_SOCKETS).
	ErrUnsupported = errors.New("afxdp: not supported by this kernel")
)

// Config describes a Socket.
type Config struct {
	// Interface is the switch's end of the pod's veth, in the calling
	// thread's network namespace.
	Interface string
	// Queue is the interface's receive queue (0 on a single-queue veth).
	Queue int
	// Frames is the number of UMEM frames (power of two); 0 means
	// DefaultFrames.
	Frames int
	// FrameSize is each UMEM frame's size: 2048 or 4096 (page-aligned
	// chunks); 0 means DefaultFrameSize.
	FrameSize int
	// RingSize is the size of each ring (power of two); 0 means
	// DefaultRingSize.
	RingSize int
	// Headroom is the UMEM headroom the kernel leaves before a received
	// frame, on top of XDP_PACKET_HEADROOM (256).
	Headroom int
	// ZeroCopy asks for XDP_ZEROCOPY instead of XDP_COPY.
	ZeroCopy bool
	// SKBMode attaches the program in generic (SKB) mode instead of the
	// driver's native XDP.
	SKBMode bool
}

// Frame is a received frame, lent until Release: Buf[Off:Off+Len] in its
// UMEM frame; the Off bytes before it are headroom.
type Frame struct {
	Buf      []byte
	Off, Len int
	addr     uint64
}

// Stats are a socket's counters; Syscalls counts poll, recvfrom and sendto
// calls made by Read and Write.
type Stats struct {
	RxFrames, TxFrames, TxDropped, Syscalls uint64
	// Kernel is XDP_STATISTICS (drops for a full RX ring or an empty
	// fill ring, invalid descriptors).
	Kernel unix.XDPStatistics
}

// ring is one of the four AF_XDP rings: producer and consumer indexes, a
// flags word, and the descriptors, in a mapping shared with the kernel.
type ring struct {
	mem        []byte
	prod, cons *uint32
	flags      *uint32
	mask       uint32
	desc       unsafe.Pointer
	cached     uint32 // our index: the producer we publish or consumer we advance
}

func (r *ring) addrs() []uint64 {
	return unsafe.Slice((*uint64)(r.desc), r.mask+1)
}

func (r *ring) descs() []unix.XDPDesc {
	return unsafe.Slice((*unix.XDPDesc)(r.desc), r.mask+1)
}

// Socket is an AF_XDP socket on one queue of an interface.
//
// Concurrency: Read and Release from one goroutine, Write from one
// goroutine (they may differ); Wake from any.
type Socket struct {
	cfg     Config
	fd      int
	umem    []byte
	fill    ring
	comp    ring
	rx      ring
	tx      ring
	mapFd   int
	progFd  int
	linkFd  int
	wakeFd  int
	ifindex int

	txFree []uint64 // free TX frames' addresses
	pfd    [2]unix.PollFd
	closed atomic.Bool

	rxFrames, txFrames, txDropped atomic.Uint64
	syscalls                      atomic.Uint64
}

// Open creates the socket, its UMEM and rings, and attaches the redirect
// program to cfg.Interface, in the calling thread's network namespace.
func Open(cfg Config) (*Socket, error) {
	if cfg.Frames == 0 {
		cfg.Frames = DefaultFrames
	}
	if cfg.FrameSize == 0 {
		cfg.FrameSize = DefaultFrameSize
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.Frames&(cfg.Frames-1) != 0 || cfg.RingSize&(cfg.RingSize-1) != 0 || cfg.RingSize > cfg.Frames/2 {
		return nil, fmt.Errorf("afxdp: frames %d and ring size %d must be powers of two, ring ≤ frames/2", cfg.Frames, cfg.RingSize)
	}
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	s := &Socket{cfg: cfg, fd: -1, mapFd: -1, progFd: -1, linkFd: -1, wakeFd: -1, ifindex: ifi.Index}
	if err := s.open(); err != nil {
		s.release()
		return nil, err
	}
	return s, nil
}

func (s *Socket) open() error {
	c := &s.cfg
	var err error
	if s.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			err = fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		return fmt.Errorf("afxdp: socket: %w", err)
	}
	prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE
	if s.umem, err = unix.Mmap(-1, 0, c.Frames*c.FrameSize, prot, flags); err != nil {
		return fmt.Errorf("afxdp: umem: %w", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)),
		Size: uint32(c.FrameSize), Headroom: uint32(c.Headroom)}
	if err := setsockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return fmt.Errorf("afxdp: XDP_UMEM_REG: %w", err)
	}
	n := uint32(c.RingSize)
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := setsockopt(s.fd, opt, unsafe.Pointer(&n), 4); err != nil {
			return fmt.Errorf("afxdp: ring option %d: %w", opt, err)
		}
	}
	// Copy mode transmits at most 32 frames per sendto unless told more
	// (XDP_MAX_TX_SKB_BUDGET, Linux 6.17+); Write kicks again meanwhile.
	_ = setsockopt(s.fd, unix.XDP_MAX_TX_SKB_BUDGET, unsafe.Pointer(&n), 4)
	var off unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return fmt.Errorf("afxdp: XDP_MMAP_OFFSETS: %w", e)
	}
	for _, m := range []struct {
		r    *ring
		o    unix.XDPRingOffset
		pg   int64
		elem uintptr
	}{
		{&s.fill, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, 8},
		{&s.comp, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, 8},
		{&s.rx, off.Rx, unix.XDP_PGOFF_RX_RING, unsafe.Sizeof(unix.XDPDesc{})},
		{&s.tx, off.Tx, unix.XDP_PGOFF_TX_RING, unsafe.Sizeof(unix.XDPDesc{})},
	} {
		if err := mapRing(s.fd, m.r, m.o, m.pg, n, m.elem); err != nil {
			return err
		}
	}
	// Fill ring: the first half of the UMEM; TX: the second.
	half := uint64(c.Frames / 2)
	fa := s.fill.addrs()
	for i := range uint64(n) {
		fa[i&uint64(s.fill.mask)] = i * uint64(c.FrameSize)
	}
	s.fill.cached = n
	atomic.StoreUint32(s.fill.prod, n)
	s.txFree = make([]uint64, 0, half)
	for i := half; i < 2*half; i++ {
		s.txFree = append(s.txFree, i*uint64(c.FrameSize))
	}
	bflags := uint16(unix.XDP_COPY)
	if c.ZeroCopy {
		bflags = unix.XDP_ZEROCOPY
	}
	sa := &unix.SockaddrXDP{Flags: bflags, Ifindex: uint32(s.ifindex), QueueID: uint32(c.Queue)}
	if err := unix.Bind(s.fd, sa); err != nil {
		if c.ZeroCopy && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)) {
			return fmt.Errorf("%w: %s: %w", ErrZeroCopy, c.Interface, err)
		}
		return fmt.Errorf("afxdp: bind %s queue %d: %w", c.Interface, c.Queue, err)
	}
	if s.mapFd, err = newXSKMap(uint32(c.Queue + 1)); err != nil {
		return err
	}
	if err := mapPut(s.mapFd, uint32(c.Queue), s.fd); err != nil {
		return err
	}
	if s.progFd, err = loadProgram(redirectProgram(s.mapFd)); err != nil {
		return err
	}
	if s.linkFd, err = attach(s.progFd, s.ifindex, c.SKBMode); err != nil {
		return err
	}
	if s.wakeFd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("afxdp: eventfd: %w", err)
	}
	return nil
}

func setsockopt(fd, opt int, v unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(v), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

func mapRing(fd int, r *ring, o unix.XDPRingOffset, pgoff int64, n uint32, elem uintptr) error {
	size := int(o.Desc) + int(n)*int(elem)
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("afxdp: mmap ring at %#x: %w", pgoff, err)
	}
	r.mem = mem
	r.prod = (*uint32)(unsafe.Pointer(&mem[o.Producer]))
	r.cons = (*uint32)(unsafe.Pointer(&mem[o.Consumer]))
	r.flags = (*uint32)(unsafe.Pointer(&mem[o.Flags]))
	r.desc = unsafe.Pointer(&mem[o.Desc])
	r.mask = n - 1
	return nil
}

// Read waits for at least one frame and returns up to len(frames), lent
// until Release. It returns ErrClosed after Wake or Close.
func (s *Socket) Read(frames []Frame) (int, error) {
	for {
		if s.closed.Load() {
			return 0, ErrClosed
		}
		prod := atomic.LoadUint32(s.rx.prod)
		avail := prod - s.rx.cached
		if avail == 0 {
			pfd := s.pfd[:]
			pfd[0] = unix.PollFd{Fd: int32(s.fd), Events: unix.POLLIN}
			pfd[1] = unix.PollFd{Fd: int32(s.wakeFd), Events: unix.POLLIN}
			s.syscalls.Add(1)
			if _, err := unix.Poll(pfd, -1); err != nil && err != unix.EINTR {
				return 0, fmt.Errorf("afxdp: poll: %w", err)
			}
			if pfd[1].Revents != 0 {
				s.closed.Store(true)
			}
			continue
		}
		n := min(int(avail), len(frames))
		descs := s.rx.descs()
		fs := uint64(s.cfg.FrameSize)
		for i := range n {
			d := descs[(s.rx.cached+uint32(i))&s.rx.mask]
			base := d.Addr &^ (fs - 1)
			frames[i] = Frame{Buf: s.umem[base : base+fs], Off: int(d.Addr - base), Len: int(d.Len), addr: base}
		}
		s.rx.cached += uint32(n)
		atomic.StoreUint32(s.rx.cons, s.rx.cached)
		s.rxFrames.Add(uint64(n))
		return n, nil
	}
}

// Release returns lent frames to the fill ring.
func (s *Socket) Release(frames []Frame) {
	fa := s.fill.addrs()
	for i := range frames {
		fa[s.fill.cached&s.fill.mask] = frames[i].addr
		s.fill.cached++
		frames[i] = Frame{}
	}
	atomic.StoreUint32(s.fill.prod, s.fill.cached)
	if atomic.LoadUint32(s.fill.flags)&unix.XDP_RING_NEED_WAKEUP != 0 {
		s.syscalls.Add(1)
		_, _, _ = unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
}

// Write copies each frame bufs[i][offset:] into a free TX frame of the
// UMEM and transmits the batch with one sendto(2). Frames that find no
// free TX frame are dropped (counted). It returns the frames queued.
func (s *Socket) Write(bufs [][]byte, offset int) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	s.reapCompletions()
	room := uint32(len(s.tx.descs())) - (s.tx.cached - atomic.LoadUint32(s.tx.cons))
	descs := s.tx.descs()
	n := 0
	for _, b := range bufs {
		f := b[offset:]
		if len(f) > s.cfg.FrameSize {
			return n, ErrTooLarge
		}
		if len(s.txFree) == 0 || room == 0 {
			s.txDropped.Add(1)
			continue
		}
		addr := s.txFree[len(s.txFree)-1]
		s.txFree = s.txFree[:len(s.txFree)-1]
		copy(s.umem[addr:], f)
		descs[s.tx.cached&s.tx.mask] = unix.XDPDesc{Addr: addr, Len: uint32(len(f))}
		s.tx.cached++
		room--
		n++
	}
	if n == 0 {
		return 0, nil
	}
	atomic.StoreUint32(s.tx.prod, s.tx.cached)
	// Copy mode transmits inside this call (xsk_generic_xmit), up to its
	// budget per call: kick until the kernel has taken the whole ring.
	for tries := 0; atomic.LoadUint32(s.tx.cons) != s.tx.cached && tries < 64; tries++ {
		s.syscalls.Add(1)
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		if e != 0 && e != unix.EAGAIN && e != unix.EBUSY && e != unix.ENOBUFS {
			return n, fmt.Errorf("afxdp: sendto: %w", e)
		}
	}
	s.txFrames.Add(uint64(n))
	return n, nil
}

// reapCompletions returns transmitted frames to the free list.
func (s *Socket) reapCompletions() {
	prod := atomic.LoadUint32(s.comp.prod)
	ca := s.comp.addrs()
	for ; s.comp.cached != prod; s.comp.cached++ {
		s.txFree = append(s.txFree, ca[s.comp.cached&s.comp.mask])
	}
	atomic.StoreUint32(s.comp.cons, s.comp.cached)
}

// Wake makes a Read waiting in poll(2) (or the next one) return ErrClosed.
func (s *Socket) Wake() {
	_, _ = unix.Write(s.wakeFd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
}

// Stats returns the socket's counters and the kernel's XDP_STATISTICS.
func (s *Socket) Stats() Stats {
	st := Stats{RxFrames: s.rxFrames.Load(), TxFrames: s.txFrames.Load(), TxDropped: s.txDropped.Load(),
		Syscalls: s.syscalls.Load()}
	size := uint32(unsafe.Sizeof(st.Kernel))
	_, _, _ = unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st.Kernel)), uintptr(unsafe.Pointer(&size)), 0)
	return st
}

// Close detaches the program and releases the socket, rings and UMEM.
// Call it after Read and Write have returned.
func (s *Socket) Close() error {
	if s.closed.Swap(true) && s.fd < 0 {
		return ErrClosed
	}
	s.release()
	return nil
}

func (s *Socket) release() {
	for _, r := range []*ring{&s.fill, &s.comp, &s.rx, &s.tx} {
		if r.mem != nil {
			_ = unix.Munmap(r.mem)
			r.mem = nil
		}
	}
	for _, fd := range []*int{&s.linkFd, &s.progFd, &s.mapFd, &s.fd, &s.wakeFd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	if s.umem != nil {
		_ = unix.Munmap(s.umem)
		s.umem = nil
	}
}
