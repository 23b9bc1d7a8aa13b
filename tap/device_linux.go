package tap

// How a frame goes through a Device:
//
//  1. Create opens /dev/net/tun non-blocking, attaches it to a TAP with
//     TUNSETIFF(IFF_TAP|IFF_NO_PI|IFF_VNET_HDR), sets the header size, the
//     header byte order and the offloads, and wraps the fd in an *os.File so
//     that Go's netpoller (epoll) waits for it.
//  2. Read: the first read of a batch waits in the netpoller; the kernel
//     writes virtio_net_hdr+frame at bufs[i][offset-VnetHdrLen:], so the frame
//     lands at bufs[i][offset] without a copy. Further reads take what is
//     ready without waiting. Each header is parsed into meta[i].GSO: a
//     partial checksum of a complete frame is completed in software, and a
//     GSO super-frame (TSO or USO enabled) is returned whole with its
//     metadata.
//  3. Write: a header made from meta[i].GSO (zero for a complete frame)
//     goes into the headroom in front of each frame, one write(2) per frame.
//  4. Close closes the *os.File, which wakes a Read blocked in the poller.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
	"golang.org/x/sys/unix"
)

// DefaultBatchSize is the batch size of a Device whose Config leaves it 0.
const DefaultBatchSize = 64

// tunPath is the TUN/TAP clone device.
const tunPath = "/dev/net/tun"

// supportedOffloads are the TUN_F_* bits gvs can handle: checksum offload,
// TCP segmentation offload and UDP segmentation offload (Read returns
// super-frames whole with their port.Meta, the switch passes them on and
// the tunnel port segments them, packet.Segment).
const supportedOffloads = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_TSO_ECN |
	unix.TUN_F_USO4 | unix.TUN_F_USO6

// OffloadsTSO is the offload set for a pod TAP that hands over TCP
// super-frames: checksum offload and TSO for IPv4 and IPv6.
const OffloadsTSO = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6

// OffloadsUSO are the UDP segmentation offload bits (Linux 6.2 and later;
// the kernel takes them only together). Or them into OffloadsTSO: a kernel
// without USO refuses them, and Create then opens the device without them
// (Device.Offloads tells).
const OffloadsUSO = unix.TUN_F_USO4 | unix.TUN_F_USO6

// Errors a Device returns that callers act on.
var (
	// ErrClosed is returned by Read and Write after Close.
	ErrClosed = errors.New("tap: device closed")
	// ErrHeadroom is returned when offset leaves no room for the
	// virtio_net_hdr (offset < VnetHdrLen) or a buffer is shorter than
	// offset (on Write: than offset plus the frame's port.Meta.Size).
	ErrHeadroom = errors.New("tap: buffer offset smaller than the virtio_net_hdr")
	// ErrNotPolled is returned by Read while the device is out of Go's
	// netpoller (SetPolled(false)).
	ErrNotPolled = errors.New("tap: read while out of the netpoller")
	// ErrNotFound is returned by Open when the interface does not exist.
	ErrNotFound = errors.New("tap: interface not found")
	// ErrExists is returned by Create when the interface already exists.
	ErrExists = errors.New("tap: interface already exists")
	// ErrUnsupportedOffload is returned by Config.Validate for offload bits
	// the read path cannot handle yet (TSO/USO need GSO splitting).
	ErrUnsupportedOffload = errors.New("tap: unsupported offload")
)

// Config describes a TAP device. The zero value is a single-queue TAP with
// a kernel-chosen name and no offloads.
type Config struct {
	// Name is the interface name (at most 15 bytes). Empty, or a pattern
	// with %d, lets the kernel choose; Device.Name reports the result.
	Name string
	// MultiQueue opens the TAP with IFF_MULTI_QUEUE. Every queue is a
	// Device of its own: Create makes the first, Open attaches more.
	MultiQueue bool
	// Offloads are TUN_F_* bits passed to TUNSETOFFLOAD. 0 (none) makes the
	// kernel hand over complete frames. unix.TUN_F_CSUM and the TSO and USO
	// bits (see OffloadsTSO, OffloadsUSO) are accepted; with them Read
	// returns super-frames of up to packet.MaxSuperFrame bytes.
	Offloads uint
	// BatchSize is what BatchSize reports; 0 means DefaultBatchSize.
	BatchSize int
	// Logger receives setup messages (never per-packet ones); nil discards.
	Logger *slog.Logger
}

