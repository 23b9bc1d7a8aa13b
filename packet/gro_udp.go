package packet

import (
	"bytes"
	"encoding/binary"
)

// MaxUDPCoalesce is the most datagrams a UDPCoalescer merges into one
// frame: UDP_MAX_SEGMENTS of the kernels that take USO frames from a TAP
// (later kernels allow 128).
const MaxUDPCoalesce = 64

// udpHdrEnd is where the payload of an Ethernet/IPv4 (no options)/UDP
// datagram starts.
const udpHdrEnd = EthernetLen + 20 + 8

// UDPCoalescer merges consecutive UDP/IPv4 datagrams of one flow into one
// UDP super-frame (USO), so that a TAP hands them to the pod in one write
// (with a GSOUDPL4 virtio_net_hdr); the pod's kernel cuts it back into the
// same datagrams, or passes it whole to a socket with UDP_GRO.
//
// Start copies the first datagram into the output buffer; Append adds a
// further datagram's payload when it belongs to the same flow: same
// Ethernet header, same IPv4 header except ID, length and checksum (no
// options, no fragments), same ports, a payload no longer than the
// first's, and valid IPv4 header and non-zero UDP checksums (checksums are
// verified because the merged frame's are recomputed). A datagram shorter than the
// first ends the frame, as does the MaxUDPCoalesce-th. Finish fixes the
// headers and returns the frame's GSO metadata. It does not allocate.
//
// Datagram boundaries are kept (every datagram but the last has the
// first's size), so merging changes nothing a receiving socket sees except
// the IPv4 IDs, which the kernel renumbers from the first one's.
type UDPCoalescer struct {
	out     []byte // the output buffer, from the frame start
	n       int    // bytes of out in use
	size    int    // payload bytes of the first datagram (gso_size)
	segs    int
	addrSum uint16 // pseudo-header sum of the addresses and protocol
	can     bool   // the first datagram may be extended (its checksum is valid)
	closed  bool
}

// udpv4Datagram reports whether frame is an Ethernet/IPv4/UDP datagram the
// coalescer can extend: no IP options, a valid IP header checksum (the
// merged frame gets a new one, so a damaged header must not be merged),
// not a fragment, lengths that match the frame exactly, a payload and a
// UDP checksum.
func udpv4Datagram(frame []byte) bool {
	if len(frame) <= udpHdrEnd || binary.BigEndian.Uint16(frame[12:14]) != EtherTypeIPv4 {
		return false
	}
	ip := frame[EthernetLen:]
	return ip[0] == 0x45 && ip[9] == ProtoUDP &&
		binary.BigEndian.Uint16(ip[6:8])&0x3fff == 0 &&
		int(binary.BigEndian.Uint16(ip[2:4])) == len(ip) &&
		int(binary.BigEndian.Uint16(ip[24:26])) == len(ip)-20 &&
		binary.BigEndian.Uint16(ip[26:28]) != 0 &&
		Checksum(ip[:20], 0) == 0xffff
}

// Start begins a new frame in out with d (a complete Ethernet frame),
// copied to out[0:]. A datagram that could be extended has its checksum
// verified during the copy; if it is wrong, the frame is not extended. It
// returns false, copying nothing, if out is too small.
func (c *UDPCoalescer) Start(out, d []byte) bool {
	if len(out) < len(d) {
		return false
	}
	*c = UDPCoalescer{out: out, n: len(d), segs: 1}
	if !udpv4Datagram(d) {
		copy(out, d)
		return true
	}
	ip := d[EthernetLen:]
	copy(out, d[:udpHdrEnd])
	addrSum := Checksum(ip[12:20], ProtoUDP)
	hs := Checksum(ip[20:28], AddChecksum(addrSum, uint16(len(ip)-20)))
	if CopyChecksum(out[udpHdrEnd:], d[udpHdrEnd:], hs) != 0xffff {
		return true
	}
	c.size, c.addrSum, c.can = len(d)-udpHdrEnd, addrSum, true
	return true
}

// Len returns the length of the frame built so far.
func (c *UDPCoalescer) Len() int { return c.n }

// Verified reports whether the current frame's IPv4 header checksum and
// the UDP checksum of every datagram in it were checked and found valid
// (what virtio's DATA_VALID says): true when its first datagram could be
// extended, since only such a datagram had its checksums verified during
// the copy, and Append verifies each datagram it adds. A merged frame's
// new IPv4 header checksum is valid and its UDP checksum partial
// (GSO.NeedsCsum). It stays valid after Finish, until the next Start.
func (c *UDPCoalescer) Verified() bool { return c.can }

// Segments returns how many datagrams the frame holds.
func (c *UDPCoalescer) Segments() int { return c.segs }

