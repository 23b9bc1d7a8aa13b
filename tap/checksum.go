package tap

import (
	"encoding/binary"

	"github.com/gvswitch/gvs/packet"
)

// Checksum returns the 16-bit one's-complement sum (RFC 1071) of b added to
// initial, folded but not complemented. An odd trailing byte is padded with
// zero. It does not allocate.
func Checksum(b []byte, initial uint16) uint16 {
	return packet.Checksum(b, initial)
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