// Validate checks c.
func (c Config) Validate() error {
	if len(c.Name) >= unix.IFNAMSIZ {
		return fmt.Errorf("tap: name %q longer than %d bytes", c.Name, unix.IFNAMSIZ-1)
	}
	if c.Offloads&^supportedOffloads != 0 {
		return fmt.Errorf("%w: %#x (GSO splitting is not implemented)", ErrUnsupportedOffload, c.Offloads&^supportedOffloads)
	}
	if u := c.Offloads & OffloadsUSO; u != 0 && (u != OffloadsUSO || c.Offloads&unix.TUN_F_CSUM == 0) {
		return fmt.Errorf("%w: USO needs TUN_F_USO4, TUN_F_USO6 and TUN_F_CSUM together (as the kernel does)", ErrUnsupportedOffload)
	}
	if c.BatchSize < 0 {
		return fmt.Errorf("tap: negative batch size %d", c.BatchSize)
	}
	return nil
}

// DropReason says why Read dropped a frame. The set is closed; Stats counts
// drops per reason.
type DropReason uint8

// Drop reasons.
const (
	// DropShort: the read was shorter than virtio_net_hdr plus an Ethernet
	// header.
	DropShort DropReason = iota
	// DropTruncated: the frame filled the buffer and was probably cut.
	DropTruncated
	// DropBadVnetHdr: ParseVnetHdr rejected the header.
	DropBadVnetHdr
	// DropGSO: a GSO super-frame of a type Read does not pass on (not
	// TCPv4, TCPv6 or UDP L4).
	DropGSO
	// NumDropReasons is the number of drop reasons.
	NumDropReasons
)

// String returns the reason's metric label.
func (r DropReason) String() string {
	switch r {
	case DropShort:
		return "short"
	case DropTruncated:
		return "truncated"
	case DropBadVnetHdr:
		return "bad_vnet_hdr"
	case DropGSO:
		return "gso"
	}
	return "unknown"
}

// Stats are a Device's counters since Create.
type Stats struct {
	RxPackets uint64 // frames returned by Read
	RxBytes   uint64 // their bytes, Ethernet header included
	// RxWaits counts the times Read found no frame and waited in the
	// netpoller: wake-ups, each a thread hand-off.
	RxWaits uint64
	// RxCsumCompleted counts frames whose partial checksum Read completed.
	RxCsumCompleted uint64
	RxDrops         [NumDropReasons]uint64 // indexed by DropReason
	TxPackets       uint64                 // frames written
	TxBytes         uint64                 // their bytes, vnet header excluded
	TxErrors        uint64                 // failed writes
}

// RxDropped returns the sum of RxDrops.
func (s Stats) RxDropped() uint64 {
	var n uint64
	for _, d := range s.RxDrops {
		n += d
	}
	return n
}

// counters keeps the receive side (one reader) and the transmit side (many
// writers) on separate cache lines.
type counters struct {
	_         [64]byte
	rxPackets atomic.Uint64
	rxBytes   atomic.Uint64
	rxCsum    atomic.Uint64
	rxWaits   atomic.Uint64
	rxDrops   [NumDropReasons]atomic.Uint64
	_         [64]byte
	txPackets atomic.Uint64
	txBytes   atomic.Uint64
	txErrors  atomic.Uint64
	_         [64]byte
}

