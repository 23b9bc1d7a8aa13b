package uring

// A Port moves a TAP queue's frames through two rings:
//
//   - Receive: a ring of the reading goroutine's own (SINGLE_ISSUER,
//     DEFER_TASKRUN), made by its first Read, which locks that goroutine to
//     its OS thread. The caller's buffers themselves are the provided
//     buffers (group 0) of one multishot read of the TAP: the kernel reads
//     each frame into whichever buffer is next in the ring, and Read hands
//     the frames back by reordering the caller's bufs so that frame i is in
//     bufs[i]. Buffers go back into the ring at the next Read, when the
//     caller is done with the batch. With DEFER_TASKRUN the kernel copies
//     frames only while the reading thread is inside io_uring_enter, so
//     between two Reads the caller's buffers are all its own, even those
//     the ring holds (the switch gives their pages back when idle).
//   - Transmit: a ring any goroutine may use under the port's lock, without
//     SINGLE_ISSUER; a TAP write completes inline, so one io_uring_enter
//     submits a whole batch and collects its completions.
//
// Wake and Close write an eventfd the receive ring polls.
//
// Rings on demand (the default; PortConfig.Always turns it off): a port
// makes its rings only while it is busy, because every pod has a port and
// most pods are idle. Reads go through the device's read(2) (Go's
// netpoller) until promoteFrames frames came within promoteWindow; then the
// next Read makes the receive ring. Writes of one frame go through the
// device's write(2), which costs the same one system call; the transmit
// ring is made by the first write of a batch. When the switch wakes an idle
// reader (Wake, to trim its buffers), the port gives both up: the receive
// ring, the transmit ring unless it was used since the last wake-up, and
// the OS thread, by returning port.ErrMoveReader with the goroutine still
// locked, so that the thread ends with it.

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/port/busypoll"
	"github.com/gvswitch/gvs/tap"
)

// tagCancel is the user_data of the receive ring's cancel.
const tagCancel = 4

// Where a receive buffer is (rxState.where).
const (
	bufRing   = iota // in the kernel's provided-buffer ring
	bufSpare         // waiting in rxState.spare
	bufQueued        // holds a completed frame not yet returned
	bufLent          // returned by the last Read
)

// The receive ring's adaptive size (rxState.limit). minRing is also the
// floor a ring takes from its budget (PortConfig.Budget) even when spent.
const (
	minRing     = port.BudgetFloor
	shrinkAfter = 256
)

// Sizes of a Port's rings, small because every pod has them (a page or
// two each): the receive ring submits only the multishot read, the wake
// poll and a cancel, and completes one entry per frame (up to a batch
// between two waits, 64 for a TAP); the transmit ring's writes are reaped
// whenever its submission queue is full.
const (
	portTxEntries = 64
	portRxEntries = 8
	portRxCQ      = 128
)

// Rings on demand: how busy a port must be to get its receive ring.
const (
	promoteFrames = 32
	promoteWindow = 100 * time.Millisecond
)

// ErrBuffers is what Port.Read returns when it is given buffers other than
// those of its first call (in the order it left them), or another offset:
// the kernel holds them between calls.
var ErrBuffers = errors.New("uring: Read called with other buffers than its first call")

// Port is a TAP queue whose frames move through io_uring: one system call
// per batch each way instead of one per frame. It is a drop-in for the
// tap.Device it wraps (vswitch.Port, vswitch.Waker): Name, Caps, BatchSize,
// Fd and Stats are the device's, and its counters count the frames the
// rings move. Reads must always come from one goroutine (the switch's
// worker for the queue), which Read locks to its OS thread; Write may be
// called from any goroutine; Close from any, at any time.
//
// Read lends the caller's buffers to the kernel between calls: the caller
// passes the same bufs to every Read (Read may reorder its entries: frame
// i is returned in bufs[i]) and the same offset, and writes into none of
// them while a Read is in progress.
type Port struct {
	*tap.Device
	always bool     // PortConfig.Always
	wake   *os.File // eventfd: Wake and Close
	closed atomic.Bool
	// plainRx: the receive ring could not be made; the device reads.
	plainRx atomic.Bool
	// ringRx: the receive ring is up (Wake kicks it rather than the
	// device). ringTx: the transmit ring is.
	ringRx, ringTx atomic.Bool

	rx rxState // the reading goroutine's

	txMu   sync.Mutex
	tx     *ring // nil until the first Write of a batch, and after Close
	txDone bool  // Close has run: no more rings
	txUsed bool  // the transmit ring has been used since the last wake-up
	txPend int
	txOK   int
	txErr  int32
	// txPlain: the transmit ring could not be made; writes go through the
	// device.
	txPlain bool
}

