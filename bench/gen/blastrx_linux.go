package gen

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The blaster's receiver counts frames where the destination pod's
// interface hands them to the stack:
//
//  1. An AF_PACKET socket bound to the device for IPv4 (incoming frames
//     only), with PACKET_VNET_HDR (a virtio_net_hdr in front of each frame
//     tells a GSO super-frame's segment size) and a classic BPF filter that
//     keeps UDP first fragments to the blast's port.
//  2. recvmmsg, 64 frames at a time, each read into rxSnap bytes but with
//     MSG_TRUNC, which returns its whole length; each frame is recognised
//     by ParseBlastFrame and counted under its flow. A UDP GSO super-frame
//     (a dataplane that merges datagrams toward the pod, as gvs does once
//     its TAP takes USO, hands the pod's stack one skb for several of them)
//     counts as its datagrams: its length less the headers, divided by
//     its segment size, rounded up. Datagrams are merged only within one
//     flow (the first one's payload names it).
//  3. At the end, PACKET_STATISTICS tells how many matching frames the
//     socket itself dropped (its buffer was full). Those frames did reach
//     the interface, so Delivered counts them: the receiver's own speed
//     does not limit the figure.

const (
	rxSnap  = 128
	rxBatch = 64
	// rxVnet is the virtio_net_hdr's length in front of each frame.
	rxVnet = 10
	// rxAll is the filter's snap length: all of the frame, so that its
	// length (MSG_TRUNC) is the super-frame's.
	rxAll = 1 << 18
)

// ReceiverConfig configures NewReceiver.
type ReceiverConfig struct {
	// Dev is the interface to listen on.
	Dev string
	// Port is the UDP destination port of the blast, default 9000.
	Port uint16
	// Idle, if not zero, ends Run once frames have arrived and none has
	// for this long (the blast is over).
	Idle time.Duration
}

// ReceiveResult is what Run counted.
type ReceiveResult struct {
	// Frames are the blaster frames read and counted per flow.
	Frames uint64 `json:"frames"`
	// Bytes are their sizes on the wire (without FCS), from the IPv4
	// header's total length.
	Bytes uint64 `json:"bytes"`
	// SocketDrops are matching frames the receiver's socket dropped.
	SocketDrops uint64 `json:"socket_drops"`
	// Other counts frames that passed the filter but were not the
	// blaster's.
	Other uint64 `json:"other"`
	// Flows is the number of flows seen; FlowMin and FlowMax the fewest and
	// most frames of a flow seen.
	Flows   int    `json:"flows"`
	FlowMin uint64 `json:"flow_min"`
	FlowMax uint64 `json:"flow_max"`
	// Active is the time from the first to the last frame read.
	Active time.Duration `json:"active"`
}

// Delivered returns the frames that reached the interface: counted plus
// dropped by the receiver's socket.
func (r ReceiveResult) Delivered() uint64 { return r.Frames + r.SocketDrops }

// Receiver counts blaster frames arriving on one device. NewReceiver opens
// its socket in the calling thread's network namespace; Run may then be
// called from anywhere. It is not safe for concurrent use, but for Seen.
type Receiver struct {
	seen   atomic.Uint64 // Frames so far, for Seen
	fd     int
	port   uint16
	idle   time.Duration
	bufs   [][]byte
	iovs   []unix.Iovec
	msgs   []unix.Mmsghdr
	counts []uint64
}

// NewReceiver opens the receiver's socket on cfg.Dev. It needs
// CAP_NET_RAW.
func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	if cfg.Port == 0 {
		cfg.Port = 9000
	}
	ifc, err := net.InterfaceByName(cfg.Dev)
	if err != nil {
		return nil, fmt.Errorf("gen: receiver: %w", err)
	}
	proto := int(htons(unix.ETH_P_IP))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("gen: receiver: AF_PACKET socket: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	// Filter before binding so that no other frame is ever queued.
	if err := attachFilter(fd, cfg.Port); err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		return nil, fmt.Errorf("gen: receiver: PACKET_VNET_HDR: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("gen: receiver: SO_RCVTIMEO: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifc.Index}); err != nil {
		return nil, fmt.Errorf("gen: receiver: bind %s: %w", cfg.Dev, err)
	}
	// Clear the statistics of anything counted before the filter was in.
	_, _ = unix.GetsockoptTpacketStats(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	r := &Receiver{fd: fd, port: cfg.Port, idle: cfg.Idle,
		bufs:   make([][]byte, rxBatch),
		iovs:   make([]unix.Iovec, rxBatch),
		msgs:   make([]unix.Mmsghdr, rxBatch),
		counts: make([]uint64, MaxFlows),
	}
	for i := range rxBatch {
		r.bufs[i] = make([]byte, rxVnet+rxSnap)
		r.iovs[i].Base = &r.bufs[i][0]
		r.iovs[i].SetLen(rxVnet + rxSnap)
		r.msgs[i].Hdr.Iov = &r.iovs[i]
		r.msgs[i].Hdr.SetIovlen(1)
	}
	ok = true
	return r, nil
}