// Device is one queue of a TAP device. It implements the switch's Port
// interface (vswitch.Port: Name, Caps, BatchSize, Read, Write, Close) and
// offers Fd and Stats besides.
//
// Concurrency: Read is called by one goroutine at a time, which alone may
// call SetPolled; Write may be called from several; Close may be called at
// any time and makes a blocked Read return ErrClosed.
type Device struct {
	name string
	// fd is the queue's descriptor, which the Device owns; guard keeps it
	// open while a Write or an ioctl uses it.
	fd    int
	guard fdGuard
	// file is a duplicate of fd in Go's netpoller, through which Read
	// waits; nil while SetPolled(false). rc is its RawConn. The reading
	// goroutine swaps both (SetPolled) under fileMu, which Wake,
	// SetReadDeadline and Close take too.
	fileMu sync.Mutex
	file   *os.File
	rc     syscall.RawConn
	batch  int
	log    *slog.Logger
	// offloads are the TUN_F_* bits in effect (Config.Offloads, without
	// the USO bits if the kernel has no USO).
	offloads uint
	closed   atomic.Bool
	// woken is set by Wake; deadline is the caller's read deadline
	// (SetReadDeadline, Unix nanoseconds, 0: none), restored after a
	// wake-up.
	woken    atomic.Bool
	deadline atomic.Int64

	// Read state, touched only by the reading goroutine. readFn is the
	// method value d.readRaw, made once so that Read does not allocate.
	rbuf   []byte
	rn     int
	rerr   error
	rwait  bool
	readFn func(fd uintptr) bool
	// The receive-buffer budget (SetBudget): bufs[:nCharged] of the
	// caller's are counted in it, charged bytes in all; quiet counts the
	// batches of at most one frame in a row.
	budget     *port.Budget
	nCharged   int
	charged    int64
	quiet      int
	seenDenied uint64 // the budget's refusals at the last give-back

	stats counters
}

// budgetShrinkAfter is how many batches of at most one frame in a row make
// Read give back the buffers its budget counts beyond the floor.
const budgetShrinkAfter = 256

// SetBudget makes Read count the receive buffers it fills in b (shared by
// the ports of a switch; nil: none): before the kernel writes a frame into
// a buffer past those already counted, Read takes the buffer's bytes from
// b, and ends its batch early when b is spent, beyond the first
// port.BudgetFloor buffers, which it takes anyway. Read gives the counted
// buffers' pages back to the system (port.ReleasePages, so the caller's
// buffers must be frame buffers of their own), and their bytes to b, when
// it is woken (Wake) and, beyond the floor, after 256 batches of at most
// one frame in a row if the budget refused others since it last gave back
// (without that, giving back would only cost page faults later). Call it before the first Read, from the reading
// goroutine.
func (d *Device) SetBudget(b *port.Budget) { d.budget = b }

// Uncharge gives back the pages of the caller's buffers that Read counted
// in the budget (SetBudget), and their bytes, keeping the first keep of
// them: for an engine that takes the device's reads over with buffers of
// its own counting (package tap/uring; keep 0), and for Read itself. Call
// it from the reading goroutine, between Reads, with the buffers of the
// last Read.
func (d *Device) Uncharge(bufs [][]byte, keep int) {
	give := int64(0)
	for ; d.nCharged > keep; d.nCharged-- {
		if b := d.nCharged - 1; b < len(bufs) {
			port.ReleasePages(bufs[b])
			give += int64(len(bufs[b]))
		}
	}
	if keep == 0 || give > d.charged {
		give = d.charged // all of it, whichever buffers were counted
	}
	d.charged -= give
	d.budget.Give(give)
}

// charge counts bufs[n] in the budget before a frame is read into it, and
// reports whether it may be.
func (d *Device) charge(bufs [][]byte, n int) bool {
	if d.budget == nil || n < d.nCharged {
		return true
	}
	size := int64(len(bufs[n]))
	if n < port.BudgetFloor {
		d.budget.Force(size)
	} else if !d.budget.Take(size) {
		return false
	}
	d.nCharged, d.charged = n+1, d.charged+size
	return true
}

