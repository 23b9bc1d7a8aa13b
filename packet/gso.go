package packet

import (
	"encoding/binary"
	"errors"
	"math/bits"
)

// GSO types of GSO.Type. The values are those of the virtio_net_hdr
// gso_type field (VIRTIO_NET_HDR_GSO_*), so a TAP's header converts
// without a table.
const (
	GSONone  = 0 // a complete frame
	GSOTCPv4 = 1 // TCP over IPv4 super-frame
	GSOTCPv6 = 4 // TCP over IPv6 super-frame
	GSOUDPL4 = 5 // UDP super-frame (USO), over IPv4 or IPv6
)

// TCP flag bits used by segmentation and coalescing.
const (
	TCPFlagFIN = 0x01
	TCPFlagSYN = 0x02
	TCPFlagRST = 0x04
	TCPFlagPSH = 0x08
	TCPFlagACK = 0x10
	TCPFlagURG = 0x20
	TCPFlagECE = 0x40
	TCPFlagCWR = 0x80
)

// MaxSuperFrame is the largest super-frame gvs builds or accepts: an
// Ethernet header plus the largest IPv4 datagram.
const MaxSuperFrame = EthernetLen + 65535

// GSO is the offload metadata of one frame, the decoded virtio_net_hdr of
// a TAP: which super-frame it is and whether its L4 checksum is partial.
// The zero value is a complete frame with a complete checksum. Offsets
// count from the start of the Ethernet header.
type GSO struct {
	// Type is GSONone, GSOTCPv4, GSOTCPv6 or GSOUDPL4.
	Type uint8
	// NeedsCsum says the L4 checksum field at CsumStart+CsumOffset holds
	// only the pseudo-header sum (VIRTIO_NET_HDR_F_NEEDS_CSUM).
	NeedsCsum bool
	// HdrLen is the length of the Ethernet, IP and TCP (UDP) headers.
	HdrLen uint16
	// Size is the payload bytes per segment (the MSS, or the UDP
	// datagram payload size).
	Size uint16
	// CsumStart and CsumOffset locate the partial checksum.
	CsumStart, CsumOffset uint16
}

// IsGSO reports whether g describes a super-frame.
func (g GSO) IsGSO() bool { return g.Type != GSONone }

// Errors of SegmentTCP.
var (
	// ErrGSOFrame: the super-frame is not an Ethernet/IPv4-or-IPv6/TCP frame
	// gvs can segment (VLAN tags, IPv6 extension headers, IPv4 fragments,
	// inconsistent lengths) or its GSO metadata is unusable.
	ErrGSOFrame = errors.New("packet: unsupported or malformed GSO super-frame")
	// ErrGSOSpace: the destination buffer or sizes slice is too small.
	ErrGSOSpace = errors.New("packet: no room for the segments")
)

// Checksum returns the 16-bit one's-complement sum (RFC 1071) of b added to
// initial, folded but not complemented. It does not allocate.
func Checksum(b []byte, initial uint16) uint16 {
	sum := uint64(initial)
	var carry uint64
	if haveAVX2 && len(b) >= avx2Min {
		// The vector loop sums little-endian words (copysum_amd64.s);
		// folded and swapped, that is the big-endian sum of the prefix
		// (RFC 1071 §2(B)), whose length is even, so it adds to initial.
		m := len(b) &^ 31
		sum = uint64(AddChecksum(initial, bits.ReverseBytes16(fold64(sumAVX2(&b[0], m)))))
		b = b[m:]
	}
	for len(b) >= 32 {
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b), carry)
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b[8:]), carry)
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b[16:]), carry)
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b[24:]), carry)
		b = b[32:]
	}
	for len(b) >= 8 {
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b), carry)
		b = b[8:]
	}
	sum, carry = bits.Add64(sum, 0, carry)
	sum += carry
	if len(b) >= 4 {
		sum, carry = bits.Add64(sum, uint64(binary.BigEndian.Uint32(b)), 0)
		sum += carry
		b = b[4:]
	}
	if len(b) >= 2 {
		sum, carry = bits.Add64(sum, uint64(binary.BigEndian.Uint16(b)), 0)
		sum += carry
		b = b[2:]
	}
	if len(b) == 1 {
		sum, carry = bits.Add64(sum, uint64(b[0])<<8, 0)
		sum += carry
	}
	return fold64(sum)
}