// attachFilter keeps IPv4/UDP first fragments to port, whole.
func attachFilter(fd int, port uint16) error {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 2},                               // 0: EtherType
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x0800, SkipFalse: 8},       // 1
		bpf.LoadAbsolute{Off: 23, Size: 1},                               // 2: IP protocol
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 6},           // 3
		bpf.LoadAbsolute{Off: 20, Size: 2},                               // 4: flags, fragment offset
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 4},      // 5
		bpf.LoadMemShift{Off: 14},                                        // 6: X = IP header length
		bpf.LoadIndirect{Off: 16, Size: 2},                               // 7: UDP destination port
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(port), SkipFalse: 1}, // 8
		bpf.RetConstant{Val: rxAll},                                      // 9
		bpf.RetConstant{Val: 0},                                          // 10
	})
	if err != nil {
		return fmt.Errorf("gen: receiver: filter: %w", err)
	}
	f := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		f[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}); err != nil {
		return fmt.Errorf("gen: receiver: attach filter: %w", err)
	}
	return nil
}

// Close closes the socket.
func (r *Receiver) Close() error { return unix.Close(r.fd) }

// Seen returns the blaster's datagrams Run has counted so far (its
// result's Frames), over all its runs; it may be called while Run runs,
// so that a caller can wait for what it sent to arrive.
func (r *Receiver) Seen() uint64 { return r.seen.Load() }

// Run counts frames until ctx is done (or, with Idle, the blast is over),
// then returns the totals.
func (r *Receiver) Run(ctx context.Context) (ReceiveResult, error) {
	var res ReceiveResult
	var first, last time.Time
	for ctx.Err() == nil {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(r.fd), uintptr(unsafe.Pointer(&r.msgs[0])), rxBatch, unix.MSG_WAITFORONE|unix.MSG_TRUNC, 0, 0)
		if e != 0 {
			if e == unix.EAGAIN || e == unix.EINTR {
				if r.idle > 0 && !first.IsZero() && time.Since(last) > r.idle {
					break
				}
				continue
			}
			return res, fmt.Errorf("gen: receiver: recvmmsg: %w", e)
		}
		if n == 0 {
			continue
		}
		last = time.Now()
		if first.IsZero() {
			first = last
		}
		before := res.Frames
		for i := range int(n) {
			l := int(r.msgs[i].Len) - rxVnet // the whole frame's length (MSG_TRUNC)
			if l <= 0 {
				res.Other++
				continue
			}
			b := r.bufs[i][rxVnet : rxVnet+min(l, rxSnap)]
			f, ok := ParseBlastFrame(b)
			if !ok || f.DstPort != r.port {
				res.Other++
				continue
			}
			segs, bytes := blastSegments(r.bufs[i][:rxVnet], b, l)
			res.Frames += segs
			res.Bytes += bytes
			if f.Flow < MaxFlows {
				r.counts[f.Flow] += segs
			}
		}
		r.seen.Add(res.Frames - before)
	}
	if st, err := unix.GetsockoptTpacketStats(r.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		res.SocketDrops = uint64(st.Drops)
	}
	res.Active = last.Sub(first)
	for _, c := range r.counts {
		if c == 0 {
			continue
		}
		if res.Flows == 0 || c < res.FlowMin {
			res.FlowMin = c
		}
		res.FlowMax = max(res.FlowMax, c)
		res.Flows++
	}
	return res, nil
}

// blastSegments returns how many datagrams the blaster frame b (its first
// bytes; l bytes long in all, after the virtio_net_hdr vnet) carries, and
// their sizes on the wire: one, whose size the IPv4 header gives, unless
// vnet describes a GSO super-frame, which carries ⌈payload ÷ segment
// size⌉ datagrams, each with the headers of the first.
func blastSegments(vnet, b []byte, l int) (segs, bytes uint64) {
	gsoType, gsoSize := vnet[1]&^0x80, int(binary.LittleEndian.Uint16(vnet[4:6]))
	if gsoType == 0 || gsoSize == 0 {
		return 1, uint64(binary.BigEndian.Uint16(b[ethLen+2:])) + ethLen
	}
	hdr := ethLen + int(b[ethLen]&0x0f)*4 + udpLen
	payload := max(l-hdr, 0)
	segs = uint64(max((payload+gsoSize-1)/gsoSize, 1))
	return segs, segs*uint64(hdr) + uint64(payload)
}

// htons converts a 16-bit value to network byte order.
func htons(v uint16) uint16 { return v<<8 | v>>8 }