// PortConfig tunes a Port (NewPortConfig). The zero value is NewPort's.
type PortConfig struct {
	// Always makes the receive ring at the first Read and the transmit
	// ring at the first Write and keeps them until Close, with the
	// reading goroutine locked to its thread all along: for a port that
	// is never idle, and for measuring the rings themselves. By default
	// the rings are made on demand (see Port) and an idle port holds
	// neither rings nor a thread.
	Always bool
	// BusyPoll, when not nil, lets the reader poll its receive ring
	// within an adaptive window (package busypoll) before it sleeps in
	// io_uring_enter. Only a port with its receive ring polls: a port
	// reading through the device is idle by definition.
	BusyPoll *busypoll.Poller
	// Budget, when not nil, bounds the receive buffers that the rings of
	// all the ports sharing it may hold resident (port.Budget): a ring
	// takes a buffer's bytes from it before the kernel may fill that
	// buffer for the first time since its pages were given back, and
	// grows no further while the budget is spent; each ring has a floor
	// of minRing buffers it takes even then. A ring gives the pages of
	// its spare buffers back, and their bytes to the budget, when it
	// shrinks while the budget refuses others and when its idle reader
	// is woken, and all of them when it ends. While the port reads through the device (rings on demand),
	// the device counts its reads in the same budget
	// (tap.Device.SetBudget), and gives back what it counted when the
	// ring takes over.
	Budget *port.Budget
}

// rxState is the receive side, touched only by the reading goroutine.
type rxState struct {
	r *ring
	// busy is the reader's busy-polling window (nil: off); try is
	// rx.poll, kept so that polling does not allocate.
	busy *busypoll.Reader
	try  func() bool
	// Rings on demand: frames read through the device since windowStart
	// (nanoseconds since epoch), and whether the next Read makes the
	// ring.
	plainFrames int
	windowStart int64
	promote     bool
	// tapFd and wakeFd are the ring's own duplicates of the TAP queue's
	// and the eventfd's descriptors: Close may close the originals while
	// the reader still arms operations, and a reused number must never
	// point the ring at another file.
	tapFd, wakeFd int
	pbr           []byte
	pbufs         []pbuf
	pbTail        uint16
	mask          int
	offset        int
	reg           [][]byte // the caller's buffers, by buffer id
	order         []uint16 // the buffer id in each slot of the caller's bufs
	nLent         int      // bufs[:nLent] were returned by the last Read
	where         []uint8  // by buffer id: bufRing, bufSpare, bufQueued or bufLent
	// The kernel's ring holds at most limit buffers (nRing now); the
	// others wait in spare, the most recently used on top, so that a
	// quiet pod's few frames keep landing in the same few buffers (pages)
	// instead of going round all of them. limit doubles when a batch
	// fills half of it or the read ran out of buffers, and halves after
	// quiet (shrinkAfter batches of at most one frame), never below
	// minRing.
	nRing, limit, quiet int
	spare               []uint16
	queue               []rxDone // completions not yet returned
	armed               bool
	full                bool // the read ran out of buffers since the last batch
	woken               bool
	err                 error // the multishot read ended with an error
	// budget is PortConfig.Budget; charged[bid] tells whether buffer bid
	// is counted in it (it may hold resident pages).
	budget  *port.Budget
	charged []bool
	// seenDenied is the budget's refusals when the ring last swept.
	seenDenied uint64
	// beforeWait, when set (tests: SetHookBeforeWait), runs each time the
	// reader is about to sleep in io_uring_enter for frames.
	beforeWait func()
}

// NewPort wraps the TAP queue d, with rings on demand (see Port). It fails
// with ErrUnsupported when the kernel lacks what the port needs
// (Supported); d is then still the caller's.
func NewPort(d *tap.Device) (*Port, error) {
	return NewPortConfig(d, PortConfig{})
}

// NewPortConfig is NewPort with a configuration.
func NewPortConfig(d *tap.Device, cfg PortConfig) (*Port, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("uring: eventfd: %w", err)
	}
	p := &Port{Device: d, always: cfg.Always, wake: os.NewFile(uintptr(fd), "uring-wake")}
	p.rx.promote = cfg.Always
	p.rx.busy = cfg.BusyPoll.Reader()
	p.rx.budget = cfg.Budget
	if cfg.Budget != nil {
		d.SetBudget(cfg.Budget)
	}
	p.rx.try = p.rx.poll
	return p, nil
}