// Create creates the TAP device cfg.Name in the calling thread's network
// namespace (run it inside netconf.Do to create it elsewhere) and opens its
// first queue. It fails with ErrExists if the name is taken. The device is
// not persistent: it disappears when its last queue is closed, unless
// SetPersist(true) is called.
func Create(cfg Config) (*Device, error) {
	return open(cfg, true)
}

// Open attaches to the existing TAP device cfg.Name in the calling thread's
// network namespace: a persistent TAP left by an earlier run, or another
// queue of a multi-queue TAP (cfg.MultiQueue must then be set). The flags
// must match the device's; it fails with ErrNotFound if there is no such
// interface.
func Open(cfg Config) (*Device, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("tap: open: %w: empty name", ErrNotFound)
	}
	if err := interfaceExists(cfg.Name); err != nil {
		return nil, err
	}
	return open(cfg, false)
}

func open(cfg Config, create bool) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fd, err := unix.Open(tunPath, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("tap: open %s: %w", tunPath, err)
	}
	name, offloads, err := setup(fd, cfg, create)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	batch := cfg.BatchSize
	if batch == 0 {
		batch = DefaultBatchSize
	}
	d := &Device{name: name, fd: fd, batch: batch, log: log, offloads: offloads}
	d.readFn = d.readRaw
	if err := d.SetPolled(true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	log.Debug("tap opened", "name", name, "create", create, "multiqueue", cfg.MultiQueue,
		"offloads", offloads)
	return d, nil
}

// setup attaches fd to the TAP and configures the virtio_net_hdr and the
// offloads. It returns the interface name the kernel used and the offloads
// in effect.
func setup(fd int, cfg Config, create bool) (string, uint, error) {
	ifr, err := unix.NewIfreq(cfg.Name)
	if err != nil {
		return "", 0, fmt.Errorf("tap: name %q: %w", cfg.Name, err)
	}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if cfg.MultiQueue {
		flags |= unix.IFF_MULTI_QUEUE
	}
	if create && cfg.Name != "" {
		flags |= unix.IFF_TUN_EXCL // fail rather than attach to a stranger's device
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		if errors.Is(err, unix.EBUSY) && create {
			return "", 0, fmt.Errorf("tap %s: %w: %w", cfg.Name, ErrExists, err)
		}
		return "", 0, fmt.Errorf("tap %s: TUNSETIFF: %w", cfg.Name, err)
	}
	name := ifr.Name()
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, VnetHdrLen); err != nil {
		return "", 0, fmt.Errorf("tap %s: TUNSETVNETHDRSZ: %w", name, err)
	}
	// VnetHdr is little-endian. The legacy header is in host order unless
	// TUNSETVNETLE says otherwise; on a little-endian host a failure of the
	// ioctl is harmless.
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETLE, 1); err != nil && !hostLittleEndian() {
		return "", 0, fmt.Errorf("tap %s: TUNSETVNETLE: %w", name, err)
	}
	off := cfg.Offloads
	err = setOffload(fd, off)
	if errors.Is(err, unix.EINVAL) && off&OffloadsUSO != 0 {
		// A kernel before 6.2 has no USO: go on without it.
		off &^= OffloadsUSO
		err = setOffload(fd, off)
	}
	if err != nil {
		return "", 0, fmt.Errorf("tap %s: TUNSETOFFLOAD %#x: %w", name, off, err)
	}
	return name, off, nil
}

// setOffload issues TUNSETOFFLOAD; a variable so that a test can play a
// kernel without USO.
var setOffload = func(fd int, off uint) error {
	return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(off))
}

func hostLittleEndian() bool {
	return binary.NativeEndian.Uint16([]byte{1, 0}) == 1
}

// interfaceExists asks the kernel for name's index with SIOCGIFINDEX, in
// the calling thread's network namespace.
func interfaceExists(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tap: socket: %w", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("tap: name %q: %w", name, err)
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFINDEX, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("tap %s: %w", name, ErrNotFound)
		}
		return fmt.Errorf("tap %s: SIOCGIFINDEX: %w", name, err)
	}
	return nil
}

