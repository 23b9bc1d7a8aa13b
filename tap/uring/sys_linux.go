package uring

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kernel ABI of io_uring (include/uapi/linux/io_uring.h).
const (
	opNop           = 0
	opReadFixed     = 4
	opWriteFixed    = 5
	opPollAdd       = 6
	opRead          = 22
	opWrite         = 23
	opAsyncCancel   = 14
	opReadMultishot = 49

	sqeFixedFile    = 1 << 0
	sqeBufferSelect = 1 << 5

	setupCQSize       = 1 << 3
	setupClamp        = 1 << 4
	setupSubmitAll    = 1 << 7
	setupCoopTaskrun  = 1 << 8
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13

	enterGetEvents = 1 << 0

	featSingleMmap = 1 << 0

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	registerBuffers  = 0
	registerFiles    = 2
	registerProbe    = 8
	registerPbufRing = 22

	cqeFBuffer  = 1 << 0
	cqeFMore    = 1 << 1
	cqeBufShift = 16

	pollIn = 0x1
)

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// sqe is struct io_uring_sqe (64 bytes).
type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufIndex    uint16 // buf_index, or buf_group with IOSQE_BUFFER_SELECT
	personality uint16
	fileIndex   uint32
	addr3       uint64
	_           uint64
}

// cqe is struct io_uring_cqe (16 bytes).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// bufReg is struct io_uring_buf_reg.
type bufReg struct {
	ringAddr    uint64
	ringEntries uint32
	bgid        uint16
	flags       uint16
	_           [3]uint64
}

// pbuf is struct io_uring_buf, an entry of a provided-buffer ring. The
// ring's tail is the u16 at byte 14 of its first entry.
type pbuf struct {
	addr uint64
	len  uint32
	bid  uint16
	_    uint16
}

var (
	_ [64]byte  = [unsafe.Sizeof(sqe{})]byte{}
	_ [16]byte  = [unsafe.Sizeof(cqe{})]byte{}
	_ [120]byte = [unsafe.Sizeof(params{})]byte{}
	_ [40]byte  = [unsafe.Sizeof(bufReg{})]byte{}
	_ [16]byte  = [unsafe.Sizeof(pbuf{})]byte{}
)

func setup(entries uint32, p *params) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func enter(fd int, toSubmit, minComplete, flags uint32) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit),
		uintptr(minComplete), uintptr(flags), 0, 0)
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}

func register(fd int, op uint32, arg unsafe.Pointer, nr uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(fd), uintptr(op), uintptr(arg), uintptr(nr), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// u32 returns the uint32 at byte off of the mapping m.
func u32(m []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }

func load(p *uint32) uint32     { return atomic.LoadUint32(p) }
func store(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