// hookBeforeCancel, when set (tests), runs when a woken idle reader is
// about to end its read and give its ring up.
var hookBeforeCancel func()

// epoch is the origin of the rings-on-demand clock.
var epoch = time.Now()

var probe struct {
	once sync.Once
	err  error
}

// Supported reports whether this kernel runs a Port: io_uring enabled,
// SINGLE_ISSUER and DEFER_TASKRUN (Linux 6.1), provided-buffer rings (5.19)
// and multishot read (6.7). The answer is probed once, on a ring of a
// throwaway thread, and kept; an error wraps ErrUnsupported.
func Supported() error {
	probe.once.Do(func() {
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // the thread dies with the goroutine (Go parks the main thread instead)
			done <- probeKernel()
		}()
		probe.err = <-done
	})
	return probe.err
}

func probeKernel() error {
	r, err := newRing(8, 0, false)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	defer r.close()
	if r.flags&setupDeferTaskrun == 0 {
		return fmt.Errorf("%w: no IORING_SETUP_DEFER_TASKRUN", ErrUnsupported)
	}
	// struct io_uring_probe: last_op, ops_len, resv, resv2[3], then
	// struct io_uring_probe_op {op, resv, flags u16, resv2 u32} per op.
	const nOps = 256
	buf := make([]byte, 16+8*nOps)
	if err := register(r.fd, registerProbe, unsafe.Pointer(&buf[0]), nOps); err != nil {
		return fmt.Errorf("%w: IORING_REGISTER_PROBE: %w", ErrUnsupported, err)
	}
	const supported = 1
	op := buf[16+8*opReadMultishot:]
	if int(buf[0]) < opReadMultishot || op[2]&supported == 0 {
		return fmt.Errorf("%w: no IORING_OP_READ_MULTISHOT (Linux 6.7)", ErrUnsupported)
	}
	ring, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(ring)
	reg := bufReg{ringAddr: uint64(uintptr(unsafe.Pointer(&ring[0]))), ringEntries: 8}
	if err := register(r.fd, registerPbufRing, unsafe.Pointer(&reg), 1); err != nil {
		return fmt.Errorf("%w: IORING_REGISTER_PBUF_RING: %w", ErrUnsupported, err)
	}
	return nil
}

// Rings reports which rings the port holds now: the receive ring (and
// with it a locked OS thread) and the transmit ring.
func (p *Port) Rings() (rx, tx bool) {
	return p.ringRx.Load(), p.ringTx.Load()
}

// The rings the process's ports hold now (LiveRings).
var liveRx, liveTx atomic.Int64

// LiveRings returns how many receive rings (each with a locked OS thread)
// and transmit rings the process's ports hold now: what Rings reports,
// summed over every Port not yet closed, and over closed ones whose reader
// has not yet returned from Read.
func LiveRings() (rx, tx int) {
	return int(liveRx.Load()), int(liveTx.Load())
}

// setRing records that a ring of one side is up (on) or down, counting
// the change in live.
func setRing(flag *atomic.Bool, live *atomic.Int64, on bool) {
	if flag.Swap(on) != on {
		if on {
			live.Add(1)
		} else {
			live.Add(-1)
		}
	}
}

// Holds reports whether the port holds rings it would give up if its
// reader were woken idle (vswitch.Holder): never with PortConfig.Always.
func (p *Port) Holds() bool {
	return !p.always && (p.ringRx.Load() || p.ringTx.Load())
}

// Fallback reports which sides gave up their ring for the device's own
// system calls (a ring could not be made: a memory limit, a seccomp
// filter): receive once a Read has run, transmit once a Write has.
func (p *Port) Fallback() (rx, tx bool) {
	p.txMu.Lock()
	defer p.txMu.Unlock()
	return p.plainRx.Load(), p.txPlain
}

// Wake makes the Read in progress, or the next, return port.ErrWoken
// without frames (vswitch.Waker). Any goroutine may call it.
func (p *Port) Wake() {
	if !p.ringRx.Load() {
		// Between reads through the device (or about to make the ring:
		// then the wake-up is reported later, by the device, which is
		// harmless).
		p.Device.Wake()
		return
	}
	p.kick()
}

