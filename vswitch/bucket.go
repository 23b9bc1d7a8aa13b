package vswitch

// tokenBucket is the arithmetic of a bandwidth limit, without a clock or a
// lock of its own: the caller passes the time (nanoseconds on a monotonic
// clock) and serializes the calls.
//
// Tokens are counted in nanobytes (bytes × 10⁹), so that refilling at rate
// bytes per second for d nanoseconds adds exactly d × rate tokens: nothing
// is lost to rounding however often the bucket is refilled (a bucket that
// refilled in whole bytes every 100 ns at 50 Mbit/s would credit nothing).
// An elapsed time that fills the bucket is not multiplied at all, so
// d × rate never exceeds the room left in the bucket (at most two bursts
// and a frame: MaxBurst keeps that within int64).
//
// A frame passes when the bucket holds its cost, or when the bucket is full:
// a frame larger than the whole burst (a 64 KiB TCP super-frame under a
// small explicit burst) is not starved; it takes the bucket below zero,
// and the frames after it wait until the debt is paid, so the long-run rate
// is exact either way.
type tokenBucket struct {
	rate   int64 // bytes per second, 1..MaxRate
	burst  int64 // capacity in nanobytes
	tokens int64 // nanobytes; down to -burst (takeDebt) or burst - maxFrameCost (take)
	last   int64 // the time of the last refill
}

const (
	nsPerSec = 1_000_000_000
	// maxFrameCost bounds the cost of one frame (a super-frame is at
	// most 64 KiB plus headers; the switch's buffers are smaller than
	// 128 KiB).
	maxFrameBytes = 1 << 17
	// MaxRate is the highest rate a Bandwidth may have, in bytes per
	// second (about 9 Pbit/s; Kubernetes allows up to 1 Pbit/s).
	MaxRate = 1 << 50
	// MaxBurst is the largest burst a Bandwidth may have, in bytes
	// (4 GiB; the kubelet passes 2³¹-1 bits, 256 MiB, for "no limit").
	MaxBurst = 4 << 30
)

// newTokenBucket returns a full bucket of rate bytes/s and burst bytes, at
// time now. rate must be 1..MaxRate and burst 1..MaxBurst (Bandwidth's
// Validate).
func newTokenBucket(rate, burst uint64, now int64) tokenBucket {
	b := tokenBucket{rate: int64(rate), burst: int64(burst) * nsPerSec, last: now}
	b.tokens = b.burst
	return b
}

// refill adds the tokens earned since the last refill. A time before the
// last (two workers' batch times, taken in one order and used in the
// other) adds nothing and does not move the bucket's time back.
func (b *tokenBucket) refill(now int64) {
	d := now - b.last
	if d <= 0 {
		return
	}
	b.last = now
	room := b.burst - b.tokens // at most 2 bursts and a frame: no overflow
	if d > room/b.rate {
		b.tokens = b.burst
		return
	}
	b.tokens += d * b.rate // at most room
}

// take refills the bucket to now and takes size bytes from it if the
// frame may pass (see tokenBucket); it reports whether it did.
func (b *tokenBucket) take(size int, now int64) bool {
	b.refill(now)
	c := int64(min(max(size, 0), maxFrameBytes)) * nsPerSec
	if b.tokens >= c || b.tokens >= b.burst {
		b.tokens -= c
		return true
	}
	return false
}

// takeDebt refills the bucket to now and takes size bytes from it if that
// leaves it no deeper in debt than one burst; it reports whether it did.
// The caller then waits (debt) before it reads more frames.
func (b *tokenBucket) takeDebt(size int, now int64) bool {
	b.refill(now)
	c := int64(min(max(size, 0), maxFrameBytes)) * nsPerSec
	if b.tokens-c >= -b.burst {
		b.tokens -= c
		return true
	}
	return false
}

// debt is how many nanoseconds after the last refill the bucket is out of
// debt (0: it is not in debt).
func (b *tokenBucket) debt() int64 {
	if b.tokens >= 0 {
		return 0
	}
	return (-b.tokens + b.rate - 1) / b.rate
}

// wait is how many nanoseconds after the last refill a frame of size bytes
// may pass (0: now).
func (b *tokenBucket) wait(size int) int64 {
	c := int64(min(max(size, 0), maxFrameBytes)) * nsPerSec
	need := min(c, b.burst) - b.tokens
	if need <= 0 {
		return 0
	}
	return (need + b.rate - 1) / b.rate
}