// PseudoHeaderSum returns the folded sum of the TCP/UDP pseudo-header for
// addresses src and dst (4 or 16 bytes each), protocol proto and L4
// length l4len.
func PseudoHeaderSum(src, dst []byte, proto uint8, l4len int) uint16 {
	s := Checksum(src, 0)
	s = Checksum(dst, s)
	var tail [4]byte
	binary.BigEndian.PutUint16(tail[0:2], uint16(proto))
	binary.BigEndian.PutUint16(tail[2:4], uint16(l4len))
	return Checksum(tail[:], s)
}

// ipv4HeaderChecksum recomputes the checksum of the IPv4 header ip[:ihl].
func ipv4HeaderChecksum(ip []byte, ihl int) {
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:12], ^Checksum(ip[:ihl], 0))
}

// ipHeaders locates the IP header of an Ethernet/IP frame carrying
// protocol proto: the IP version (4 or 6), the IP header length and the
// end of the IP datagram in frame (from its length field). It reports
// false for anything else: VLAN tags, IPv6 extension headers or
// jumbograms, IPv4 fragments, options or a length field past the frame.
func ipHeaders(frame []byte, proto uint8) (ver, ipLen, end int, ok bool) {
	if len(frame) < EthernetLen+20 {
		return 0, 0, 0, false
	}
	ip := frame[EthernetLen:]
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case EtherTypeIPv4:
		if ip[0]>>4 != 4 {
			return 0, 0, 0, false
		}
		ipLen = int(ip[0]&0x0f) * 4
		if ipLen < 20 || len(ip) < ipLen || ip[9] != proto || binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 {
			return 0, 0, 0, false
		}
		ver, end = 4, EthernetLen+int(binary.BigEndian.Uint16(ip[2:4]))
		if end < EthernetLen+ipLen {
			return 0, 0, 0, false
		}
	case EtherTypeIPv6:
		if len(ip) < 40 || ip[0]>>4 != 6 || ip[6] != proto {
			return 0, 0, 0, false
		}
		// A jumbogram (payload length 0) is not supported.
		ipLen, ver, end = 40, 6, EthernetLen+40+int(binary.BigEndian.Uint16(ip[4:6]))
	default:
		return 0, 0, 0, false
	}
	if end > len(frame) {
		return 0, 0, 0, false
	}
	return ver, ipLen, end, true
}

// tcpHeaders locates the headers of an Ethernet/IP/TCP frame: the IP
// version (4 or 6), the IP header length, the TCP header length and the
// end of the IP datagram in frame. It reports false for anything ipHeaders refuses and for a TCP header that
// does not fit in the IP datagram.
func tcpHeaders(frame []byte) (ver, ipLen, tcpLen, end int, ok bool) {
	ver, ipLen, end, ok = ipHeaders(frame, ProtoTCP)
	l4 := EthernetLen + ipLen
	if !ok || end < l4+20 {
		return 0, 0, 0, 0, false
	}
	tcpLen = int(frame[l4+12]>>4) * 4
	if tcpLen < 20 || end < l4+tcpLen {
		return 0, 0, 0, 0, false
	}
	return ver, ipLen, tcpLen, end, true
}

