package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is one io_uring instance: the submission queue, the completion
// queue, and the array of SQEs, all mapped from the kernel.
type ring struct {
	fd       int
	flags    uint32 // setup flags in effect
	features uint32

	rings  []byte // SQ and CQ rings (one mapping with IORING_FEAT_SINGLE_MMAP)
	cqMap  []byte // the CQ ring's own mapping on older kernels, else nil
	sqeMap []byte
	sqes   []sqe

	sqHead, sqTail *uint32
	sqMask         uint32
	sqLocalTail    uint32 // SQEs prepared, published to *sqTail by submit

	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []cqe

	syscalls atomic.Uint64 // io_uring_enter calls
}

// newRing sets up a ring of entries SQEs and cqEntries CQEs (powers of
// two; 0: four times entries). It asks for SINGLE_ISSUER|DEFER_TASKRUN and falls back to no
// flags on a kernel that refuses them. A shared ring (any thread submits,
// under its user's lock) asks for neither: its operations must complete
// inline, as TAP writes do.
func newRing(entries, cqEntries uint32, shared bool) (*ring, error) {
	if cqEntries == 0 {
		cqEntries = 4 * entries
	}
	var p params
	var fd int
	var err error
	tries := [][]uint32{
		{setupSingleIssuer | setupDeferTaskrun | setupSubmitAll | setupCQSize | setupClamp,
			setupCoopTaskrun | setupCQSize | setupClamp,
			setupCQSize | setupClamp},
		{setupSubmitAll | setupCQSize | setupClamp, setupCQSize | setupClamp},
	}[btoi(shared)]
	for _, flags := range tries {
		p = params{flags: flags, cqEntries: cqEntries}
		fd, err = setup(entries, &p)
		if !errors.Is(err, unix.EINVAL) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("uring: io_uring_setup: %w", err)
	}
	r := &ring{fd: fd, flags: p.flags, features: p.features}
	if err := r.mmap(&p); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (r *ring) mmap(p *params) error {
	sqSize := p.sqOff.array + p.sqEntries*4
	cqSize := p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(cqe{}))
	single := p.features&featSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	var err error
	if r.rings, err = unix.Mmap(r.fd, offSQRing, int(sqSize), prot, flags); err != nil {
		return fmt.Errorf("uring: mmap SQ ring: %w", err)
	}
	cq := r.rings
	if !single {
		if r.cqMap, err = unix.Mmap(r.fd, offCQRing, int(cqSize), prot, flags); err != nil {
			return fmt.Errorf("uring: mmap CQ ring: %w", err)
		}
		cq = r.cqMap
	}
	sqeSize := int(p.sqEntries) * int(unsafe.Sizeof(sqe{}))
	if r.sqeMap, err = unix.Mmap(r.fd, offSQEs, sqeSize, prot, flags); err != nil {
		return fmt.Errorf("uring: mmap SQEs: %w", err)
	}
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMap[0])), p.sqEntries)
	r.sqHead, r.sqTail = u32(r.rings, p.sqOff.head), u32(r.rings, p.sqOff.tail)
	r.sqMask = *u32(r.rings, p.sqOff.ringMask)
	// The SQ array maps ring slots to SQE indexes; keep it the identity.
	array := unsafe.Slice(u32(r.rings, p.sqOff.array), p.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.cqHead, r.cqTail = u32(cq, p.cqOff.head), u32(cq, p.cqOff.tail)
	r.cqMask = *u32(cq, p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&cq[p.cqOff.cqes])), p.cqEntries)
	r.sqLocalTail = load(r.sqTail)
	return nil
}

func (r *ring) close() {
	for _, m := range [][]byte{r.sqeMap, r.cqMap, r.rings} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMap, r.cqMap, r.rings, r.sqes, r.cqes = nil, nil, nil, nil, nil
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// get returns a zeroed free SQE, or nil if the queue is full.
func (r *ring) get() *sqe {
	head := load(r.sqHead)
	if r.sqLocalTail-head > r.sqMask {
		return nil
	}
	s := &r.sqes[r.sqLocalTail&r.sqMask]
	*s = sqe{}
	r.sqLocalTail++
	return s
}

// submit publishes the prepared SQEs and calls io_uring_enter once,
// waiting for wait completions. It retries on EINTR.
func (r *ring) submit(wait uint32) error {
	store(r.sqTail, r.sqLocalTail)
	flags := uint32(0)
	if wait > 0 || r.flags&setupDeferTaskrun != 0 {
		// With DEFER_TASKRUN, completions are run only by a GETEVENTS
		// enter, even one that does not wait.
		flags |= enterGetEvents
	}
	for {
		r.syscalls.Add(1)
		// The kernel consumes SQEs from its head to the tail we published.
		_, err := enter(r.fd, r.sqLocalTail-load(r.sqHead), wait, flags)
		if err == unix.EINTR {
			continue
		}
		if err != nil && !errors.Is(err, unix.ETIME) {
			return fmt.Errorf("uring: io_uring_enter: %w", err)
		}
		return nil
	}
}

// peek returns the next completion, or nil.
func (r *ring) peek() *cqe {
	head := load(r.cqHead)
	if head == load(r.cqTail) {
		return nil
	}
	return &r.cqes[head&r.cqMask]
}

// advance consumes one completion.
func (r *ring) advance() { store(r.cqHead, load(r.cqHead)+1) }
