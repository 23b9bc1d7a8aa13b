package iofloor

import (
	"encoding/binary"

	"github.com/gvswitch/gvs/packet"
)

// Headroom is the space the benchmarks leave in front of every frame, as
// the switch does (room for a virtio_net_hdr and the outer headers of a
// VXLAN encapsulation).
const Headroom = 64

// SuperFramePayload is the TCP payload of the super-frame the 64 KiB
// benchmarks move: 45 segments of 1448 B, 65 160 B, the most a 64 KiB
// IPv4 packet holds in whole segments.
const SuperFramePayload = 45 * 1448

// Sizes are the frame sizes every throughput benchmark runs, Ethernet
// header included; the last one is a TCP super-frame (TSO) on the ports
// that take them.
var Sizes = []int{64, 1500, 14 + 20 + 20 + SuperFramePayload}

var (
	srcMAC = [6]byte{0x0a, 0x58, 0x0a, 0x63, 0x00, 0x01}
	dstMAC = [6]byte{0x0a, 0x58, 0x0a, 0x63, 0x00, 0x02}
	srcIP  = [4]byte{10, 99, 0, 1}
	dstIP  = [4]byte{10, 99, 0, 2}
)

// Frame writes an Ethernet/IPv4 frame of size bytes (at least 64) into
// b[:size] and returns the GSO metadata to write it with: a UDP datagram
// up to 1514 B (no metadata: a complete frame), a TCP super-frame with a
// partial checksum and TSO metadata beyond. seq is written into the
// payload's first 8 bytes so that a reader can tell frames apart. The
// addresses are fixed (10.99.0.1 → 10.99.0.2); the frames travel between
// ports joined by tc mirred, where no stack looks at them.
func Frame(b []byte, size int, seq uint64) packet.GSO {
	e := packet.Ethernet(b[:size])
	e.SetDst(dstMAC)
	e.SetSrc(srcMAC)
	e.SetType(0x0800)
	ip := b[14:size]
	super := size > 1514
	proto, l4 := byte(17), 8
	if super {
		proto, l4 = 6, 20
	}
	ipLen := size - 14
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:4], uint16(ipLen))
	binary.BigEndian.PutUint32(ip[4:8], 0x40000000) // id 0, DF
	ip[8], ip[9] = 64, proto
	ip[10], ip[11] = 0, 0
	copy(ip[12:16], srcIP[:])
	copy(ip[16:20], dstIP[:])
	binary.BigEndian.PutUint16(ip[10:12], ^packet.Checksum(ip[:20], 0))
	l := ip[20:]
	binary.BigEndian.PutUint16(l[0:2], 10000)
	binary.BigEndian.PutUint16(l[2:4], 9000)
	payload := l[l4:]
	if len(payload) >= 8 {
		binary.BigEndian.PutUint64(payload[:8], seq)
	}
	if !super {
		binary.BigEndian.PutUint16(l[4:6], uint16(ipLen-20))
		l[6], l[7] = 0, 0 // no UDP checksum (IPv4)
		return packet.GSO{}
	}
	binary.BigEndian.PutUint32(l[4:8], uint32(seq))
	binary.BigEndian.PutUint32(l[8:12], 0)
	l[12], l[13] = 5<<4, 0x18 // PSH ACK
	binary.BigEndian.PutUint16(l[14:16], 65535)
	l[18], l[19] = 0, 0
	// Partial checksum: the pseudo-header sum (addresses, protocol,
	// length) in the checksum field, as a stack hands TSO frames over.
	var ph [12]byte
	copy(ph[0:4], srcIP[:])
	copy(ph[4:8], dstIP[:])
	ph[9] = 6
	binary.BigEndian.PutUint16(ph[10:12], uint16(ipLen-20))
	binary.BigEndian.PutUint16(l[16:18], packet.Checksum(ph[:], 0))
	return packet.GSO{
		Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 14 + 20 + 20, Size: 1448,
		CsumStart: 14 + 20, CsumOffset: 16,
	}
}

// Seq returns the sequence number Frame wrote into frame (0 if it is too
// short to hold one).
func Seq(frame []byte) uint64 {
	if len(frame) < 14+20+8+8 {
		return 0
	}
	off := 14 + 20 + 8
	if frame[14+9] == 6 {
		off = 14 + 20 + 20
	}
	return binary.BigEndian.Uint64(frame[off : off+8])
}

// Buffers returns n buffers of Headroom + size + 1 bytes, each holding a
// frame of size bytes at Headroom with sequence numbers 0…n−1, and the
// frames' GSO metadata.
func Buffers(n, size int) ([][]byte, []packet.GSO) {
	bufs := make([][]byte, n)
	gso := make([]packet.GSO, n)
	for i := range bufs {
		bufs[i] = make([]byte, Headroom+size+1)
		gso[i] = Frame(bufs[i][Headroom:], size, uint64(i))
		bufs[i] = bufs[i][:Headroom+size]
	}
	return bufs, gso
}

// SizeName names a frame size in a benchmark: "64B", "1500B", "64KiB".
func SizeName(size int) string {
	switch {
	case size > 1514:
		return "64KiB"
	case size == 1500:
		return "1500B"
	case size == 64:
		return "64B"
	}
	return "other"
}