// SegmentTCP splits the TCP super-frame frame (Ethernet + IPv4 or IPv6 +
// TCP + payload, its TCP checksum complete or partial) into segments of at
// most g.Size payload bytes, as a NIC's TSO would: each segment gets the
// headers with its own IPv4 total length, ID (incremented per segment) and
// header checksum (or IPv6 payload length), its TCP sequence number, FIN and
// PSH only on the last segment, CWR only on the first, and a complete TCP
// checksum.
//
// The segments are laid out back to back in dst, each preceded by pre
// bytes that the caller fills (a VXLAN header, a virtio_net_hdr): segment k
// starts at pre + sum over j<k of (pre + sizes[j]). It returns the number of
// segments and sets sizes[k] to their lengths. It does not allocate. A frame
// whose payload fits one segment comes back as one segment with its
// checksum completed.
func SegmentTCP(dst, frame []byte, g GSO, pre int, sizes []int) (int, error) {
	ver, ipLen, tcpLen, end, ok := tcpHeaders(frame)
	if !ok || g.Size == 0 || pre < 0 {
		return 0, ErrGSOFrame
	}
	sg, n, err := newSegmenter(dst, frame, ver, ipLen, tcpLen, end, int(g.Size), pre, ProtoTCP, sizes)
	if err != nil {
		return 0, err
	}
	tcp0 := frame[EthernetLen+ipLen:]
	seq := binary.BigEndian.Uint32(tcp0[4:8])
	flags := tcp0[13]
	for k := range n {
		// The TCP header (tcpLen, a multiple of 4) keeps the payload at an
		// even offset of the L4 data, so its sum adds as is.
		seg, tcp, sum := sg.next(k)
		binary.BigEndian.PutUint32(tcp[4:8], seq+uint32(k*sg.size))
		f := flags
		if k != n-1 {
			f &^= TCPFlagFIN | TCPFlagPSH
		}
		if k != 0 {
			f &^= TCPFlagCWR
		}
		tcp[13] = f
		tcp[16], tcp[17] = 0, 0
		binary.BigEndian.PutUint16(tcp[16:18], ^Checksum(tcp[:tcpLen], sum))
		sizes[k] = len(seg)
	}
	return n, nil
}

// segmenter does the part of SegmentTCP and SegmentUDP that does not
// depend on the L4 protocol: it lays segment after segment out in dst with
// a copy of the headers and the next piece of payload, summed while it is
// copied, and sets each segment's IPv4 total length, ID (incremented per
// segment) and header checksum, or IPv6 payload length.
type segmenter struct {
	dst, frame, payload []byte
	ver, ipLen, l4hdr   int
	hdr, size, pre, off int
	id, addrSum         uint16
}

// newSegmenter checks that n segments of size payload bytes fit in dst and
// sizes, and returns the segmenter and n.
func newSegmenter(dst, frame []byte, ver, ipLen, l4hdr, end, size, pre int, proto uint8, sizes []int) (segmenter, int, error) {
	hdr := EthernetLen + ipLen + l4hdr
	payload := frame[hdr:end]
	n := max((len(payload)+size-1)/size, 1)
	if n > len(sizes) || len(dst) < n*(pre+hdr)+len(payload) {
		return segmenter{}, 0, ErrGSOSpace
	}
	sg := segmenter{dst: dst, frame: frame, payload: payload, ver: ver, ipLen: ipLen, l4hdr: l4hdr,
		hdr: hdr, size: size, pre: pre}
	// The pseudo-header's addresses and protocol are the same for every
	// segment; only the length is added per segment.
	ip := frame[EthernetLen:]
	if ver == 4 {
		sg.id = binary.BigEndian.Uint16(ip[4:6])
		sg.addrSum = Checksum(ip[12:20], uint16(proto))
	} else {
		sg.addrSum = Checksum(ip[8:40], uint16(proto))
	}
	return sg, n, nil
}

