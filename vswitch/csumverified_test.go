package vswitch

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/port"
)

// trackedWorker is openShiftWorker's "tracked" worker (every frame to the
// local subnet goes through the connection tracker) with its batch
// replaced by UDP frames of the given size from pod 0 to pod 50, one flow
// each, whose port.Meta says CsumVerified as given; with bad, every
// frame's UDP checksum is wrong.
func trackedWorker(tb testing.TB, size int, verified, bad bool) *worker {
	tb.Helper()
	w := openShiftWorker(tb, "tracked")
	src, dst := churnPod(0), churnPod(50)
	payload := strings.Repeat("x", size-14-20-8)
	for i := range w.bufs {
		f := udpCT(src.IP.As4(), dst.IP.As4(), uint16(10000+i), 53, payload)
		copy(f[6:12], []byte{0x0a, 0x58, 10, 128, 0, 2})
		if bad {
			f[len(f)-1] ^= 0xff
		}
		w.meta[i] = port.Meta{Size: copy(w.bufs[i][Headroom:], f), CsumVerified: verified}
	}
	return w
}

// BenchmarkTrackedPayload: a batch through the tracked rule program with
// frames of 64 and 1400 bytes, whose checksums the port did not check
// (unverified: every frame before port.Meta.CsumVerified, and still a
// TAP's) or did (verified: the tunnel's frames its coalescer checked).
// The difference is the payload pass the tracker no longer makes.
func BenchmarkTrackedPayload(b *testing.B) {
	for _, size := range []int{64, 1400} {
		for _, verified := range []bool{false, true} {
			name := "unverified"
			if verified {
				name = "verified"
			}
			b.Run(fmt.Sprintf("%dB/%s", size, name), func(b *testing.B) {
				benchBatch(b, trackedWorker(b, size, verified, false))
			})
		}
	}
}

// TestTrackedChecksumChecked: a frame whose port did not vouch for its
// checksums (CsumVerified false) still has them checked by the tracker, a
// bad one counted as such (+inv); only the port's word skips the check.
// The verified path allocates nothing.
func TestTrackedChecksumChecked(t *testing.T) {
	for _, tc := range []struct {
		name          string
		verified, bad bool
		wantChecksum  bool
	}{
		{"unverified, bad sums", false, true, true},
		{"unverified, good sums", false, false, false},
		{"verified, good sums", true, false, false},
		// What the flag means: the port's word is taken, so only a port
		// that checked may set it (vxlan's coalescer; packet.Coalescer's
		// Verified tests that it does not for a bad sum).
		{"verified, bad sums", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := trackedWorker(t, 200, tc.verified, tc.bad)
			before := w.ct.t.Stats().Reasons[conntrack.ReasonChecksum]
			w.process(len(w.bufs))
			got := w.ct.t.Stats().Reasons[conntrack.ReasonChecksum] - before
			want := uint64(0)
			if tc.wantChecksum {
				want = uint64(len(w.bufs))
			}
			if got != want {
				t.Fatalf("tracker counted %d bad checksums, want %d", got, want)
			}
			if a := testing.AllocsPerRun(20, func() { w.process(len(w.bufs)) }); a != 0 {
				t.Fatalf("%v allocations per batch", a)
			}
		})
	}
}