func (p *Port) kick() {
	var one [8]byte
	one[0] = 1
	_, _ = p.wake.Write(one[:])
}

// Close closes the port and the device; a blocked Read returns
// tap.ErrClosed and releases its ring.
func (p *Port) Close() error {
	if p.closed.Swap(true) {
		return tap.ErrClosed
	}
	p.kick()
	p.txMu.Lock()
	if p.tx != nil {
		p.tx.close()
		p.tx = nil
		setRing(&p.ringTx, &liveTx, false)
	}
	p.txDone = true
	p.txMu.Unlock()
	err := p.Device.Close()
	p.wake.Close()
	return err
}

// Read waits for at least one frame and returns the frames received so
// far, up to len(bufs), as tap.Device.Read does, reordering bufs' entries
// so that frame i is in bufs[i] (see Port). It returns port.ErrWoken after
// Wake — port.ErrMoveReader when it gave up its rings and the calling
// goroutine's thread, which ends with the goroutine (rings on demand) — and
// tap.ErrClosed after Close.
func (p *Port) Read(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	rx := &p.rx
	if p.plainRx.Load() {
		return p.Device.Read(bufs, meta, offset)
	}
	if rx.r == nil {
		if p.closed.Load() {
			return 0, tap.ErrClosed
		}
		if !rx.promote {
			return p.readDevice(bufs, meta, offset)
		}
		if err := p.setupRx(bufs, offset); err != nil {
			// Fall back to the device's own reads, for good.
			p.plainRx.Store(true)
			return p.Device.Read(bufs, meta, offset)
		}
		// The ring reads the device now: out of Go's netpoller, whose
		// registration every frame of the pod would wake for nothing.
		if err := p.Device.SetPolled(false); err != nil {
			rx.err = err
		}
		// This goroutine came out of the netpoller, often on the thread
		// that was polling it, which it has just locked and is about to
		// block in io_uring_enter without giving up its processor. No
		// idle thread wakes to poll the network in its place, so every
		// other goroutine waiting there (vxlan0's reader) would wait for
		// sysmon, 10–20 ms (bench/results/2026-11-29-stall.md). Starting
		// a goroutine wakes an idle thread, which runs it and then takes
		// over the netpoller. Once per promotion, not per frame.
		go func() {}()
	} else if err := rx.check(bufs, offset); err != nil {
		return 0, err
	}
	rx.giveBack()
	limit := min(len(bufs), len(meta))
	for {
		if len(rx.queue) > 0 {
			return p.take(bufs, meta, limit), nil
		}
		if p.closed.Load() {
			p.teardown(true)
			return 0, tap.ErrClosed
		}
		if rx.err != nil {
			err := rx.err
			p.teardown(true)
			return 0, err
		}
		if rx.woken {
			rx.woken = false
			var b [8]byte
			_, _ = unix.Read(rx.wakeFd, b[:]) // non-blocking
			if !p.always {
				if hookBeforeCancel != nil {
					hookBeforeCancel()
				}
				if p.cancelRx(); len(rx.queue) > 0 {
					// Frames came while the read was being ended:
					// not idle after all. Return them and keep the
					// ring, watching for wake-ups (and Close) again;
					// the next Read arms the read again.
					if err := rx.armWake(); err != nil {
						rx.err = err
					}
					return p.take(bufs, meta, limit), nil
				}
				p.teardown(false)
				rx.promote = false
				p.dropIdleTx()
				return 0, port.ErrMoveReader
			}
			if err := rx.armWake(); err != nil {
				rx.err = err
				continue
			}
			rx.sweep()
			return 0, port.ErrWoken
		}
		if !rx.armed {
			s, err := rx.sqe()
			if err != nil {
				rx.err = err
				continue
			}
			s.opcode, s.flags, s.fd, s.userData = opReadMultishot, sqeBufferSelect, int32(rx.tapFd), tagRx
			rx.armed = true
		}
		if rx.busy.Poll(rx.try) {
			continue
		}
		rx.busy.Sleep()
		if rx.beforeWait != nil {
			rx.beforeWait()
		}
		err := rx.r.submit(1)
		rx.busy.Woke()
		if err != nil {
			rx.err = err
			continue
		}
		rx.reap()
	}
}