// Name returns the interface name the device was created with. It does not
// follow a later rename (such as to eth0 inside a pod).
func (d *Device) Name() string { return d.name }

// BatchSize returns the preferred number of buffers per Read and Write.
func (d *Device) BatchSize() int { return d.batch }

// Offloads returns the TUN_F_* offload bits in effect: Config.Offloads,
// less OffloadsUSO on a kernel without USO.
func (d *Device) Offloads() uint { return d.offloads }

// Caps reports an Offload port: Read returns super-frames when the TAP has
// TSO or USO (Config.Offloads), and Write takes TCP super-frames whatever
// the TAP's offloads (the kernel segments them if the pod's interface
// cannot take them), UDP ones on a kernel with USO (Linux 6.2+).
func (d *Device) Caps() port.Caps { return port.Caps{Offload: true} }

// Fd returns the TAP file descriptor, for setup calls the package does not
// wrap and for I/O engines (package tap/uring). The Device owns it: do not
// close it, do not make it blocking, and do not use it after Close. It is
// not the descriptor in Go's netpoller (SetPolled), so its number stays
// the same while the Device is open.
func (d *Device) Fd() int { return d.fd }

// SetReadDeadline makes a Read blocked past t return os.ErrDeadlineExceeded;
// the zero time clears it.
func (d *Device) SetReadDeadline(t time.Time) error {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	d.deadline.Store(ns)
	d.fileMu.Lock()
	defer d.fileMu.Unlock()
	if d.file == nil {
		return nil // applied by SetPolled(true)
	}
	return d.file.SetReadDeadline(t)
}

// SetPolled puts the queue into Go's netpoller (on) or takes it out (off).
// Read waits through the netpoller and needs it on; an I/O engine that
// reads the descriptor itself (package tap/uring, while it has a receive
// ring) turns it off, because the netpoller's registration is woken by
// every frame the pod sends — a thread wake-up for an event nobody waits
// on. Write and the ioctls work either way. Only the goroutine that calls
// Read may call it, and not during a Read; after Close it does nothing.
func (d *Device) SetPolled(on bool) error {
	d.fileMu.Lock()
	defer d.fileMu.Unlock()
	if d.closed.Load() || on == (d.file != nil) {
		return nil
	}
	if !on {
		err := d.file.Close() // removes it from the netpoller; fd stays open
		d.file, d.rc = nil, nil
		if err != nil {
			return fmt.Errorf("tap %s: %w", d.name, err)
		}
		return nil
	}
	dup, err := unix.FcntlInt(uintptr(d.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tap %s: dup: %w", d.name, err)
	}
	// The descriptor is non-blocking, so os.NewFile registers it with the
	// netpoller: reads wait in epoll, not in a blocked thread, and Close
	// wakes them.
	file := os.NewFile(uintptr(dup), tunPath+":"+d.name)
	rc, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return fmt.Errorf("tap %s: %w", d.name, err)
	}
	t := d.callerDeadline()
	if d.woken.Load() {
		t = time.Unix(1, 0) // a Wake while out of the netpoller
	}
	if !t.IsZero() {
		_ = file.SetReadDeadline(t)
	}
	d.file, d.rc = file, rc
	return nil
}

