package packet

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// refChecksum is RFC 1071 word by word, big-endian: the reference Checksum
// must match exactly (including 0 against 0xffff).
func refChecksum(b []byte, initial uint16) uint16 {
	sum := uint32(initial)
	for len(b) >= 2 {
		sum += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}

// fillTestBytes fills b with the i%4-th of four patterns that exercise the
// carries of a one's-complement sum: random bytes, all 0xff, all zero, and
// random bytes with the high nibble set.
func fillTestBytes(r *rand.Rand, b []byte, i int) {
	switch i % 4 {
	case 0:
		for j := range b {
			b[j] = byte(r.Uint32())
		}
	case 1:
		for j := range b {
			b[j] = 0xff
		}
	case 2:
		clear(b)
	default:
		for j := range b {
			b[j] = byte(r.Uint32() | 0xf0)
		}
	}
}

func TestChecksumMatchesReference(t *testing.T) {
	eachLoop(t, testChecksumMatchesReference)
}

func testChecksumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 70000)
	for i := range 3000 {
		n := r.IntN(200)
		if i%10 == 0 {
			n = r.IntN(len(buf))
		}
		b := buf[:n]
		fillTestBytes(r, b, i)
		init := uint16(r.Uint32())
		if i%3 == 0 {
			init = 0
		}
		if got, want := Checksum(b, init), refChecksum(b, init); got != want {
			t.Fatalf("len %d init %#x: Checksum %#04x, reference %#04x", n, init, got, want)
		}
	}
}

func FuzzChecksum(f *testing.F) {
	f.Add([]byte{}, uint16(0))
	f.Add([]byte{0xff, 0xff}, uint16(0))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, uint16(0xfffe))
	f.Fuzz(func(t *testing.T, b []byte, init uint16) {
		if got, want := Checksum(b, init), refChecksum(b, init); got != want {
			t.Fatalf("Checksum(% x, %#x) = %#04x, reference %#04x", b, init, got, want)
		}
	})
}

func TestChecksumAllocs(t *testing.T) {
	b := make([]byte, 1500)
	if n := testing.AllocsPerRun(100, func() { Checksum(b, 1) }); n != 0 {
		t.Fatalf("Checksum allocates %v times", n)
	}
}
