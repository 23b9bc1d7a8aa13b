package conntrack

import (
	"encoding/binary"
	"math/bits"
)

// Internet checksums (RFC 1071) and their incremental update (RFC 1624).
// The package keeps its own small helpers rather than import package
// packet: conntrack depends on the standard library alone, so that it can
// be embedded without the rest of the dataplane.

// sum adds b to s as a sequence of big-endian 16-bit words (an odd last
// byte is padded with zero), in one's-complement arithmetic. It adds
// 64-bit big-endian words with an end-around carry, 32 bytes a round in
// one carry chain: since 2^16 ≡ 1 (mod 2^16−1), a 64-bit word is congruent
// to the sum of its four 16-bit words and a carry out of bit 63 to 1, so
// the result folds (fold) to the same 16-bit sum as adding the 16-bit
// words one by one, and it is not zero unless s and b are all zero. This
// is the tracker's payload pass (parse's L4 check), so it is written for
// speed; sumRef in the tests is the plain definition it is checked
// against.
func sum(b []byte, s uint64) uint64 {
	var c uint64
	for len(b) >= 32 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), 0)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[8:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[16:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[24:]), c)
		// The chain's carry goes around: if it makes s wrap to 0, that
		// carries again, and 0 + 1 cannot.
		s, c = bits.Add64(s, 0, c)
		s += c
		b = b[32:]
	}
	// The rest, under 32 bytes, is added as before, into t, which
	// cannot overflow (under 2^36), and goes into s once: short inputs
	// (a 64 B frame's datagram) cost what they did.
	var t uint64
	for len(b) >= 8 {
		t += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	if len(b) >= 4 {
		t += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		t += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		t += uint64(b[0]) << 8
	}
	s, c = bits.Add64(s, t, 0)
	return s + c // no wrap: after a carry out s ≤ 2^64−2
}

// fold reduces a sum to 16 bits (not complemented).
func fold(s uint64) uint16 {
	s = s>>32 + s&0xffffffff
	s = s>>32 + s&0xffffffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	return uint16(s)
}

// pseudoSum is the sum of the IPv4 pseudo-header of a TCP/UDP segment.
func pseudoSum(ip []byte, proto uint8, l4len int) uint64 {
	return uint64(binary.BigEndian.Uint32(ip[12:16])) + uint64(binary.BigEndian.Uint32(ip[16:20])) +
		uint64(proto) + uint64(l4len)
}

// csum32 returns a complete checksum field updated for a 32-bit word of
// the covered data changing from old to new (RFC 1624, eqn. 3).
func csum32(check uint16, old, new uint32) uint16 {
	s := uint64(^check) + uint64(^old>>16&0xffff) + uint64(^old&0xffff) + uint64(new>>16) + uint64(new&0xffff)
	return ^fold(s)
}

// csum16 is csum32 for a 16-bit word.
func csum16(check uint16, old, new uint16) uint16 {
	return ^fold(uint64(^check) + uint64(^old) + uint64(new))
}

// partial32 updates a partial checksum field (the uncomplemented
// pseudo-header sum of CHECKSUM_PARTIAL) for a pseudo-header word
// changing, as Linux's inet_proto_csum_replace4 does with pseudohdr set.
func partial32(field uint16, old, new uint32) uint16 {
	return fold(uint64(field) + uint64(^old>>16&0xffff) + uint64(^old&0xffff) + uint64(new>>16) + uint64(new&0xffff))
}

func get16(b []byte, off int) uint16    { return binary.BigEndian.Uint16(b[off:]) }
func put16(b []byte, off int, v uint16) { binary.BigEndian.PutUint16(b[off:], v) }
func get64(b []byte, off int) uint64    { return binary.BigEndian.Uint64(b[off:]) }
func get32(b []byte, off int) uint32    { return binary.BigEndian.Uint32(b[off:]) }
func put32(b []byte, off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }
