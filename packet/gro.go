package packet

import (
	"bytes"
	"encoding/binary"
)

// TCPCoalescer merges consecutive TCP/IPv4 segments of one flow into one
// super-frame, as the kernel's GRO does, so that a TAP can deliver them to
// the pod as one large segment (with a GSOTCPv4 virtio_net_hdr).
//
// Start copies the first segment into the output buffer; Append adds a
// further segment's payload when it continues the flow: same Ethernet
// header, same IPv4 header except ID, length and checksum (no options
// beyond what the first carried, no fragments), same ports, ACK, window
// and TCP options, a sequence number that follows on, only ACK (and PSH on
// the last) set, a payload no longer than the first one's, and valid IPv4
// header and TCP checksums (checksums are verified because the result is
// handed on as already checked, with a new IPv4 header checksum). A segment shorter than the first, or with PSH, ends
// the super-frame. Finish fixes the headers and returns the frame's GSO
// metadata. It does not allocate.
type TCPCoalescer struct {
	out       []byte // the output buffer, from the frame start
	n         int    // bytes of out in use
	ipLen     int
	hdr       int // Ethernet + IP + TCP header bytes
	size      int // payload bytes of the first segment (gso_size)
	segs      int
	nextSeq   uint32
	addrSum   uint16 // pseudo-header sum of the addresses and protocol (same for every segment)
	can       bool   // the first segment may be extended (its checksum is valid)
	closed    bool
	lastFlags uint8
}

// Start begins a new frame in out with seg (a complete Ethernet frame),
// copied to out[0:]. A TCP segment that could be extended has its
// checksum verified during the copy; if it is wrong, the frame is not
// extended. It returns false, copying nothing, if out is too small.
func (c *TCPCoalescer) Start(out, seg []byte) bool {
	if len(out) < len(seg) {
		return false
	}
	*c = TCPCoalescer{out: out, n: len(seg), segs: 1}
	ver, ipLen, tcpLen, _, ok := tcpHeaders(seg)
	if !ok || ver != 4 {
		copy(out, seg)
		return true
	}
	ip := seg[EthernetLen:]
	tot := int(binary.BigEndian.Uint16(ip[2:4]))
	tcp := ip[ipLen:]
	payload := tot - ipLen - tcpLen
	if EthernetLen+tot != len(seg) || // padding or truncation: leave alone
		payload <= 0 || tcp[13] != TCPFlagACK ||
		Checksum(ip[:ipLen], 0) != 0xffff { // merged, it would get a valid one
		copy(out, seg)
		return true
	}
	// A segment that may be extended has its checksum verified while it
	// is copied; a bad one is passed on alone, as received.
	hdr := EthernetLen + ipLen + tcpLen
	copy(out, seg[:hdr])
	addrSum := Checksum(ip[12:20], ProtoTCP)
	hs := Checksum(tcp[:tcpLen], AddChecksum(addrSum, uint16(tot-ipLen)))
	if CopyChecksum(out[hdr:], seg[hdr:], hs) != 0xffff {
		return true
	}
	c.ipLen, c.hdr, c.size, c.addrSum = ipLen, hdr, payload, addrSum
	c.nextSeq = binary.BigEndian.Uint32(tcp[4:8]) + uint32(payload)
	c.can = true
	return true
}

// Len returns the length of the frame built so far.
func (c *TCPCoalescer) Len() int { return c.n }

// Verified reports whether the current frame's IPv4 header checksum and
// the TCP checksum of every segment in it were checked and found valid
// (what virtio's DATA_VALID says): true when its first segment could be
// extended (an IPv4 segment, not a fragment, whose checksums were
// verified during the copy), and Append verifies each segment it adds. A
// merged frame's new IPv4 header checksum is valid and its TCP checksum
// partial (GSO.NeedsCsum). It stays valid after Finish, until the next
// Start.
func (c *TCPCoalescer) Verified() bool { return c.can }

