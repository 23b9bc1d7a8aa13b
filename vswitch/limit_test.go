package vswitch

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/port"
)

func benchTable(testing.TB) *flowtable.Table { return flowtable.New(flowtable.Config{}) }

const ms = int64(time.Millisecond)

// TestTokenBucketBurstAndRefill: a new bucket is full; it pays exactly its
// burst, then what the rate refills, with a fake clock.
func TestTokenBucketBurstAndRefill(t *testing.T) {
	b := newTokenBucket(1000, 1500, 0) // 1000 B/s, 1500 B
	if !b.take(1500, 0) {
		t.Fatal("a full bucket refused its burst")
	}
	if b.take(1, 0) {
		t.Fatal("an empty bucket paid for a byte")
	}
	if got := b.wait(100); got != 100*ms {
		t.Errorf("wait for 100 bytes at 1000 B/s: %d ns, want %d", got, 100*ms)
	}
	if b.take(100, 99*ms) {
		t.Error("100 bytes passed after 99 ms at 1000 B/s")
	}
	if !b.take(100, 100*ms) {
		t.Error("100 bytes refused after 100 ms at 1000 B/s")
	}
	// Idle for an hour: the bucket holds its burst, not an hour's worth.
	now := 100*ms + int64(time.Hour)
	if !b.take(1500, now) || b.take(1, now) {
		t.Error("after a long idle time the bucket does not hold exactly its burst")
	}
}

// TestTokenBucketNoRoundingLoss: refilled every few nanoseconds, far more
// often than a byte's worth of time, the bucket still earns the full rate.
func TestTokenBucketNoRoundingLoss(t *testing.T) {
	const rate = 6_250_000 // 50 Mbit/s: a byte every 160 ns
	b := newTokenBucket(rate, 1500, 0)
	b.take(1500, 0)
	var now int64
	for now < int64(time.Second) {
		now += 7
		b.take(0, now) // refills, takes nothing
	}
	// now is 1 s + up to 6 ns: exactly rate bytes (and a fraction) earned.
	b.burst = math.MaxInt64 / 2 // look at the tokens, not the cap
	if got := b.tokens / nsPerSec; got != rate && got != 1500 {
		t.Errorf("after 1 s of 7-ns refills: %d bytes, want %d (or the burst, 1500)", got, rate)
	}
}

// TestTokenBucketLongRunRate: offered twice the rate for 10 s of fake time
// in 1500-byte frames, the bucket passes the rate plus its burst, within a
// frame.
func TestTokenBucketLongRunRate(t *testing.T) {
	const rate, burst = 1_250_000, 30_000 // 10 Mbit/s
	b := newTokenBucket(rate, burst, 0)
	var passed int64
	step := int64(1500) * nsPerSec / (2 * rate) // two frames' time at the rate... halved: twice the rate
	for now := int64(0); now < 10*int64(time.Second); now += step {
		if b.take(1500, now) {
			passed += 1500
		}
	}
	want := int64(rate*10 + burst)
	if passed < want-1500 || passed > want+1500 {
		t.Errorf("passed %d bytes in 10 s, want %d ± 1500", passed, want)
	}
}

// TestTokenBucketOversizedFrame: a frame larger than the burst passes when
// the bucket is full, and the debt delays what follows.
func TestTokenBucketOversizedFrame(t *testing.T) {
	b := newTokenBucket(1000, 1000, 0)
	if !b.take(65536, 0) {
		t.Fatal("a super-frame larger than the burst was refused by a full bucket")
	}
	if b.take(1, int64(time.Second)) {
		t.Error("the debt of a super-frame was forgotten after 1 s")
	}
	if w := b.wait(1); w <= 0 {
		t.Errorf("wait after the debt: %d, want > 0", w)
	}
	if !b.take(1000, 66*int64(time.Second)) {
		t.Error("the bucket did not recover after the debt was paid")
	}
}