// poll is one try of busy polling: submit what is prepared, run the
// completions the kernel deferred to this thread without waiting for any,
// and report whether Read has something to act on.
func (rx *rxState) poll() bool {
	if err := rx.r.submit(0); err != nil {
		rx.err = err
		return true
	}
	rx.reap()
	return len(rx.queue) > 0 || rx.woken || rx.err != nil
}

// readDevice reads through the device while the port has no receive ring,
// counting frames toward making one (rings on demand).
func (p *Port) readDevice(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	n, err := p.Device.Read(bufs, meta, offset)
	rx := &p.rx
	if n > 0 {
		now := int64(time.Since(epoch))
		if now-rx.windowStart > int64(promoteWindow) {
			rx.windowStart, rx.plainFrames = now, 0
		}
		if rx.plainFrames += n; rx.plainFrames >= promoteFrames {
			rx.promote, rx.plainFrames = true, 0
		}
	}
	if errors.Is(err, port.ErrWoken) {
		p.dropIdleTx()
	}
	return n, err
}

// dropIdleTx closes the transmit ring unless it was used since the last
// call (rings on demand; the reader calls it when woken).
func (p *Port) dropIdleTx() {
	p.txMu.Lock()
	defer p.txMu.Unlock()
	if p.tx != nil && !p.txUsed {
		p.tx.close()
		p.tx = nil
		setRing(&p.ringTx, &liveTx, false)
	}
	p.txUsed = false
}

// setupRx makes the receive ring on this goroutine's thread, with bufs as
// its buffers.
func (p *Port) setupRx(bufs [][]byte, offset int) (err error) {
	rx := &p.rx
	if offset < tap.VnetHdrLen || len(bufs) == 0 || len(bufs) > 1<<15 {
		return fmt.Errorf("uring: %d buffers at offset %d", len(bufs), offset)
	}
	for _, b := range bufs {
		if len(b) < offset+60 {
			return fmt.Errorf("uring: a buffer of %d bytes: %w", len(b), ErrHeadroom)
		}
	}
	// The device's reads counted some of bufs; the ring counts its own.
	p.Device.Uncharge(bufs, 0)
	runtime.LockOSThread()
	rx.tapFd, rx.wakeFd = -1, -1
	rx.err, rx.woken, rx.full = nil, false, false
	defer func() {
		if err != nil {
			p.teardown(true)
		}
	}()
	if rx.tapFd, err = unix.Dup(p.Fd()); err != nil {
		return fmt.Errorf("uring: dup: %w", err)
	}
	rc, err := p.wake.SyscallConn()
	if err != nil {
		return err
	}
	var derr error
	if err := rc.Control(func(fd uintptr) { rx.wakeFd, derr = unix.Dup(int(fd)) }); err != nil || derr != nil {
		return fmt.Errorf("uring: dup: %w", errors.Join(err, derr))
	}
	if rx.r, err = newRing(portRxEntries, portRxCQ, false); err != nil {
		return err
	}
	if rx.r.flags&setupDeferTaskrun == 0 {
		return fmt.Errorf("%w: no DEFER_TASKRUN", ErrUnsupported)
	}
	entries := 1
	for entries < len(bufs) {
		entries <<= 1
	}
	size := max(entries*int(unsafe.Sizeof(pbuf{})), 4096)
	if rx.pbr, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return fmt.Errorf("uring: buffer ring: %w", err)
	}
	rx.pbufs = unsafe.Slice((*pbuf)(unsafe.Pointer(&rx.pbr[0])), entries)
	rx.mask = entries - 1
	rx.pbTail = 0 // a new ring starts at 0; the one before this may have left its tail anywhere
	reg := bufReg{ringAddr: uint64(uintptr(unsafe.Pointer(&rx.pbr[0]))), ringEntries: uint32(entries)}
	if err := register(rx.r.fd, registerPbufRing, unsafe.Pointer(&reg), 1); err != nil {
		return fmt.Errorf("uring: IORING_REGISTER_PBUF_RING: %w", err)
	}
	rx.offset = offset
	rx.reg = append([][]byte(nil), bufs...)
	rx.order = make([]uint16, len(bufs))
	rx.where = make([]uint8, len(bufs))
	rx.queue = make([]rxDone, 0, len(bufs))
	rx.spare = make([]uint16, 0, len(bufs))
	rx.charged = make([]bool, len(bufs))
	rx.nRing, rx.limit, rx.quiet = 0, min(minRing, len(bufs)), 0
	for i := len(bufs) - 1; i >= 0; i-- {
		rx.order[i] = uint16(i)
		rx.release(uint16(i))
	}
	rx.publish()
	// A wake-up left from before the ring (or from the last one) would
	// only end the first wait at once.
	var b [8]byte
	_, _ = unix.Read(rx.wakeFd, b[:])
	if err := rx.armWake(); err != nil {
		return err
	}
	setRing(&p.ringRx, &liveRx, true)
	return nil
}

