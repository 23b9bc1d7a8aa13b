package vxlan

import (
	"encoding/binary"
	"errors"
)

// Wire constants of RFC 7348.
const (
	// HeaderLen is the length of the VXLAN header (RFC 7348 §5).
	HeaderLen = 8
	// UDPPort is the IANA-assigned UDP destination port for VXLAN.
	UDPPort = 4789
	// FlagI is the I flag (valid VNI), bit 3 of the first header byte.
	FlagI = 0x08
	// MaxVNI is the largest 24-bit VXLAN Network Identifier.
	MaxVNI = 1<<24 - 1
	// Overhead is the bytes VXLAN adds in front of an inner Ethernet frame on
	// an IPv4 underlay: outer IPv4 (20) + UDP (8) + VXLAN (8) + outer
	// Ethernet (14). The overlay MTU is the underlay MTU minus Overhead.
	Overhead = 50
	// MinInnerLen is the shortest inner frame accepted on decapsulation: an
	// Ethernet header.
	MinInnerLen = 14
)

// Sentinel errors returned by Decap. Callers use errors.Is to pick a drop
// reason.
var (
	// ErrShort means the datagram is shorter than the VXLAN header.
	ErrShort = errors.New("vxlan: datagram shorter than header")
	// ErrFlags means the I flag is clear or a reserved bit is set.
	ErrFlags = errors.New("vxlan: bad flags or nonzero reserved bits")
)

// Header is a view of the 8-byte VXLAN header (RFC 7348 §5.1):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|R|R|R|R|I|R|R|R|            Reserved                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                VXLAN Network Identifier (VNI) |   Reserved    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Call Valid first; VNI is unchecked and panics on a short slice.
type Header []byte

// Valid reports whether h holds a whole header that gvs accepts: the I flag
// set and every reserved bit zero.
//
// RFC 7348 says receivers MUST ignore the reserved bits. gvs is strict
// instead, like the Linux vxlan driver (which drops packets with flags it
// has not been configured to understand): a nonzero reserved bit means a
// VXLAN extension (GBP, GPE, RCO, …) that gvs does not implement, and
// treating such a packet as plain VXLAN would misread it. Both nodes of a
// gvs cluster send exactly the RFC header, so nothing legitimate is lost.
func (h Header) Valid() bool {
	if len(h) < HeaderLen {
		return false
	}
	return h[0] == FlagI && h[1]|h[2]|h[3]|h[7] == 0
}

// VNI returns the 24-bit VXLAN Network Identifier.
func (h Header) VNI() uint32 {
	return uint32(h[4])<<16 | uint32(h[5])<<8 | uint32(h[6])
}

// PutHeader writes a VXLAN header with the I flag and the low 24 bits of
// vni into b[:HeaderLen]. It panics if len(b) < HeaderLen.
func PutHeader(b []byte, vni uint32) {
	_ = b[HeaderLen-1]
	binary.BigEndian.PutUint32(b[0:4], FlagI<<24)
	binary.BigEndian.PutUint32(b[4:8], (vni&MaxVNI)<<8)
}

// Decap parses the VXLAN header at the start of the UDP payload b and
// returns the inner frame (a subslice of b, not a copy) and the VNI. It
// returns ErrShort or ErrFlags (never wrapped, so a comparison is enough) and
// allocates nothing. It does not check the inner frame's length; see
// MinInnerLen.
func Decap(b []byte) (inner []byte, vni uint32, err error) {
	if len(b) < HeaderLen {
		return nil, 0, ErrShort
	}
	h := Header(b[:HeaderLen])
	if !h.Valid() {
		return nil, 0, ErrFlags
	}
	return b[HeaderLen:], h.VNI(), nil
}

// Encap writes a VXLAN header for vni into the headroom in front of the
// frame buf[offset:offset+frameLen] — into buf[offset-HeaderLen:offset] — and
// returns the UDP payload buf[offset-HeaderLen:offset+frameLen]. The frame
// is not moved. It panics if offset < HeaderLen or the frame runs past
// len(buf).
func Encap(buf []byte, offset int, frameLen int, vni uint32) []byte {
	b := buf[offset-HeaderLen : offset+frameLen]
	PutHeader(b, vni)
	return b
}