// callerDeadline is the read deadline the caller last set
// (SetReadDeadline); the zero time if none.
func (d *Device) callerDeadline() time.Time {
	if ns := d.deadline.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Polled reports whether the queue is in Go's netpoller (SetPolled).
func (d *Device) Polled() bool {
	d.fileMu.Lock()
	defer d.fileMu.Unlock()
	return d.file != nil
}

// control runs fn on the descriptor, which stays open meanwhile.
func (d *Device) control(fn func(fd int) error) error {
	if !d.guard.acquire() {
		return ErrClosed
	}
	defer d.guard.release()
	return fn(d.fd)
}

// SetPersist sets or clears TUNSETPERSIST: a persistent TAP outlives its
// file descriptors and can be attached again with Open.
func (d *Device) SetPersist(on bool) error {
	v := 0
	if on {
		v = 1
	}
	err := d.control(func(fd int) error { return unix.IoctlSetInt(fd, unix.TUNSETPERSIST, v) })
	if err != nil {
		return fmt.Errorf("tap %s: TUNSETPERSIST %d: %w", d.name, v, err)
	}
	return nil
}

// Close closes the queue. A Read blocked in another goroutine returns
// ErrClosed. Closing twice returns ErrClosed.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return ErrClosed
	}
	d.fileMu.Lock()
	var err error
	if d.file != nil {
		err = d.file.Close() // wakes a blocked Read
	}
	d.fileMu.Unlock()
	d.guard.close() // waits for the Writes and ioctls in progress
	if cerr := unix.Close(d.fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("tap %s: close: %w", d.name, err)
	}
	d.log.Debug("tap closed", "name", d.name)
	return nil
}

// Stats returns a snapshot of the device's counters.
func (d *Device) Stats() Stats {
	s := Stats{
		RxPackets:       d.stats.rxPackets.Load(),
		RxBytes:         d.stats.rxBytes.Load(),
		RxCsumCompleted: d.stats.rxCsum.Load(),
		RxWaits:         d.stats.rxWaits.Load(),
		TxPackets:       d.stats.txPackets.Load(),
		TxBytes:         d.stats.txBytes.Load(),
		TxErrors:        d.stats.txErrors.Load(),
	}
	for i := range s.RxDrops {
		s.RxDrops[i] = d.stats.rxDrops[i].Load()
	}
	return s
}