// check verifies that bufs are the registered buffers in the order the
// last Read left them.
func (rx *rxState) check(bufs [][]byte, offset int) error {
	if offset != rx.offset || len(bufs) != len(rx.order) {
		return ErrBuffers
	}
	for i, b := range bufs {
		if unsafe.SliceData(b) != unsafe.SliceData(rx.reg[rx.order[i]]) || len(b) != len(rx.reg[rx.order[i]]) {
			return ErrBuffers
		}
	}
	return nil
}

// giveBack returns the last batch's buffers to the kernel (or to spare).
func (rx *rxState) giveBack() {
	if rx.nLent == 0 {
		return
	}
	for i := rx.nLent - 1; i >= 0; i-- {
		rx.release(rx.order[i])
	}
	rx.nLent = 0
	rx.publish()
}

// release makes buffer bid free: into the kernel's ring if it holds fewer
// than limit, else on top of spare. The caller publishes.
func (rx *rxState) release(bid uint16) {
	if rx.nRing < rx.limit {
		rx.provide(bid)
		return
	}
	rx.where[bid] = bufSpare
	rx.spare = append(rx.spare, bid)
}

// adapt sizes the ring after a batch of n frames (full: the read ran out
// of buffers) and tops it up from spare. The caller publishes.
func (rx *rxState) adapt(n int, full bool) {
	switch {
	case full || 2*n >= rx.limit:
		rx.limit, rx.quiet = min(2*rx.limit, len(rx.reg)), 0
	case n <= 1:
		if rx.quiet++; rx.quiet >= shrinkAfter {
			rx.limit, rx.quiet = max(rx.limit/2, minRing), 0
			if d := rx.budget.Denied(); d != rx.seenDenied {
				// Someone was refused since this ring last looked:
				// its spare buffers are worth more elsewhere.
				rx.seenDenied = d
				rx.sweep()
			}
		}
	}
	for rx.nRing < rx.limit && len(rx.spare) > 0 {
		bid := rx.spare[len(rx.spare)-1]
		if !rx.charge(bid, false) {
			// The budget is spent: the ring works with the buffers
			// it has, which come back to it batch by batch.
			break
		}
		rx.spare = rx.spare[:len(rx.spare)-1]
		rx.provide(bid)
	}
}

// charge counts buffer bid in the budget, if it is not counted yet,
// before the kernel may fill it: within the budget, or with force beyond
// it (the ring's floor). It reports whether bid is counted now.
func (rx *rxState) charge(bid uint16, force bool) bool {
	if rx.charged[bid] {
		return true
	}
	n := int64(len(rx.reg[bid]))
	if force {
		rx.budget.Force(n)
	} else if !rx.budget.Take(n) {
		return false
	}
	rx.charged[bid] = true
	return true
}

// uncharge gives buffer bid's pages back to the system and its bytes to
// the budget: only for a buffer the kernel cannot write (not in the ring)
// and the caller does not hold (not lent).
func (rx *rxState) uncharge(bid uint16) {
	if !rx.charged[bid] {
		return
	}
	port.ReleasePages(rx.reg[bid])
	rx.charged[bid] = false
	rx.budget.Give(int64(len(rx.reg[bid])))
}

// sweep uncharges the buffers waiting in spare: when the ring shrinks
// while the budget refuses others, and when its idle reader is woken.
// Without a budget it does nothing (the switch gives the pages back when
// the port is idle). Not at every shrink: a ring of a bursty pod shrinks
// and grows again and again, and each sweep costs a madvise per buffer
// and a page fault per page when the buffer is filled again — for pages
// nobody else is waiting for.
func (rx *rxState) sweep() {
	if rx.budget == nil {
		return
	}
	for _, bid := range rx.spare {
		rx.uncharge(bid)
	}
}

func (rx *rxState) provide(bid uint16) {
	rx.charge(bid, true)
	b := &rx.pbufs[int(rx.pbTail)&rx.mask]
	buf := rx.reg[bid]
	b.addr = uint64(uintptr(unsafe.Pointer(&buf[rx.offset-tap.VnetHdrLen])))
	b.len = uint32(len(buf) - rx.offset + tap.VnetHdrLen)
	b.bid = bid
	rx.where[bid] = bufRing
	rx.nRing++
	rx.pbTail++
}

