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

// eachLoop runs f with the loops CopyChecksum and Checksum may use on this
// machine: the AVX2 loops where the CPU has them, and the portable loops.
// The tests that call it must not run in parallel (it sets haveAVX2).
func eachLoop(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	loops := []bool{false}
	if haveAVX2 {
		loops = append(loops, true)
	}
	saved := haveAVX2
	t.Cleanup(func() { haveAVX2 = saved })
	for _, avx2 := range loops {
		name := "portable"
		if avx2 {
			name = "avx2"
		}
		haveAVX2 = avx2
		t.Run(name, f)
	}
}

// TestCopyChecksumLoopsAgree compares the AVX2 and the portable loops on
// every length up to 600 bytes and every source and destination
// alignment up to 8, so each tail of the vector loop meets each tail of
// the portable one.
func TestCopyChecksumLoopsAgree(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 loops on this machine: the reference tests cover the portable loops")
	}
	t.Cleanup(func() { haveAVX2 = true })
	r := rand.New(rand.NewPCG(7, 8))
	src := make([]byte, 600+8)
	fillTestBytes(r, src, 1)
	d1, d2 := make([]byte, len(src)+8), make([]byte, len(src)+8)
	for n := range 601 {
		for so := range 8 {
			do := (n + so) % 8
			s := src[so : so+n]
			haveAVX2 = true
			v := CopyChecksum(d1[do:], s, uint16(n))
			c := Checksum(s, uint16(n))
			haveAVX2 = false
			pv := CopyChecksum(d2[do:], s, uint16(n))
			pc := Checksum(s, uint16(n))
			if v != pv || c != pc {
				t.Fatalf("len %d: AVX2 sums %#04x, %#04x; portable %#04x, %#04x", n, v, c, pv, pc)
			}
			if !bytes.Equal(d1[do:do+n], s) {
				t.Fatalf("len %d src offset %d dst offset %d: the AVX2 copy differs", n, so, do)
			}
		}
	}
}

func TestCopyChecksumMatchesReference(t *testing.T) {
	eachLoop(t, testCopyChecksumMatchesReference)
}

func testCopyChecksumMatchesReference(t *testing.T) {
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
