package afxdp

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// bpfAttr is a zeroed union bpf_attr, large enough for every command used.
type bpfAttr [128]byte

func (a *bpfAttr) u32(off int, v uint32) { binary.NativeEndian.PutUint32(a[off:], v) }
func (a *bpfAttr) u64(off int, v uint64) { binary.NativeEndian.PutUint64(a[off:], v) }

func bpf(cmd int, a *bpfAttr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(unsafe.Pointer(a)), unsafe.Sizeof(*a))
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// newXSKMap creates a BPF_MAP_TYPE_XSKMAP of n entries (queue → socket).
func newXSKMap(n uint32) (int, error) {
	var a bpfAttr
	a.u32(0, unix.BPF_MAP_TYPE_XSKMAP)
	a.u32(4, 4) // key: queue index
	a.u32(8, 4) // value: socket fd
	a.u32(12, n)
	fd, err := bpf(unix.BPF_MAP_CREATE, &a)
	if err != nil {
		return -1, fmt.Errorf("afxdp: BPF_MAP_CREATE xskmap: %w", err)
	}
	return fd, nil
}

// mapPut stores the socket fd at key in the XSKMAP.
func mapPut(mapFd int, key uint32, sockFd int) error {
	k, v := key, uint32(sockFd)
	var a bpfAttr
	a.u32(0, uint32(mapFd))
	a.u64(8, uint64(uintptr(unsafe.Pointer(&k))))
	a.u64(16, uint64(uintptr(unsafe.Pointer(&v))))
	if _, err := bpf(unix.BPF_MAP_UPDATE_ELEM, &a); err != nil {
		return fmt.Errorf("afxdp: BPF_MAP_UPDATE_ELEM: %w", err)
	}
	return nil
}

// insn encodes one eBPF instruction (struct bpf_insn).
func insn(code, dst, src uint8, off int16, imm int32) []byte {
	b := make([]byte, 8)
	b[0], b[1] = code, dst|src<<4
	binary.NativeEndian.PutUint16(b[2:], uint16(off))
	binary.NativeEndian.PutUint32(b[4:], uint32(imm))
	return b
}

// Opcodes and helpers of the program (include/uapi/linux/bpf.h).
const (
	ldxMemW       = unix.BPF_LDX | unix.BPF_MEM | unix.BPF_W
	ldImmDW       = unix.BPF_LD | unix.BPF_DW | unix.BPF_IMM
	movImm64      = unix.BPF_ALU64 | unix.BPF_MOV | unix.BPF_K
	call          = unix.BPF_JMP | unix.BPF_CALL
	exit          = unix.BPF_JMP | unix.BPF_EXIT
	pseudoMapFd   = 1
	redirectMap   = 51 // BPF_FUNC_redirect_map
	xdpPass       = 2
	rxQueueOffset = 16 // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index
)

// redirectProgram returns the XDP program
//
//	r2 = ctx->rx_queue_index
//	r1 = xskmap
//	r3 = XDP_PASS          // flags: the action when the queue has no socket
//	return bpf_redirect_map(r1, r2, r3)
//
// which hands every frame of a queue to the socket in the map's slot for
// it, and passes frames of other queues to the stack.
func redirectProgram(mapFd int) []byte {
	var p []byte
	p = append(p, insn(ldxMemW, 2, 1, rxQueueOffset, 0)...)
	p = append(p, insn(ldImmDW, 1, pseudoMapFd, 0, int32(mapFd))...)
	p = append(p, insn(0, 0, 0, 0, 0)...) // second half of the 64-bit immediate
	p = append(p, insn(movImm64, 3, 0, 0, xdpPass)...)
	p = append(p, insn(call, 0, 0, 0, redirectMap)...)
	p = append(p, insn(exit, 0, 0, 0, 0)...)
	return p
}

// loadProgram loads prog as a BPF_PROG_TYPE_XDP program for BPF_XDP links
// and returns its fd; on failure the verifier's log is in the error.
func loadProgram(prog []byte) (int, error) {
	license := []byte("Dual BSD/GPL\x00")
	log := make([]byte, 4096)
	var a bpfAttr
	a.u32(0, unix.BPF_PROG_TYPE_XDP)
	a.u32(4, uint32(len(prog)/8))
	a.u64(8, uint64(uintptr(unsafe.Pointer(&prog[0]))))
	a.u64(16, uint64(uintptr(unsafe.Pointer(&license[0]))))
	a.u32(24, 1) // log_level
	a.u32(28, uint32(len(log)))
	a.u64(32, uint64(uintptr(unsafe.Pointer(&log[0]))))
	copy(a[48:64], "gvs_xsk")
	a.u32(68, unix.BPF_XDP) // expected_attach_type
	fd, err := bpf(unix.BPF_PROG_LOAD, &a)
	if err != nil {
		n := 0
		for n < len(log) && log[n] != 0 {
			n++
		}
		return -1, fmt.Errorf("afxdp: BPF_PROG_LOAD: %w: %s", err, log[:n])
	}
	return fd, nil
}

// attach links the XDP program to the interface (driver mode, or generic
// SKB mode) and returns the link's fd: closing it detaches the program.
func attach(progFd, ifindex int, skbMode bool) (int, error) {
	var a bpfAttr
	a.u32(0, uint32(progFd))
	a.u32(4, uint32(ifindex))
	a.u32(8, unix.BPF_XDP)
	flags := uint32(unix.XDP_FLAGS_DRV_MODE)
	if skbMode {
		flags = unix.XDP_FLAGS_SKB_MODE
	}
	a.u32(12, flags)
	fd, err := bpf(unix.BPF_LINK_CREATE, &a)
	if err != nil {
		return -1, fmt.Errorf("afxdp: BPF_LINK_CREATE (XDP, flags %#x): %w", flags, err)
	}
	return fd, nil
}
