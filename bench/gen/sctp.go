package gen

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// SCTP probes without the kernel's SCTP: a client sends an INIT chunk and
// a responder answers with an INIT ACK, both over raw IP sockets
// (sctp_linux.go). That is the first exchange of an association, enough
// for a NAT (kube-proxy's DNAT, whose conntrack follows SCTP's state
// machine) and a switch to carry it in both directions; no association is
// set up. The packets are built and checked here, portably.

// SCTP chunk types used by the probe (RFC 9260, section 3.2).
const (
	SCTPChunkInit    = 1
	SCTPChunkInitAck = 2
)

const (
	sctpCommonLen = 12 // ports, verification tag, checksum
	sctpInitLen   = 20 // chunk header and the INIT's fixed fields
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SCTPPacket is what the probe reads of an SCTP packet: its common header
// and its first chunk, an INIT or INIT ACK.
type SCTPPacket struct {
	SrcPort, DstPort uint16
	VTag             uint32 // verification tag of the common header
	Chunk            uint8  // type of the first chunk
	InitiateTag      uint32 // of an INIT or INIT ACK
}

// ErrSCTP is returned by ParseSCTP for a packet that is not a valid SCTP
// packet with an INIT or INIT ACK first.
var ErrSCTP = errors.New("gen: not an SCTP INIT or INIT ACK")

// BuildSCTPInit returns an SCTP packet (no IP header) with one INIT (or,
// with ack, one INIT ACK carrying a state cookie) chunk: verification tag
// vtag (0 for an INIT), initiate tag tag, and the CRC32c checksum set.
func BuildSCTPInit(src, dst uint16, vtag, tag uint32, ack bool) []byte {
	n := sctpCommonLen + sctpInitLen
	if ack {
		n += 8 // state cookie parameter: type 7, length 8, 4 bytes
	}
	b := make([]byte, n)
	binary.BigEndian.PutUint16(b[0:], src)
	binary.BigEndian.PutUint16(b[2:], dst)
	binary.BigEndian.PutUint32(b[4:], vtag)
	c := b[sctpCommonLen:]
	c[0] = SCTPChunkInit
	if ack {
		c[0] = SCTPChunkInitAck
	}
	binary.BigEndian.PutUint16(c[2:], uint16(len(c)))
	binary.BigEndian.PutUint32(c[4:], tag)
	binary.BigEndian.PutUint32(c[8:], 65536) // a_rwnd
	binary.BigEndian.PutUint16(c[12:], 1)    // outbound streams
	binary.BigEndian.PutUint16(c[14:], 1)    // inbound streams
	binary.BigEndian.PutUint32(c[16:], tag)  // initial TSN
	if ack {
		binary.BigEndian.PutUint16(c[20:], 7)
		binary.BigEndian.PutUint16(c[22:], 8)
		binary.BigEndian.PutUint32(c[24:], tag^0x5a5a5a5a)
	}
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b, castagnoli))
	return b
}

// ParseSCTP reads an SCTP packet (no IP header): it checks the length, the
// checksum and that the first chunk is a well-formed INIT or INIT ACK.
func ParseSCTP(b []byte) (SCTPPacket, error) {
	var p SCTPPacket
	if len(b) < sctpCommonLen+sctpInitLen {
		return p, ErrSCTP
	}
	sum := binary.LittleEndian.Uint32(b[8:])
	var zero [4]byte
	crc := crc32.Update(crc32.Update(crc32.Update(0, castagnoli, b[:8]), castagnoli, zero[:]), castagnoli, b[12:])
	if crc != sum {
		return p, ErrSCTP
	}
	c := b[sctpCommonLen:]
	l := int(binary.BigEndian.Uint16(c[2:]))
	if (c[0] != SCTPChunkInit && c[0] != SCTPChunkInitAck) || l < sctpInitLen || l > len(c) {
		return p, ErrSCTP
	}
	p.SrcPort = binary.BigEndian.Uint16(b[0:])
	p.DstPort = binary.BigEndian.Uint16(b[2:])
	p.VTag = binary.BigEndian.Uint32(b[4:])
	p.Chunk = c[0]
	p.InitiateTag = binary.BigEndian.Uint32(c[4:])
	if p.InitiateTag == 0 || (p.Chunk == SCTPChunkInit) != (p.VTag == 0) {
		return p, ErrSCTP // RFC 9260: an INIT has vtag 0, a zero initiate tag is invalid
	}
	return p, nil
}