// readRaw is the RawConn callback of Read. It returns false (wait for
// readiness) only when the read would block and Read wants to wait.
func (d *Device) readRaw(fd uintptr) bool {
	for {
		n, err := unix.Read(int(fd), d.rbuf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN && d.rwait {
			d.stats.rxWaits.Add(1)
			return false
		}
		d.rn, d.rerr = n, err
		return true
	}
}

// Wake makes a Read blocked waiting for a frame (or the next one, if none
// is) return port.ErrWoken without frames. It is safe to call from any
// goroutine.
func (d *Device) Wake() {
	// The flag is set under fileMu, as takeWake clears it: a Wake whose
	// flag a Read consumed must not set its past deadline after that Read
	// put the caller's back (the next Read then saw a deadline with no
	// wake-up and returned "i/o timeout", which stops a switch worker).
	d.fileMu.Lock()
	defer d.fileMu.Unlock()
	d.woken.Store(true)
	if d.file != nil {
		_ = d.file.SetReadDeadline(time.Unix(1, 0))
	} // else SetPolled(true) applies it
}

// takeWake consumes a Wake, if one is pending, and puts the caller's read
// deadline back in place of the Wake's past one; flag and deadline change
// together under fileMu (Wake).
func (d *Device) takeWake() bool {
	d.fileMu.Lock()
	defer d.fileMu.Unlock()
	if !d.woken.Swap(false) {
		return false
	}
	if d.file != nil {
		_ = d.file.SetReadDeadline(d.callerDeadline())
	}
	return true
}

// Read reads at least one frame, waiting for it, then as many more as are
// ready without waiting, up to len(bufs). Frame i lands at bufs[i][offset:]
// with its port.Meta in meta[i]; its virtio_net_hdr is read into
// bufs[i][offset-VnetHdrLen:offset] and is garbage to the caller. A
// complete frame has its partial checksum filled in and zero Meta.GSO; a
// super-frame (a TAP with TSO or USO) is returned whole, up to 64 KiB, with
// its metadata in Meta.GSO (type, header length, segment size and its
// partial checksum, which is left partial). offset must be at least
// VnetHdrLen. The kernel silently cuts a frame to the buffer, so a read
// that fills a buffer is taken as truncated and dropped (DropTruncated):
// each buffer must hold offset + 14 + MTU plus at least one spare byte
// (offset + packet.MaxSuperFrame + 1 once GSO is enabled). Read does not
// allocate.
func (d *Device) Read(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	if offset < VnetHdrLen {
		return 0, ErrHeadroom
	}
	if d.rc == nil {
		if d.closed.Load() {
			return 0, ErrClosed
		}
		return 0, ErrNotPolled
	}
	limit := min(len(bufs), len(meta))
	n := 0
	var bytes uint64
	for n < limit {
		b := bufs[n]
		if len(b) < offset {
			d.addRx(n, bytes)
			return n, ErrHeadroom
		}
		if !d.charge(bufs, n) {
			break // the budget is spent: the rest waits in the kernel
		}
		raw := b[offset-VnetHdrLen:]
		d.rbuf, d.rwait = raw, n == 0
		err := d.rc.Read(d.readFn)
		m := d.rn
		if err == nil {
			err = d.rerr
		}
		d.rbuf, d.rerr = nil, nil
		if errors.Is(err, os.ErrDeadlineExceeded) && d.takeWake() {
			// Wake: the wake-up is reported now (no frames yet) or,
			// with frames, dropped (the reader is awake anyway).
			if n > 0 {
				break
			}
			d.Uncharge(bufs, 0)
			return 0, port.ErrWoken
		}
		if err != nil {
			// Deliver what we have; a lasting error shows up on the next
			// call, when n is 0.
			if n > 0 {
				break
			}
			if d.closed.Load() {
				return 0, ErrClosed
			}
			return 0, err
		}
		if r, ok := d.check(raw, m, &meta[n]); !ok {
			d.stats.rxDrops[r].Add(1)
			continue
		}
		bytes += uint64(m - VnetHdrLen)
		n++
	}
	d.addRx(n, bytes)
	if d.budget != nil && d.nCharged > port.BudgetFloor {
		if n > 1 {
			d.quiet = 0
		} else if d.quiet++; d.quiet >= budgetShrinkAfter {
			d.quiet = 0
			if den := d.budget.Denied(); den != d.seenDenied {
				// Others were refused meanwhile: the pages past the
				// floor are worth more to them.
				d.seenDenied = den
				d.Uncharge(bufs, port.BudgetFloor)
			}
		}
	}
	return n, nil
}

// CheckFrame is Read's check of one frame, for an I/O engine that reads the
// device's frames itself (package tap/uring): raw holds what one read(2)
// of the TAP returned, m bytes (the virtio_net_hdr and the frame) in a
// buffer of len(raw) bytes. It drops a truncated, short or malformed frame
// (counted in Stats.RxDrops by reason, false), completes the partial
// checksum of a complete frame and fills meta as Read does.
func (d *Device) CheckFrame(raw []byte, m int, meta *port.Meta) bool {
	r, ok := d.check(raw, m, meta)
	if !ok {
		d.stats.rxDrops[r].Add(1)
	}
	return ok
}

// AddRx counts n frames of bytes bytes received by an I/O engine that reads
// the device's frames itself, as Read counts its own.
func (d *Device) AddRx(n int, bytes uint64) { d.addRx(n, bytes) }

// AddTx counts n frames of bytes bytes written and errs failed writes by an
// I/O engine that writes the device's frames itself, as Write counts its
// own.
func (d *Device) AddTx(n int, bytes uint64, errs int) {
	if n > 0 {
		d.stats.txPackets.Add(uint64(n))
		d.stats.txBytes.Add(bytes)
	}
	if errs > 0 {
		d.stats.txErrors.Add(uint64(errs))
	}
}

func (d *Device) addRx(n int, bytes uint64) {
	if n > 0 {
		d.stats.rxPackets.Add(uint64(n))
		d.stats.rxBytes.Add(bytes)
	}
}

// check validates the m bytes read into raw (header and frame), completes
// the partial checksum of a complete frame and fills meta: its size and,
// for a TCP or UDP super-frame, its GSO metadata.
func (d *Device) check(raw []byte, m int, meta *port.Meta) (DropReason, bool) {
	// The kernel cuts a frame to the buffer and returns the cut length
	// (tun_chr_read_iter), so a full buffer may hold a truncated frame.
	if m >= len(raw) {
		return DropTruncated, false
	}
	if m < VnetHdrLen+ethernetLen {
		return DropShort, false
	}
	h, err := ParseVnetHdr(raw[:m])
	if err != nil {
		return DropBadVnetHdr, false
	}
	*meta = port.Meta{Size: m - VnetHdrLen}
	if h.IsGSO() {
		t := h.GSOType() &^ GSOECN
		if t != GSOTCPv4 && t != GSOTCPv6 && t != GSOUDPL4 {
			return DropGSO, false
		}
		meta.GSO = packet.GSO{
			Type:       t,
			NeedsCsum:  h.NeedsCsum(),
			HdrLen:     h.HdrLen(),
			Size:       h.GSOSize(),
			CsumStart:  h.CsumStart(),
			CsumOffset: h.CsumOffset(),
		}
		return 0, true
	}
	if h.NeedsCsum() {
		// ParseVnetHdr checked the offsets.
		CompleteChecksum(raw[VnetHdrLen:m], int(h.CsumStart()), int(h.CsumOffset()))
		d.stats.rxCsum.Add(1)
	}
	return 0, true
}

// write writes one frame with write(2) on the descriptor (the caller holds
// the guard). A TAP takes a frame whole or not at all; it says EAGAIN only
// when the queue's send buffer is full (TUNSETSNDBUF, unlimited by
// default), and write then waits for room, in 10 ms polls, until Close.
func (d *Device) write(pkt []byte) error {
	for {
		_, err := unix.Write(d.fd, pkt)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if d.closed.Load() {
				return ErrClosed
			}
			pfd := []unix.PollFd{{Fd: int32(d.fd), Events: unix.POLLOUT}}
			if _, err := unix.Poll(pfd, 10); err != nil && err != unix.EINTR {
				return fmt.Errorf("tap %s: poll: %w", d.name, err)
			}
			continue
		}
		return fmt.Errorf("tap %s: write: %w", d.name, err)
	}
}

