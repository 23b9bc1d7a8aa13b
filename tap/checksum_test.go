package tap

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// refChecksum is RFC 1071 the slow way.
func refChecksum(b []byte, initial uint16) uint16 {
	sum := uint32(initial)
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}

func TestChecksumIPv4Header(t *testing.T) {
	// The IPv4 header of the Wikipedia example, checksum field zeroed.
	h := unhex(t, "4500 0073 0000 4000 4011 0000 c0a8 0001 c0a8 00c7")
	if got := ^Checksum(h, 0); got != 0xb861 {
		t.Fatalf("checksum = %#04x, want 0xb861", got)
	}
	binary.BigEndian.PutUint16(h[10:], 0xb861)
	if got := Checksum(h, 0); got != 0xffff {
		t.Fatalf("verify sum = %#04x, want 0xffff", got)
	}
}

func TestChecksumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 2000)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	// All-ones data stresses the carries.
	ones := make([]byte, 1500)
	for i := range ones {
		ones[i] = 0xff
	}
	for n := 0; n <= 80; n++ {
		for _, init := range []uint16{0, 1, 0xfffe, 0xffff} {
			if got, want := Checksum(buf[:n], init), refChecksum(buf[:n], init); got != want {
				t.Fatalf("len %d init %#x: %#04x, want %#04x", n, init, got, want)
			}
			if got, want := Checksum(ones[:n], init), refChecksum(ones[:n], init); got != want {
				t.Fatalf("ones len %d init %#x: %#04x, want %#04x", n, init, got, want)
			}
		}
	}
	for _, n := range []int{1499, 1500, 2000} {
		if got, want := Checksum(buf[:n], 0), refChecksum(buf[:n], 0); got != want {
			t.Fatalf("len %d: %#04x, want %#04x", n, got, want)
		}
	}
}

// udpFrame is Ethernet + IPv4 (10.0.0.1 → 10.0.0.2) + UDP 1234 → 5678 with
// payload "hello", UDP checksum 0.
const udpFrame = "0a580a000002 0a580a000001 0800" +
	"4500 0021 0001 0000 4011 66c8 0a000001 0a000002" +
	"04d2 162e 000d 0000 68656c6c6f"

func TestCompleteChecksum(t *testing.T) {
	frame := unhex(t, udpFrame)
	// What the kernel leaves for CHECKSUM_PARTIAL: the folded pseudo-header
	// sum (addresses, protocol, UDP length), not complemented.
	pseudo := Checksum(frame[26:34], 0) // src, dst
	pseudo = Checksum([]byte{0, 17, 0, 13}, pseudo)
	binary.BigEndian.PutUint16(frame[40:], pseudo)
	if !CompleteChecksum(frame, 34, 6) {
		t.Fatal("CompleteChecksum refused a valid frame")
	}
	// Verify as a receiver does: pseudo-header + UDP segment sums to 0xffff.
	if got := Checksum(frame[34:], Checksum([]byte{0, 17, 0, 13}, Checksum(frame[26:34], 0))); got != 0xffff {
		t.Fatalf("UDP checksum %#04x does not verify (sum %#04x)", binary.BigEndian.Uint16(frame[40:]), got)
	}
	// 0x8cff computed independently (Python, RFC 1071).
	if got, want := binary.BigEndian.Uint16(frame[40:]), uint16(0x8cff); got != want {
		t.Errorf("UDP checksum = %#04x, want %#04x", got, want)
	}

	for _, tc := range []struct{ start, off int }{{-1, 0}, {34, -1}, {len(frame), 0}, {34, len(frame) - 35}} {
		if CompleteChecksum(frame, tc.start, tc.off) {
			t.Errorf("CompleteChecksum(%d, %d) accepted offsets outside the frame", tc.start, tc.off)
		}
	}
}

func TestCompleteChecksumZeroIsMangled(t *testing.T) {
	// Data whose sum is 0xffff: its complement 0 must be stored as 0xffff.
	b := []byte{0xff, 0xff, 0x00, 0x00}
	if !CompleteChecksum(b, 0, 2) {
		t.Fatal("refused")
	}
	if binary.BigEndian.Uint16(b[2:]) != 0xffff {
		t.Fatalf("stored %#04x, want 0xffff", binary.BigEndian.Uint16(b[2:]))
	}
}

func TestChecksumAllocs(t *testing.T) {
	frame := unhex(t, udpFrame)
	if n := testing.AllocsPerRun(100, func() { CompleteChecksum(frame, 34, 6) }); n != 0 {
		t.Fatalf("CompleteChecksum allocates %v", n)
	}
}

func BenchmarkChecksum1500(b *testing.B) {
	buf := make([]byte, 1500)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		Checksum(buf, 0)
	}
}