// Segments returns how many segments the frame holds.
func (c *TCPCoalescer) Segments() int { return c.segs }

// Append adds seg's payload to the frame if seg continues it, and reports
// whether it did. On false the frame is unchanged.
func (c *TCPCoalescer) Append(seg []byte) bool {
	if !c.can || c.closed || len(seg) <= c.hdr {
		return false
	}
	head := c.out[:c.hdr]
	ip, sip := head[EthernetLen:], seg[EthernetLen:]
	payload := len(seg) - c.hdr
	if payload > c.size || c.n+payload > len(c.out) || c.n+payload-EthernetLen > 65535 {
		return false
	}
	// Ethernet header, version/IHL/TOS, then flags/TTL/proto/addresses.
	if !bytes.Equal(head[:EthernetLen+2], seg[:EthernetLen+2]) ||
		binary.BigEndian.Uint16(sip[2:4]) != uint16(len(seg)-EthernetLen) ||
		sip[6] != ip[6] || sip[7] != ip[7] || sip[8] != ip[8] || sip[9] != ip[9] ||
		!bytes.Equal(ip[12:c.ipLen], sip[12:c.ipLen]) ||
		Checksum(sip[:c.ipLen], 0) != 0xffff {
		return false
	}
	tcp, stcp := ip[c.ipLen:], sip[c.ipLen:]
	if stcp[12] != tcp[12] || // data offset
		!bytes.Equal(tcp[0:4], stcp[0:4]) || // ports
		binary.BigEndian.Uint32(stcp[4:8]) != c.nextSeq ||
		!bytes.Equal(tcp[8:12], stcp[8:12]) || // ack
		stcp[13]&^TCPFlagPSH != TCPFlagACK ||
		!bytes.Equal(tcp[14:16], stcp[14:16]) || // window
		!bytes.Equal(tcp[18:c.hdr-EthernetLen-c.ipLen], stcp[18:c.hdr-EthernetLen-c.ipLen]) { // urg ptr + options
		return false
	}
	// Verify seg's checksum while copying its payload behind the frame:
	// on a mismatch the copied bytes lie beyond c.n and the frame is
	// unchanged.
	tcpLen := c.hdr - EthernetLen - c.ipLen
	hs := Checksum(stcp[:tcpLen], AddChecksum(c.addrSum, uint16(tcpLen+payload)))
	if CopyChecksum(c.out[c.n:], seg[c.hdr:], hs) != 0xffff {
		return false
	}
	c.n += payload
	c.segs++
	c.nextSeq += uint32(payload)
	c.lastFlags = stcp[13]
	if payload < c.size || stcp[13]&TCPFlagPSH != 0 {
		c.closed = true
	}
	return true
}

// Finish completes the frame and returns its length and GSO metadata. A
// frame of one segment is returned unchanged with zero metadata. A merged
// frame gets its IPv4 total length and header checksum, the last segment's
// PSH, and a partial TCP checksum (the pseudo-header sum), described by g:
// GSOTCPv4, NeedsCsum, HdrLen, Size = the first segment's payload length.
func (c *TCPCoalescer) Finish() (n int, g GSO) {
	if c.segs < 2 {
		return c.n, GSO{}
	}
	ip := c.out[EthernetLen:c.n]
	binary.BigEndian.PutUint16(ip[2:4], uint16(len(ip)))
	ipv4HeaderChecksum(ip, c.ipLen)
	tcp := ip[c.ipLen:]
	tcp[13] |= c.lastFlags & TCPFlagPSH
	binary.BigEndian.PutUint16(tcp[16:18], PseudoHeaderSum(ip[12:16], ip[16:20], ProtoTCP, len(tcp)))
	return c.n, GSO{
		Type:       GSOTCPv4,
		NeedsCsum:  true,
		HdrLen:     uint16(c.hdr),
		Size:       uint16(c.size),
		CsumStart:  uint16(EthernetLen + c.ipLen),
		CsumOffset: 16,
	}
}