// next lays out segment k (call it for k = 0, 1, … in turn) and returns it,
// its L4 header onwards, and the sum of its pseudo-header and payload: what
// the L4 header's own sum is to be added to. The payload must start at an
// even offset of the L4 data.
func (sg *segmenter) next(k int) (seg, l4 []byte, sum uint16) {
	p := sg.payload
	chunk := p[min(k*sg.size, len(p)):min((k+1)*sg.size, len(p))]
	sg.off += sg.pre
	seg = sg.dst[sg.off : sg.off+sg.hdr+len(chunk)]
	sg.off += len(seg)
	copy(seg, sg.frame[:sg.hdr])
	psum := CopyChecksum(seg[sg.hdr:], chunk, 0)
	ip := seg[EthernetLen:]
	l4len := sg.l4hdr + len(chunk)
	if sg.ver == 4 {
		binary.BigEndian.PutUint16(ip[2:4], uint16(sg.ipLen+l4len))
		binary.BigEndian.PutUint16(ip[4:6], sg.id+uint16(k))
		ipv4HeaderChecksum(ip, sg.ipLen)
	} else {
		binary.BigEndian.PutUint16(ip[4:6], uint16(l4len))
	}
	return seg, ip[sg.ipLen:], AddChecksum(AddChecksum(sg.addrSum, uint16(l4len)), psum)
}

// Segment splits the super-frame frame described by g into segments, as
// SegmentTCP (TCP types) or SegmentUDP (GSOUDPL4) does.
func Segment(dst, frame []byte, g GSO, pre int, sizes []int) (int, error) {
	if g.Type == GSOUDPL4 {
		return SegmentUDP(dst, frame, g, pre, sizes)
	}
	return SegmentTCP(dst, frame, g, pre, sizes)
}

// SegmentUDP splits the UDP super-frame frame (Ethernet + IPv4 or IPv6 +
// UDP + payload, its UDP checksum complete or partial, as a socket with
// UDP_SEGMENT hands it to a device with USO) into datagrams of g.Size
// payload bytes, the last maybe shorter, as the kernel's UDP GSO would:
// each gets the headers with its own IPv4 total length, ID (incremented
// per datagram) and header checksum (or IPv6 payload length), its UDP
// length and a complete UDP checksum (0xffff where the sum is 0). The
// layout in dst and the results are those of SegmentTCP. It does not
// allocate.
func SegmentUDP(dst, frame []byte, g GSO, pre int, sizes []int) (int, error) {
	ver, ipLen, end, ok := ipHeaders(frame, ProtoUDP)
	const udpLen = 8
	if !ok || end < EthernetLen+ipLen+udpLen || g.Size == 0 || pre < 0 {
		return 0, ErrGSOFrame
	}
	sg, n, err := newSegmenter(dst, frame, ver, ipLen, udpLen, end, int(g.Size), pre, ProtoUDP, sizes)
	if err != nil {
		return 0, err
	}
	for k := range n {
		// The UDP header is 8 bytes, so the payload starts at an even
		// offset of the L4 data and its sum adds as is.
		seg, udp, sum := sg.next(k)
		binary.BigEndian.PutUint16(udp[4:6], uint16(udpLen+len(seg)-sg.hdr))
		udp[6], udp[7] = 0, 0
		c := ^Checksum(udp[:udpLen], sum)
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(udp[6:8], c)
		sizes[k] = len(seg)
	}
	return n, nil
}

// TCPChecksumValid reports whether frame (Ethernet + IPv4 + TCP) carries a
// correct TCP checksum.
func TCPChecksumValid(frame []byte) bool {
	ip, l4, ok := tcpv4Segment(frame)
	return ok && Checksum(l4, PseudoHeaderSum(ip[12:16], ip[16:20], ProtoTCP, len(l4))) == 0xffff
}

// tcpv4Segment returns frame's IPv4 datagram (up to its total length)
// and its TCP segment, or ok false if frame is not Ethernet + IPv4 + TCP
// with a total length that fits.
func tcpv4Segment(frame []byte) (ip, l4 []byte, ok bool) {
	ver, ipLen, _, end, ok := tcpHeaders(frame)
	if !ok || ver != 4 {
		return nil, nil, false
	}
	ip = frame[EthernetLen:end]
	return ip, ip[ipLen:], true
}