// publish stores the buffer ring's tail (the u16 at byte 14): see
// Engine.publish.
func (rx *rxState) publish() {
	p := (*uint32)(unsafe.Pointer(&rx.pbr[12]))
	for {
		old := atomic.LoadUint32(p)
		if atomic.CompareAndSwapUint32(p, old, old&0xffff|uint32(rx.pbTail)<<16) {
			return
		}
	}
}

func (rx *rxState) armWake() error {
	s, err := rx.sqe()
	if err != nil {
		return err
	}
	s.opcode, s.fd, s.opFlags, s.userData = opPollAdd, int32(rx.wakeFd), pollIn, tagWake
	return nil
}

// sqe returns a free SQE, submitting what is prepared if there is none.
func (rx *rxState) sqe() (*sqe, error) {
	if s := rx.r.get(); s != nil {
		return s, nil
	}
	if err := rx.r.submit(0); err != nil {
		return nil, err
	}
	rx.reap()
	if s := rx.r.get(); s != nil {
		return s, nil
	}
	return nil, errors.New("uring: submission queue full")
}

// reap consumes every completion of the receive ring.
func (rx *rxState) reap() {
	for c := rx.r.peek(); c != nil; c = rx.r.peek() {
		switch c.userData {
		case tagRx:
			if c.flags&cqeFBuffer != 0 {
				bid := uint16(c.flags >> cqeBufShift)
				if int(bid) < len(rx.reg) && rx.where[bid] == bufRing {
					rx.nRing--
					if c.res > 0 {
						rx.queue = append(rx.queue, rxDone{bid: bid, n: c.res})
						rx.where[bid] = bufQueued
					} else {
						rx.release(bid)
						rx.publish()
					}
				}
			}
			if c.flags&cqeFMore == 0 {
				rx.armed = false
				// ENOBUFS: every buffer is lent or queued; the read is
				// armed again once some come back, with a larger ring.
				// ECANCELED: teardown.
				if c.res == -int32(unix.ENOBUFS) {
					rx.full = true
				}
				if c.res < 0 && c.res != -int32(unix.ENOBUFS) && c.res != -int32(unix.ECANCELED) && rx.err == nil {
					rx.err = fmt.Errorf("uring: read: %w", unix.Errno(-c.res))
				}
			}
		case tagWake:
			rx.woken = true
		}
		rx.r.advance()
	}
}

// take returns up to limit queued frames in bufs[:n] and puts the other
// buffers in bufs[n:].
func (p *Port) take(bufs [][]byte, meta []port.Meta, limit int) int {
	rx := &p.rx
	n, used := 0, 0
	var bytes uint64
	for _, d := range rx.queue {
		if n == limit {
			break
		}
		used++
		buf := rx.reg[d.bid]
		raw := buf[rx.offset-tap.VnetHdrLen:]
		if !p.CheckFrame(raw, int(d.n), &meta[n]) {
			rx.release(d.bid)
			continue
		}
		rx.where[d.bid] = bufLent
		rx.order[n] = d.bid
		bytes += uint64(meta[n].Size)
		n++
	}
	rx.queue = rx.queue[:copy(rx.queue, rx.queue[used:])]
	rx.adapt(n, rx.full)
	rx.full = false
	rx.publish()
	// The rest of the slots: every buffer not returned now, in any order.
	k := n
	for bid := range rx.reg {
		if rx.where[bid] != bufLent {
			rx.order[k] = uint16(bid)
			k++
		}
	}
	for i := range bufs {
		bufs[i] = rx.reg[rx.order[i]]
	}
	rx.nLent = n
	p.AddRx(n, bytes)
	return n
}

// cancelRx ends the multishot read and waits for its last completion; the
// frames it completed before that are queued (rx.queue).
func (p *Port) cancelRx() {
	rx := &p.rx
	if !rx.armed || rx.r == nil || rx.r.fd < 0 {
		return
	}
	if s, err := rx.sqe(); err == nil {
		s.opcode, s.addr, s.userData = opAsyncCancel, tagRx, tagCancel
	}
	// The read's last completion (ECANCELED) frees its hold on the TAP
	// now rather than in the ring's deferred teardown.
	for i := 0; rx.armed && i < 100; i++ {
		if rx.r.submit(1) != nil {
			break
		}
		rx.reap()
	}
}

