package tap

import (
	"encoding/binary"
	"math/bits"
)

// Checksum returns the 16-bit one's-complement sum (RFC 1071) of b added to
// initial, folded but not complemented. An odd trailing byte is padded with
// zero. It does not allocate.
func Checksum(b []byte, initial uint16) uint16 {
	sum := uint64(initial)
	var carry uint64
	for len(b) >= 8 {
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b), carry)
		b = b[8:]
	}
	// End-around carry: 2^64 ≡ 1 (mod 2^16-1). After a carry out, sum is
	// small, so adding the second carry cannot overflow again.
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
	// Fold 64 → 16 bits with end-around carry.
	sum = (sum >> 32) + (sum & 0xffffffff)
	sum = (sum >> 32) + (sum & 0xffffffff)
	sum = (sum >> 16) + (sum & 0xffff)
	sum = (sum >> 16) + (sum & 0xffff)
	return uint16(sum)
}

// CompleteChecksum finishes a partial checksum, as the kernel's
// skb_checksum_help does for a frame marked VIRTIO_NET_HDR_F_NEEDS_CSUM:
// the 16-bit field at frame[start+offset:] already holds the pseudo-header
// sum; the one's-complement sum of frame[start:] (field included) is
// complemented and stored there. A result of 0 is stored as 0xffff
// (CSUM_MANGLED_0), which is the same value in one's complement and keeps a
// UDP checksum from reading as "none". start is counted from the start of
// frame, which on a TAP is the Ethernet header. It reports false, leaving
// frame untouched, if the field does not lie within frame.
func CompleteChecksum(frame []byte, start, offset int) bool {
	if start < 0 || offset < 0 || start > len(frame) || start+offset+2 > len(frame) {
		return false
	}
	c := ^Checksum(frame[start:], 0)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(frame[start+offset:], c)
	return true
}
