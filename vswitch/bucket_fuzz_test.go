package vswitch

import (
	"encoding/binary"
	"math/big"
	"testing"
)

// FuzzTokenBucket drives a bucket of any valid rate and burst with any
// sequence of clock steps (forward, standing still or backward) and frame
// sizes, through take and takeDebt. Whatever the sequence, the tokens stay
// between a burst of debt (and a frame) and a full bucket, debt and wait
// are never negative, and the bytes let through never exceed what the rate
// earned over the elapsed time plus two bursts and a frame: no overflow of
// the nanobyte arithmetic lets a limited pod through faster.
func FuzzTokenBucket(f *testing.F) {
	f.Add(uint64(6_250_000), uint64(0), []byte{10, 0, 5, 0xdc, 1})
	f.Add(uint64(1), uint64(1), []byte{0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint64(MaxRate), uint64(MaxBurst), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Fuzz(func(t *testing.T, rate, burst uint64, steps []byte) {
		rate = rate%MaxRate + 1
		burst = burst%MaxBurst + 1
		const start = int64(1) << 40
		b := newTokenBucket(rate, burst, start)
		now, latest := start, start
		passed := new(big.Int)
		for len(steps) >= 5 {
			dt := int64(int16(binary.LittleEndian.Uint16(steps))) * 997_331 // about ±32 ms per step
			size := int(binary.LittleEndian.Uint16(steps[2:])) * 3          // 0..196 605: past maxFrameBytes too
			debt := steps[4]&1 == 1
			steps = steps[5:]
			now += dt
			latest = max(latest, now)
			var ok bool
			if debt {
				ok = b.takeDebt(size, now)
			} else {
				ok = b.take(size, now)
			}
			if ok {
				passed.Add(passed, big.NewInt(int64(min(size, maxFrameBytes))))
			}
			if b.tokens > b.burst {
				t.Fatalf("tokens %d above the burst %d", b.tokens, b.burst)
			}
			if floor := -b.burst - maxFrameBytes*nsPerSec; b.tokens < floor {
				t.Fatalf("tokens %d below a burst of debt and a frame (%d)", b.tokens, floor)
			}
			if b.debt() < 0 || b.wait(size) < 0 {
				t.Fatalf("debt %d, wait %d: negative", b.debt(), b.wait(size))
			}
		}
		// passed × 10⁹ ≤ rate × elapsed + 2 bursts + a frame, in nanobytes.
		lhs := new(big.Int).Mul(passed, big.NewInt(nsPerSec))
		rhs := new(big.Int).Mul(big.NewInt(int64(rate)), big.NewInt(latest-start))
		rhs.Add(rhs, big.NewInt(2*b.burst+maxFrameBytes*nsPerSec))
		if lhs.Cmp(rhs) > 0 {
			t.Fatalf("%v bytes passed in %d ns at %d bytes/s with a burst of %d bytes", passed, latest-start, rate, burst)
		}
	})
}
