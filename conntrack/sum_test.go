package conntrack

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// sumRef is the plain definition of sum (RFC 1071): big-endian 16-bit
// words, an odd last byte padded with zero, added into 64 bits.
func sumRef(b []byte, s uint64) uint64 {
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// checkSum fails t if sum and sumRef disagree on b and s, folded, or on
// whether the sum is zero.
func checkSum(t *testing.T, b []byte, s uint64) {
	t.Helper()
	got, want := sum(b, s), sumRef(b, s)
	if fold(got) != fold(want) || (got == 0) != (want == 0) {
		t.Fatalf("len %d, s %#x: sum folds to %#04x (raw %#x), want %#04x (raw %#x)", len(b), s, fold(got), got, fold(want), want)
	}
}

// TestSumMatchesReference: sum folds to the 16-bit one's-complement sum
// of the definition for every length up to past a jumbo frame's, with
// random bytes, all ones (a carry out of every 64-bit add), all zeros, and
// the initial sums the tracker passes (a pseudo-header's).
func TestSumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9100)
	for n := range 600 {
		for i := range buf[:n] {
			buf[i] = byte(r.Uint32())
		}
		for _, s := range []uint64{0, 1, 0xffff, 0x1_fffe_0003, r.Uint64() >> 30} {
			checkSum(t, buf[:n], s)
		}
	}
	for _, fill := range []byte{0xff, 0x00, 0x80} {
		for i := range buf {
			buf[i] = fill
		}
		for _, n := range []int{0, 1, 7, 8, 31, 32, 33, 64, 1400, 1480, 9000} {
			checkSum(t, buf[:n], 0)
			checkSum(t, buf[:n], 0x3_fffc)
		}
	}
	for _, n := range []int{1400, 9100} {
		for i := range buf[:n] {
			buf[i] = byte(r.Uint32())
		}
		checkSum(t, buf[:n], r.Uint64()>>28)
	}
}

// FuzzSum checks sum against its definition on any bytes and any initial
// sum the tracker can pass (under 2^36: a pseudo-header's).
func FuzzSum(f *testing.F) {
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1}, uint64(0xffff))
	f.Add([]byte{}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, s uint64) {
		checkSum(t, b, s>>28)
	})
}

// sumOld is sum as it was before it took 64-bit words (two 32-bit words
// a round), kept for BenchmarkSum's before and after.
func sumOld(b []byte, s uint64) uint64 {
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

// BenchmarkSum: the tracker's payload pass for a UDP datagram of a 64 B
// and of a 1400 B frame, and a TCP super-frame's 64 KiB: sum against
// sumOld, the code before it.
func BenchmarkSum(b *testing.B) {
	for _, n := range []int{64 - 34, 1400 - 34, 65000} {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		for _, impl := range []struct {
			name string
			f    func([]byte, uint64) uint64
		}{{"sum", sum}, {"old", sumOld}} {
			b.Run(fmt.Sprintf("%dB/%s", n, impl.name), func(b *testing.B) {
				b.SetBytes(int64(n))
				var s uint64
				for b.Loop() {
					s += impl.f(buf, 0x1234)
				}
				if s == 1 {
					b.Log(s)
				}
			})
		}
	}
}