// TestTokenBucketTimeOverflow: the largest rate and burst, a clock jump to
// the end of int64 time, and a clock that goes back neither overflow nor
// go negative.
func TestTokenBucketTimeOverflow(t *testing.T) {
	b := newTokenBucket(MaxRate, MaxBurst, 0)
	if !b.take(maxFrameBytes, 0) {
		t.Fatal("refused a frame")
	}
	b.take(0, math.MaxInt64)
	if b.tokens != b.burst {
		t.Errorf("after a jump to MaxInt64: %d tokens, want the burst %d", b.tokens, b.burst)
	}
	b.take(maxFrameBytes, math.MaxInt64)
	before := b.tokens
	b.take(0, 0) // back in time: nothing earned, time kept
	if b.last != math.MaxInt64 || b.tokens != before {
		t.Errorf("a clock going back changed the bucket: last %d, tokens %d", b.last, b.tokens)
	}
	// A bucket a burst in debt, refilled just short of full: d × rate
	// is at its largest.
	b2 := newTokenBucket(1, MaxBurst, 0)
	for b2.takeDebt(maxFrameBytes, 0) {
	}
	room := b2.burst - b2.tokens
	b2.refill(room / b2.rate)
	if b2.tokens < -b2.burst || b2.tokens > b2.burst {
		t.Errorf("refill of a bucket in debt: %d tokens, want -%d..%d", b2.tokens, b2.burst, b2.burst)
	}
	if b2.refill(room/b2.rate + 1); b2.tokens != b2.burst {
		t.Errorf("refilled past full: %d tokens, want %d", b2.tokens, b2.burst)
	}
	small := newTokenBucket(1, 1, 0)
	small.take(maxFrameBytes, 0)
	small.refill(math.MaxInt64)
	if small.tokens != small.burst {
		t.Errorf("1 B/s after a jump to MaxInt64: %d tokens, want %d", small.tokens, small.burst)
	}
}

func TestBandwidthValidate(t *testing.T) {
	for _, b := range []Bandwidth{{Rate: MaxRate + 1}, {Rate: 1, Burst: MaxBurst + 1}, {Burst: 10}} {
		if err := b.Validate(); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%+v: %v, want ErrInvalidLimit", b, err)
		}
	}
	if err := (Bandwidth{Rate: 1}).Validate(); err != nil {
		t.Error(err)
	}
	if got := (Bandwidth{Rate: 6_250_000}).WithDefaults(false).Burst; got != 625_000 {
		t.Errorf("default burst at 50 Mbit/s: %d bytes, want 625000 (100 ms)", got)
	}
}

