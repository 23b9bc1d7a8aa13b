package packet

import (
	"encoding/binary"
	"math/bits"
)

// CopyChecksum copies src to the start of dst, as copy does, and returns
// Checksum(src, initial): the copy and the one's-complement sum are one
// pass over src, so segmentation and coalescing read each payload byte
// once. dst must hold len(src) bytes (it panics otherwise, before writing
// anything); src and dst must not overlap. It does not allocate.
//
// The words are loaded little-endian, without a byte swap per word: the
// one's-complement sum of byte-swapped 16-bit words is the byte-swapped
// sum (RFC 1071 §2(B)), so one swap at the end gives the big-endian sum.
// On amd64 with AVX2 an assembly loop does the bulk 32 bytes at a time
// (copysum_amd64.s); the loops below do the rest, or all of it elsewhere.
func CopyChecksum(dst, src []byte, initial uint16) uint16 {
	dst = dst[:len(src)]
	var sum, carry uint64
	n := len(src)
	i := 0
	if haveAVX2 && n >= avx2Min {
		// The vector loop takes the multiple of 32 bytes; its sum of
		// little-endian 32-bit words continues in the 64-bit sum below.
		i = n &^ 31
		sum = copySumAVX2(&dst[0], &src[0], i)
	}
	for ; i+64 <= n; i += 64 {
		s, d := src[i:i+64:i+64], dst[i:i+64:i+64]
		a := binary.LittleEndian.Uint64(s[0:8])
		b := binary.LittleEndian.Uint64(s[8:16])
		c := binary.LittleEndian.Uint64(s[16:24])
		e := binary.LittleEndian.Uint64(s[24:32])
		binary.LittleEndian.PutUint64(d[0:8], a)
		binary.LittleEndian.PutUint64(d[8:16], b)
		binary.LittleEndian.PutUint64(d[16:24], c)
		binary.LittleEndian.PutUint64(d[24:32], e)
		sum, carry = bits.Add64(sum, a, carry)
		sum, carry = bits.Add64(sum, b, carry)
		sum, carry = bits.Add64(sum, c, carry)
		sum, carry = bits.Add64(sum, e, carry)
		a = binary.LittleEndian.Uint64(s[32:40])
		b = binary.LittleEndian.Uint64(s[40:48])
		c = binary.LittleEndian.Uint64(s[48:56])
		e = binary.LittleEndian.Uint64(s[56:64])
		binary.LittleEndian.PutUint64(d[32:40], a)
		binary.LittleEndian.PutUint64(d[40:48], b)
		binary.LittleEndian.PutUint64(d[48:56], c)
		binary.LittleEndian.PutUint64(d[56:64], e)
		sum, carry = bits.Add64(sum, a, carry)
		sum, carry = bits.Add64(sum, b, carry)
		sum, carry = bits.Add64(sum, c, carry)
		sum, carry = bits.Add64(sum, e, carry)
	}
	if i+32 <= n {
		s, d := src[i:i+32:i+32], dst[i:i+32:i+32]
		a := binary.LittleEndian.Uint64(s[0:8])
		b := binary.LittleEndian.Uint64(s[8:16])
		c := binary.LittleEndian.Uint64(s[16:24])
		e := binary.LittleEndian.Uint64(s[24:32])
		binary.LittleEndian.PutUint64(d[0:8], a)
		binary.LittleEndian.PutUint64(d[8:16], b)
		binary.LittleEndian.PutUint64(d[16:24], c)
		binary.LittleEndian.PutUint64(d[24:32], e)
		sum, carry = bits.Add64(sum, a, carry)
		sum, carry = bits.Add64(sum, b, carry)
		sum, carry = bits.Add64(sum, c, carry)
		sum, carry = bits.Add64(sum, e, carry)
		i += 32
	}
	for ; i+8 <= n; i += 8 {
		a := binary.LittleEndian.Uint64(src[i : i+8])
		binary.LittleEndian.PutUint64(dst[i:i+8], a)
		sum, carry = bits.Add64(sum, a, carry)
	}
	src, dst = src[i:], dst[i:]
	sum, carry = bits.Add64(sum, 0, carry)
	sum += carry
	if len(src) > 0 {
		// The tail starts at an offset that is a multiple of 8, so its
		// even bytes are low bytes of little-endian words, as above. It
		// is gathered byte by byte: copied into a scratch word and loaded
		// back, it stalled on store forwarding (a profile put more than
		// half of CopyChecksum's own time, after the AVX2 loop, there).
		var w uint64
		for k := len(src) - 1; k >= 0; k-- {
			w = w<<8 | uint64(src[k])
		}
		copy(dst, src)
		sum, carry = bits.Add64(sum, w, 0)
		sum += carry
	}
	return AddChecksum(bits.ReverseBytes16(fold64(sum)), initial)
}

// AddChecksum returns the one's-complement sum of two folded sums a and b
// (as Checksum returns them): Checksum(x, Checksum(y, 0)) equals
// AddChecksum(Checksum(x, 0), Checksum(y, 0)) when y has an even length.
func AddChecksum(a, b uint16) uint16 {
	s := uint32(a) + uint32(b)
	return uint16(s>>16 + s&0xffff)
}

// avx2Min is the shortest slice the AVX2 loops take: below it the
// portable loops are as fast (the vector loop's setup and horizontal
// add cost a few ns).
const avx2Min = 64

// fold64 folds a 64-bit one's-complement sum (carries added back) to 16
// bits.
func fold64(s uint64) uint16 {
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	return uint16(s)
}