// Append adds d's payload to the frame if d continues the flow, and
// reports whether it did. On false the frame is unchanged.
func (c *UDPCoalescer) Append(d []byte) bool {
	if !c.can || c.closed || c.segs >= MaxUDPCoalesce || len(d) <= udpHdrEnd {
		return false
	}
	payload := len(d) - udpHdrEnd
	if payload > c.size || c.n+payload > len(c.out) || c.n+payload-EthernetLen > 65535 {
		return false
	}
	head := c.out[:udpHdrEnd]
	ip, sip := head[EthernetLen:], d[EthernetLen:]
	// Ethernet header, version/IHL/TOS, length, then flags/TTL/protocol,
	// addresses, ports, UDP length and a checksum to verify.
	if !bytes.Equal(head[:EthernetLen+2], d[:EthernetLen+2]) ||
		int(binary.BigEndian.Uint16(sip[2:4])) != len(sip) ||
		sip[6] != ip[6] || sip[7] != ip[7] || sip[8] != ip[8] || sip[9] != ip[9] ||
		!bytes.Equal(ip[12:24], sip[12:24]) ||
		int(binary.BigEndian.Uint16(sip[24:26])) != 8+payload ||
		binary.BigEndian.Uint16(sip[26:28]) == 0 ||
		Checksum(sip[:20], 0) != 0xffff {
		return false
	}
	// Verify d's checksum while copying its payload behind the frame: on
	// a mismatch the copied bytes lie beyond c.n and the frame is
	// unchanged.
	hs := Checksum(sip[20:28], AddChecksum(c.addrSum, uint16(8+payload)))
	if CopyChecksum(c.out[c.n:], d[udpHdrEnd:], hs) != 0xffff {
		return false
	}
	c.n += payload
	c.segs++
	if payload < c.size {
		c.closed = true
	}
	return true
}

// Finish completes the frame and returns its length and GSO metadata. A
// frame of one datagram is returned unchanged with zero metadata. A merged
// frame gets its IPv4 total length and header checksum, its UDP length,
// and a partial UDP checksum (the pseudo-header sum), described by g:
// GSOUDPL4, NeedsCsum, HdrLen, Size = the first datagram's payload length.
func (c *UDPCoalescer) Finish() (n int, g GSO) {
	if c.segs < 2 {
		return c.n, GSO{}
	}
	ip := c.out[EthernetLen:c.n]
	binary.BigEndian.PutUint16(ip[2:4], uint16(len(ip)))
	ipv4HeaderChecksum(ip, 20)
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[4:6], uint16(len(udp)))
	binary.BigEndian.PutUint16(udp[6:8], PseudoHeaderSum(ip[12:16], ip[16:20], ProtoUDP, len(udp)))
	return c.n, GSO{
		Type:       GSOUDPL4,
		NeedsCsum:  true,
		HdrLen:     udpHdrEnd,
		Size:       uint16(c.size),
		CsumStart:  EthernetLen + 20,
		CsumOffset: 6,
	}
}

// Coalescer merges consecutive segments of one flow: TCP segments always
// (TCPCoalescer), UDP datagrams too when UDP is set (UDPCoalescer; set it
// only if every destination of the merged frames takes USO frames). Start
// picks the coalescer by the first frame's protocol. It does not allocate.
type Coalescer struct {
	// UDP enables merging UDP datagrams.
	UDP bool
	udp bool // the current frame is the UDP coalescer's
	tcp TCPCoalescer
	u   UDPCoalescer
}

// Start begins a new frame with seg; see TCPCoalescer.Start.
func (c *Coalescer) Start(out, seg []byte) bool {
	c.udp = c.UDP && udpv4Datagram(seg)
	if c.udp {
		return c.u.Start(out, seg)
	}
	return c.tcp.Start(out, seg)
}

// Append adds seg to the current frame if it continues it.
func (c *Coalescer) Append(seg []byte) bool {
	if c.udp {
		return c.u.Append(seg)
	}
	return c.tcp.Append(seg)
}

// Verified reports whether the current frame's checksums were verified;
// see UDPCoalescer.Verified and TCPCoalescer.Verified.
func (c *Coalescer) Verified() bool {
	if c.udp {
		return c.u.Verified()
	}
	return c.tcp.Verified()
}

// Len returns the length of the current frame.
func (c *Coalescer) Len() int {
	if c.udp {
		return c.u.Len()
	}
	return c.tcp.Len()
}

// Finish completes the current frame; see TCPCoalescer.Finish.
func (c *Coalescer) Finish() (int, GSO) {
	if c.udp {
		return c.u.Finish()
	}
	return c.tcp.Finish()
}