// Write writes frame i, bufs[i][offset:offset+meta[i].Size], with a
// virtio_net_hdr made from meta[i].GSO put in bufs[i][offset-VnetHdrLen:offset],
// one write(2) per frame: zeroed for a complete frame; for a TCP
// super-frame with a partial checksum, its GSO metadata, so that it goes to
// the kernel whole (the kernel segments it, or the pod's stack takes it as
// one large segment). The kernel accepts such frames whatever offloads the
// device was opened with. Write stops at the first error and returns the
// number of frames written. It may be called from several goroutines; it
// does not allocate except to report an error.
func (d *Device) Write(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	if offset < VnetHdrLen {
		return 0, ErrHeadroom
	}
	if !d.guard.acquire() {
		return 0, ErrClosed
	}
	defer d.guard.release()
	var bytes uint64
	n := 0
	var err error
	for i, b := range bufs[:min(len(bufs), len(meta))] {
		m := &meta[i]
		if m.Size < 0 || len(b)-offset < m.Size {
			err = ErrHeadroom
			break
		}
		pkt := b[offset-VnetHdrLen : offset+m.Size]
		VnetHdr(pkt).Put(m.GSO)
		if err = d.write(pkt); err != nil {
			d.stats.txErrors.Add(1)
			if d.closed.Load() {
				err = ErrClosed
			}
			break
		}
		bytes += uint64(m.Size)
		n++
	}
	if n > 0 {
		d.stats.txPackets.Add(uint64(n))
		d.stats.txBytes.Add(bytes)
	}
	return n, err
}