// teardown ends the multishot read, waits for its last completion and
// releases the receive ring. With unlock the thread is unlocked; without,
// the goroutine stays locked, for the thread to end with it.
func (p *Port) teardown(unlock bool) {
	rx := &p.rx
	setRing(&p.ringRx, &liveRx, false)
	if rx.r != nil {
		p.cancelRx()
		rx.r.close()
		rx.r = nil
	}
	if rx.pbr != nil {
		_ = unix.Munmap(rx.pbr)
		rx.pbr, rx.pbufs = nil, nil
	}
	for _, fd := range []*int{&rx.tapFd, &rx.wakeFd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	rx.queue, rx.armed, rx.nLent = rx.queue[:0], false, 0
	// Nothing writes the buffers any more: all of them go back.
	if rx.budget != nil {
		for bid := range rx.charged {
			rx.uncharge(uint16(bid))
		}
	}
	if err := p.Device.SetPolled(true); err != nil && !p.closed.Load() {
		// Reads through the device cannot wait without it: give the
		// error to the next Read (the plain path reports it).
		p.plainRx.Store(true)
	}
	if unlock {
		runtime.UnlockOSThread()
	}
}

// Write writes the frames as tap.Device.Write does, in one io_uring_enter
// per batch (of up to 64 frames). It returns the number of frames the
// kernel took.
func (p *Port) Write(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	if offset < tap.VnetHdrLen {
		return 0, tap.ErrHeadroom
	}
	p.txMu.Lock()
	defer p.txMu.Unlock()
	if p.txDone {
		return 0, tap.ErrClosed
	}
	if p.txPlain {
		return p.Device.Write(bufs, meta, offset)
	}
	if p.tx == nil {
		if !p.always && min(len(bufs), len(meta)) < 2 {
			// One frame: write(2) is the same one system call.
			return p.Device.Write(bufs, meta, offset)
		}
		r, err := newRing(portTxEntries, portTxEntries, true)
		if err != nil {
			p.txPlain = true
			return p.Device.Write(bufs, meta, offset)
		}
		p.tx = r
		setRing(&p.ringTx, &liveTx, true)
	}
	p.txUsed = true
	bufs = bufs[:min(len(bufs), len(meta))]
	var err error
	for i, b := range bufs {
		if m := &meta[i]; m.Size < 0 || len(b)-offset < m.Size {
			bufs, err = bufs[:i], tap.ErrHeadroom
			break
		}
	}
	p.txOK = 0
	fd := int32(p.Fd())
	var bytes uint64
	for i, b := range bufs {
		pkt := b[offset-tap.VnetHdrLen : offset+meta[i].Size]
		tap.VnetHdr(pkt).Put(meta[i].GSO)
		s := p.tx.get()
		if s == nil {
			if err := p.flushTx(); err != nil {
				return p.txOK, err
			}
			s = p.tx.get()
		}
		s.opcode, s.fd = opWrite, fd
		s.addr, s.len, s.userData = uint64(uintptr(unsafe.Pointer(&pkt[0]))), uint32(len(pkt)), tagTx
		p.txPend++
		bytes += uint64(meta[i].Size)
	}
	ferr := p.flushTx()
	runtime.KeepAlive(bufs)
	n, errs := p.txOK, len(bufs)-p.txOK
	if n < len(bufs) {
		// Which frames failed is not known; count the batch's bytes
		// only when every frame went.
		bytes = 0
		for _, m := range meta[:n] {
			bytes += uint64(m.Size)
		}
	}
	p.AddTx(n, bytes, errs)
	if p.txErr != 0 {
		ferr = errors.Join(ferr, fmt.Errorf("uring: write: %w", unix.Errno(p.txErr)))
		p.txErr = 0
	}
	return n, errors.Join(err, ferr)
}

// flushTx submits the prepared writes and waits for their completions.
func (p *Port) flushTx() error {
	for p.txPend > 0 {
		if err := p.tx.submit(uint32(p.txPend)); err != nil {
			p.txPend = 0
			return err
		}
		for c := p.tx.peek(); c != nil; c = p.tx.peek() {
			p.txPend--
			if c.res >= 0 {
				p.txOK++
			} else if p.txErr == 0 {
				p.txErr = -c.res
			}
			p.tx.advance()
		}
	}
	return nil
}
