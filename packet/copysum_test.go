package packet

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// checkCopyChecksum runs CopyChecksum on src at every dst alignment and
// compares the sum with the RFC 1071 reference and the copy with src; the
// bytes of dst after the copy must stay untouched.
func checkCopyChecksum(t *testing.T, src []byte, init uint16) {
	t.Helper()
	want := refChecksum(src, init)
	buf := make([]byte, len(src)+16)
	for align := range 8 {
		for i := range buf {
			buf[i] = 0xa5
		}
		dst := buf[align : align+len(src)]
		if got := CopyChecksum(dst, src, init); got != want {
			t.Fatalf("len %d align %d init %#x: CopyChecksum %#04x, reference %#04x", len(src), align, init, got, want)
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("len %d align %d: copy differs", len(src), align)
		}
		for i, c := range buf[align+len(src):] {
			if c != 0xa5 {
				t.Fatalf("len %d align %d: byte %d after the copy written", len(src), align, i)
			}
		}
		for i, c := range buf[:align] {
			if c != 0xa5 {
				t.Fatalf("len %d align %d: byte %d before the copy written", len(src), align, i)
			}
		}
	}
}

func TestCopyChecksumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 70000+8)
	for i := range 2000 {
		n := r.IntN(300)
		if i%20 == 0 {
			n = r.IntN(70000)
		}
		// Misaligned sources too.
		src := buf[i%8 : i%8+n]
		fillTestBytes(r, src, i)
		init := uint16(r.Uint32())
		switch i % 5 {
		case 0:
			init = 0
		case 1:
			init = 0xffff
		}
		checkCopyChecksum(t, src, init)
	}
}

func TestCopyChecksumShortDst(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic with a short dst")
		}
	}()
	dst := make([]byte, 3)
	CopyChecksum(dst, []byte{1, 2, 3, 4}, 0)
}

func TestAddChecksum(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		x := make([]byte, r.IntN(100))
		y := make([]byte, 2*r.IntN(50))
		for j := range x {
			x[j] = byte(r.Uint32())
		}
		for j := range y {
			y[j] = byte(r.Uint32())
		}
		if got, want := AddChecksum(Checksum(x, 0), Checksum(y, 0)), Checksum(x, Checksum(y, 0)); got != want {
			t.Fatalf("AddChecksum %#04x, want %#04x", got, want)
		}
	}
	if AddChecksum(0, 0) != 0 || AddChecksum(0xffff, 0xffff) != 0xffff || AddChecksum(0xffff, 1) != 1 {
		t.Error("edge cases")
	}
}

func FuzzCopyChecksum(f *testing.F) {
	f.Add([]byte{}, uint16(0))
	f.Add([]byte{0xff, 0xff}, uint16(0))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, uint16(0xfffe))
	f.Add(bytes.Repeat([]byte{0xff}, 97), uint16(0xffff))
	f.Fuzz(func(t *testing.T, b []byte, init uint16) {
		checkCopyChecksum(t, b, init)
	})
}

func TestCopyChecksumAllocs(t *testing.T) {
	src, dst := make([]byte, 1500), make([]byte, 1500)
	if n := testing.AllocsPerRun(100, func() { CopyChecksum(dst, src, 1) }); n != 0 {
		t.Fatalf("CopyChecksum allocates %v times", n)
	}
}

func BenchmarkCopyChecksum(b *testing.B) {
	src, dst := make([]byte, 1398), make([]byte, 1398)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		CopyChecksum(dst, src, 0)
	}
}

// BenchmarkCopyThenChecksum is what CopyChecksum replaces: copy, then a
// second pass to sum.
func BenchmarkCopyThenChecksum(b *testing.B) {
	src, dst := make([]byte, 1398), make([]byte, 1398)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		copy(dst, src)
		Checksum(src, 0)
	}
}
