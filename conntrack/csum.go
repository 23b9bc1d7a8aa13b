package conntrack

import "encoding/binary"

// Internet checksums (RFC 1071) and their incremental update (RFC 1624).
// The package keeps its own small helpers rather than import package
// packet: conntrack depends on the standard library alone, so that it can
// be embedded without the rest of the dataplane.

// sum adds b to s as a sequence of big-endian 16-bit words (an odd last
// byte is padded with zero). It adds 32-bit words into 64 bits, which
// cannot overflow for any IPv4 datagram and folds to the same 16-bit sum.
func sum(b []byte, s uint64) uint64 {
	for len(b) >= 8 {
		s += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	if len(b) >= 4 {
		s += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
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