// TestPolicer: a port limited to a tiny rate and a burst of three frames
// passes three frames of a batch, three more into debt (delayed), drops the
// others as policed, and then holds its reader back until the debt is
// paid.
func TestPolicer(t *testing.T) {
	w, out := benchWorker(t)
	size := w.meta[0].Size
	e := (*w.s.ports.Load())[3]
	if err := e.setLimit(&portLimit{limit: Limit{Egress: Bandwidth{Rate: 1, Burst: uint64(3 * size)}},
		pol: &policer{b: newTokenBucket(1, uint64(3*size), w.s.now())}}); err != nil {
		t.Fatal(err)
	}
	w.process(len(w.bufs))
	st, ok := e.limitStats()
	if !ok || st.Egress.PassedFrames != 6 || st.Egress.DelayedFrames != 3 || st.Egress.DroppedFrames != uint64(len(w.bufs)-6) {
		t.Fatalf("limit stats %+v, want 6 passed (3 delayed), %d dropped", st, len(w.bufs)-6)
	}
	if got := w.s.Stats().Drops[DropPoliced]; got != uint64(len(w.bufs)-6) {
		t.Errorf("policed drops %d, want %d", got, len(w.bufs)-6)
	}
	if out.n != 3 { // frames 0, 2 and 4 go to port 4; the odd ones to the tunnel
		t.Errorf("%d frames written to port 4, want 3", out.n)
	}
	// In debt by 3 frames at 1 B/s: the reader waits (here: until ctx ends).
	if d := e.limit.Load().pol.pause(w.s.now()); d < time.Duration(3*size-1)*time.Second {
		t.Errorf("pause %v, want about %d s", d, 3*size)
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if w.holdBack(cctx, e.limit.Load().pol) {
		t.Error("holdBack let the reader read while in debt")
	}
}

// recordPort records what is written to it.
type recordPort struct {
	discardPort
	mu     sync.Mutex
	sizes  []int
	frames atomic.Int64
}

func (p *recordPort) Write(bufs [][]byte, meta []port.Meta, _ int) (int, error) {
	p.mu.Lock()
	for i := range bufs {
		p.sizes = append(p.sizes, meta[i].Size)
	}
	p.mu.Unlock()
	p.frames.Add(int64(len(bufs)))
	return len(bufs), nil
}

// TestShaper: frames the bucket pays for stay with the worker; the others
// wait in the queue until the (fake) clock has refilled the bucket, in
// order; a frame that does not fit the queue is dropped.
func TestShaper(t *testing.T) {
	sw, err := New(Config{Table: benchTable(t)})
	if err != nil {
		t.Fatal(err)
	}
	rp := &recordPort{}
	e := &portEntry{no: 4, q: []Port{rp}}
	var now atomic.Int64
	clock := func() int64 { return now.Load() }
	// 1000 B/s, a burst of 1000 B, a queue of two 500-byte frames.
	sh := newShaper(sw, e, Bandwidth{Rate: 1000, Burst: 1000}, 2*(Headroom+500), clock)
	t.Cleanup(sh.stop)
	buf := make([]byte, Headroom+500)
	p := &pending{e: e}
	for range 5 {
		p.bufs = append(p.bufs, buf)
		p.meta = append(p.meta, port.Meta{Size: 500})
		p.bytes += 500
	}
	if dropped := sh.admit(p, clock()); dropped != 1 {
		t.Errorf("admit dropped %d frames, want 1 (two pass, two are queued)", dropped)
	}
	if len(p.bufs) != 2 || p.bytes != 1000 {
		t.Errorf("the worker keeps %d frames (%d bytes), want 2 (1000)", len(p.bufs), p.bytes)
	}
	c := sh.counters()
	if c.PassedFrames != 2 || c.DelayedFrames != 2 || c.DroppedFrames != 1 {
		t.Errorf("counters %+v, want 2 passed, 2 delayed, 1 dropped", c)
	}
	if rp.frames.Load() != 0 {
		t.Fatal("a queued frame was written before the bucket refilled")
	}
	now.Store(500 * ms) // 500 bytes earned: one frame; the shaper's timer fires within 500 ms
	testutil.WaitFor(t, 10*time.Second, "the first queued frame", func() (bool, error) { return sh.counters().PassedFrames >= 3, nil })
	if got := rp.frames.Load(); got != 1 {
		t.Errorf("after 500 ms: %d queued frames written, want 1", got)
	}
	now.Store(1000 * ms)
	testutil.WaitFor(t, 10*time.Second, "the second queued frame", func() (bool, error) { return sh.counters().PassedFrames >= 4, nil })
	if got := rp.frames.Load(); got != 2 {
		t.Errorf("after 1 s: %d queued frames written, want 2", got)
	}
	if c := sh.counters(); c.PassedFrames != 4 || c.PassedBytes != 2000 {
		t.Errorf("counters %+v, want 4 frames, 2000 bytes passed", c)
	}
}

// TestShaperRingWraps: frames of mixed sizes go through the queue's ring
// many times over, and every one comes out whole and in order.
func TestShaperRingWraps(t *testing.T) {
	sw, err := New(Config{Table: benchTable(t)})
	if err != nil {
		t.Fatal(err)
	}
	e := &portEntry{no: 4, q: []Port{&discardPort{}}}
	sh := &shaper{s: sw, e: e, ring: make([]byte, 4000), recs: make([]shapedFrame, 4000/minSpan+1)}
	sizes := []int{100, 900, 1400, 60, 700}
	var in, out []int
	for round := range 200 {
		size := sizes[round%len(sizes)]
		span := max(Headroom+size, minSpan)
		if off := sh.place(span); off >= 0 {
			if off+span > len(sh.ring) {
				t.Fatalf("frame at %d+%d beyond the ring", off, span)
			}
			for k := range sh.rcount {
				r := sh.recs[(sh.rhead+k)%len(sh.recs)]
				if off < r.off+r.span && r.off < off+span {
					t.Fatalf("frame at %d+%d overlaps a queued one at %d+%d", off, span, r.off, r.span)
				}
			}
			sh.recs[(sh.rhead+sh.rcount)%len(sh.recs)] = shapedFrame{off: off, span: span, meta: port.Meta{Size: size}}
			sh.rcount++
			sh.wpos = off + span
			in = append(in, size)
		}
		if round%3 == 2 && sh.rcount > 0 {
			out = append(out, sh.recs[sh.rhead].meta.Size)
			sh.pop()
		}
	}
	for sh.rcount > 0 {
		out = append(out, sh.recs[sh.rhead].meta.Size)
		sh.pop()
	}
	if len(in) < 50 || len(in) != len(out) {
		t.Fatalf("%d frames queued, %d taken out", len(in), len(out))
	}
	for i := range in {
		if in[i] != out[i] {
			t.Fatalf("frame %d: %d bytes in, %d out", i, in[i], out[i])
		}
	}
}

// TestSetPortLimit: limits are validated, replaced and removed with the
// port, and a removed port takes none.
func TestSetPortLimit(t *testing.T) {
	sw, err := New(Config{Table: benchTable(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	if err := sw.AddPort(4, &closingPort{closed: make(chan struct{})}); err != nil {
		t.Fatal(err)
	}
	if err := sw.SetPortLimit(4, Limit{Ingress: Bandwidth{Burst: 5}}); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("burst without rate: %v", err)
	}
	if err := sw.SetPortLimit(9, Limit{Egress: Bandwidth{Rate: 1}}); !errors.Is(err, ErrNoSuchPort) {
		t.Errorf("no such port: %v", err)
	}
	if err := sw.SetPortLimit(4, Limit{Ingress: Bandwidth{Rate: 1e6}, Egress: Bandwidth{Rate: 2e6}}); err != nil {
		t.Fatal(err)
	}
	st, ok := sw.PortLimit(4)
	if !ok || st.Limit.Egress.Burst != DefaultPoliceBurst(2e6) || st.Limit.Ingress.Burst != DefaultBurst(1e6) || st.QueuedBytesLimit != DefaultQueue(1e6) {
		t.Errorf("limit %+v, want default burst and queue", st)
	}
	if err := sw.SetPortLimit(4, Limit{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := sw.PortLimit(4); ok {
		t.Error("a zero Limit left a limit")
	}
	if err := sw.SetPortLimit(4, Limit{Ingress: Bandwidth{Rate: 1e6}}); err != nil {
		t.Fatal(err)
	}
	e := (*sw.ports.Load())[4]
	sh := e.limit.Load().sh
	if err := sw.RemovePort(4); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sh.done:
	default:
		t.Error("the shaper's goroutine outlived its port")
	}
	if err := e.setLimit(&portLimit{}); !errors.Is(err, ErrNoSuchPort) {
		t.Errorf("a limit on a removed port: %v", err)
	}
}

// closingPort is a discardPort whose Read returns when it is closed.
type closingPort struct {
	discardPort
	closed chan struct{}
}

func (p *closingPort) Read([][]byte, []port.Meta, int) (int, error) {
	<-p.closed
	return 0, errors.New("closed")
}

func (p *closingPort) Close() error { close(p.closed); return nil }

// limitedWorker is benchWorker with an egress limit on port 3 and an
// ingress limit on port 4, both high enough that every frame passes.
func limitedWorker(tb testing.TB) *worker {
	w, _ := benchWorker(tb)
	m := *w.s.ports.Load()
	now := w.s.now()
	if err := m[3].setLimit(&portLimit{pol: &policer{b: newTokenBucket(MaxRate, MaxBurst, now)}}); err != nil {
		tb.Fatal(err)
	}
	sh := newShaper(w.s, m[4], Bandwidth{Rate: MaxRate, Burst: MaxBurst}, DefaultQueue(MaxRate), w.s.now)
	if err := m[4].setLimit(&portLimit{sh: sh}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(m[4].endLimit)
	return w
}

// TestLimitedProcessAllocs: policing and shaping allocate nothing per
// frame, whether frames pass or are queued and dropped.
func TestLimitedProcessAllocs(t *testing.T) {
	w := limitedWorker(t)
	w.process(len(w.bufs))
	if n := testing.AllocsPerRun(100, func() { w.process(len(w.bufs)) }); n != 0 {
		t.Errorf("processing a limited batch allocates %.1f times", n)
	}
	// Starved buckets: every frame is policed, or queued until the
	// queue is full and then dropped.
	m := *w.s.ports.Load()
	m[3].limit.Load().pol.b = newTokenBucket(1, 1, w.s.now())
	m[3].limit.Load().pol.b.tokens = -maxFrameBytes * nsPerSec
	w.process(len(w.bufs))
	m[3].limit.Store(nil)
	sh := newShaper(w.s, m[4], Bandwidth{Rate: 1, Burst: 1}, 4096, w.s.now)
	sh.b.tokens = -maxFrameBytes * nsPerSec // before the goroutine could take anything: it waits for the 1-byte burst
	if err := m[4].setLimit(&portLimit{sh: sh}); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { w.process(len(w.bufs)) }); n != 0 {
		t.Errorf("processing a batch into a full shaper allocates %.1f times", n)
	}
	if w.s.Stats().Drops[DropPoliced] == 0 || w.s.Stats().Drops[DropShaperQueue] == 0 {
		t.Errorf("drops %v: want policed and shaper_queue drops", w.s.Stats().Drops)
	}
}

// BenchmarkLimitedBatch is BenchmarkProcessBatch with both limits on the
// way (every frame passes both): the limits' cost per frame is the
// difference.
func BenchmarkLimitedBatch(b *testing.B) {
	benchBatch(b, limitedWorker(b))
}

// BenchmarkTokenBucket is one frame's take.
func BenchmarkTokenBucket(b *testing.B) {
	tb := newTokenBucket(MaxRate, MaxBurst, 0)
	var now int64
	b.ReportAllocs()
	for b.Loop() {
		now += 100
		tb.take(1500, now)
	}
}
