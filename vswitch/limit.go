package vswitch

// Bandwidth limits of a port (SetPortLimit), what Kubernetes' pod bandwidth
// annotations and the CNI bandwidth capability ask for:
//
//  1. From the port (the pod sends, Limit.Egress): the port's workers take
//     each batch's frames from a token bucket before the pipeline runs,
//     into debt if need be, and then read nothing until the debt is paid
//     (policer: the pod's own queues hold the rest); a frame that would
//     put the bucket more than a burst in debt is dropped (DropPoliced).
//  2. Toward the port (the pod receives, Limit.Ingress): flush hands the
//     frames for the port to its shaper. While nothing waits in the
//     shaper's queue and the bucket pays, a frame is written at once, by
//     the worker, as without a limit; otherwise it is copied into the
//     queue (a byte ring allocated when the limit is set), and the shaper's
//     goroutine writes it when the bucket has refilled. A frame that does
//     not fit the queue is dropped (DropShaperQueue): the queue bounds the
//     delay (DefaultQueue).
//  3. A port without a limit pays one atomic load per batch and direction.
//
// Nothing here allocates per frame: the buckets are values, the queue's
// ring and its records are made when the limit is set.

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gvswitch/gvs/port"
)

// ErrInvalidLimit is returned by SetPortLimit for a limit out of range.
var ErrInvalidLimit = errors.New("vswitch: invalid bandwidth limit")

// Bandwidth is one direction's limit: Rate bytes per second on average,
// with bursts of up to Burst bytes above it. A zero Rate is no limit; a
// zero Burst is DefaultBurst(Rate) toward the port, DefaultPoliceBurst(Rate)
// from it.
type Bandwidth struct {
	Rate  uint64
	Burst uint64
}

// DefaultBurst is the burst of an ingress (shaped) limit that names none:
// 100 ms at the rate, and at least 128 KiB, so that two TCP super-frames
// pass back to back. The shaper's queue absorbs what is above it.
func DefaultBurst(rate uint64) uint64 {
	return min(max(rate/10, 128<<10), MaxBurst)
}

// DefaultPoliceBurst is the burst of an egress limit (policer) that names
// none: one second at the rate (OVS's default for its policer is 0.8 s),
// at least 128 KiB.
func DefaultPoliceBurst(rate uint64) uint64 {
	return min(max(rate, 128<<10), MaxBurst)
}

// DefaultQueue is how many bytes of frames toward a shaped port wait in its
// queue before more are dropped: 50 ms at the rate, and at least 256 KiB,
// at most 32 MiB (the memory each shaped port holds).
func DefaultQueue(rate uint64) int {
	return int(min(max(rate/20, 256<<10), 32<<20))
}

// Validate reports whether b is a usable limit.
func (b Bandwidth) Validate() error {
	if b.Rate > MaxRate {
		return fmt.Errorf("%w: rate %d bytes/s is more than %d", ErrInvalidLimit, b.Rate, uint64(MaxRate))
	}
	if b.Burst > MaxBurst {
		return fmt.Errorf("%w: burst %d bytes is more than %d", ErrInvalidLimit, b.Burst, uint64(MaxBurst))
	}
	if b.Rate == 0 && b.Burst != 0 {
		return fmt.Errorf("%w: a burst (%d bytes) without a rate", ErrInvalidLimit, b.Burst)
	}
	return nil
}

// WithDefaults returns b with its burst filled in: DefaultBurst, or with
// police DefaultPoliceBurst.
func (b Bandwidth) WithDefaults(police bool) Bandwidth {
	if b.Rate > 0 && b.Burst == 0 {
		b.Burst = DefaultBurst(b.Rate)
		if police {
			b.Burst = DefaultPoliceBurst(b.Rate)
		}
	}
	return b
}

// Limit is a port's bandwidth limit in both directions.
type Limit struct {
	// Ingress limits the frames the switch writes to the port (what a pod
	// receives): they are shaped, delayed up to a queue's worth, then
	// dropped.
	Ingress Bandwidth
	// Egress limits the frames the switch reads from the port (what a pod
	// sends): the switch reads no faster than the rate allows, after a
	// burst, and drops a batch's frames beyond a burst of debt (policer).
	Egress Bandwidth
}

// IsZero reports whether l limits nothing.
func (l Limit) IsZero() bool { return l.Ingress.Rate == 0 && l.Egress.Rate == 0 }

// LimitCounters count what one direction of a limit did to the frames.
// Ingress: delayed frames were queued by the shaper; they are among Passed
// once written, or among Dropped when the port goes before. Egress:
// delayed frames passed into debt, and the port's reading paused after
// them; they are among Passed.
type LimitCounters struct {
	PassedFrames, PassedBytes   uint64
	DelayedFrames, DelayedBytes uint64
	DroppedFrames, DroppedBytes uint64
}

// LimitStats are a limited port's limit, with defaults filled in, and its
// counters.
type LimitStats struct {
	Limit            Limit
	Ingress, Egress  LimitCounters
	QueuedBytesLimit int // the shaper's queue (Ingress)
}

// policer is the egress limit of a port, shared by its queues' workers.
// It holds the pod back rather than dropping what the pod sends: a frame
// read while the bucket is empty still passes, putting the bucket in debt
// (counted as delayed), and the port's workers read nothing more until the
// debt is paid (pause), so the frames wait in the pod's own queues (its
// qdisc, the TAP's queue) and its TCP slows down as before a slow link,
// without losses. Only a frame that would put the bucket more than one
// burst in debt is dropped (DropPoliced); a sender that fills its queues
// faster than the rate loses its frames in its own kernel, as on a full
// link. (A policer that dropped at once made a 50 Mbit/s TCP sender reach
// 18 to 25 Mbit/s: its retransmissions were dropped too, and it idled
// through retransmission timeouts.)
type policer struct {
	mu sync.Mutex
	b  tokenBucket
	c  LimitCounters
}

// police decides, for each of the n frames of a worker's batch, whether it
// passes; dropped[i] is set for those that do not. One lock per batch.
func (p *policer) police(meta []port.Meta, dropped []bool, now int64) {
	p.mu.Lock()
	for i := range meta {
		size := uint64(max(meta[i].Size, 0))
		ok := p.b.takeDebt(meta[i].Size, now)
		dropped[i] = !ok
		switch {
		case !ok:
			p.c.DroppedFrames++
			p.c.DroppedBytes += size
		case p.b.tokens < 0:
			p.c.DelayedFrames++
			p.c.DelayedBytes += size
			fallthrough
		default:
			p.c.PassedFrames++
			p.c.PassedBytes += size
		}
	}
	p.mu.Unlock()
}

// pause is how long the port's workers wait before they read again: until
// the bucket is out of debt.
func (p *policer) pause(now int64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.b.refill(now)
	return time.Duration(p.b.debt())
}

func (p *policer) counters() LimitCounters {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c
}

// portLimit is what SetPortLimit installs on a port.
type portLimit struct {
	limit Limit
	pol   *policer // nil: egress unlimited
	sh    *shaper  // nil: ingress unlimited
}

// now is the switch's clock for the limits: monotonic nanoseconds since
// the switch was made.
func (s *Switch) now() int64 { return int64(time.Since(s.epoch)) }

// SetPortLimit sets port no's bandwidth limit, replacing the one it had
// (the old shaper's queued frames are dropped); a zero Limit removes it.
// Bursts left zero get their defaults (Bandwidth.WithDefaults).
func (s *Switch) SetPortLimit(no uint32, l Limit) error {
	if err := l.Ingress.Validate(); err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	if err := l.Egress.Validate(); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	l.Ingress, l.Egress = l.Ingress.WithDefaults(false), l.Egress.WithDefaults(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := (*s.ports.Load())[no]
	if !ok {
		return fmt.Errorf("%w: %d", ErrNoSuchPort, no)
	}
	var nl *portLimit
	if !l.IsZero() {
		nl = &portLimit{limit: l}
		now := s.now()
		if l.Egress.Rate > 0 {
			nl.pol = &policer{b: newTokenBucket(l.Egress.Rate, l.Egress.Burst, now)}
		}
		if l.Ingress.Rate > 0 {
			nl.sh = newShaper(s, e, l.Ingress, DefaultQueue(l.Ingress.Rate), s.now)
		}
	}
	return e.setLimit(nl)
}

// setLimit installs nl (nil: none) and stops the shaper it replaces. A
// port being removed takes no new limit.
func (e *portEntry) setLimit(nl *portLimit) error {
	e.limitMu.Lock()
	defer e.limitMu.Unlock()
	if e.stopped {
		if nl != nil && nl.sh != nil {
			nl.sh.stop()
		}
		return fmt.Errorf("%w: %d is being removed", ErrNoSuchPort, e.no)
	}
	old := e.limit.Swap(nl)
	if old != nil && old.sh != nil {
		old.sh.stop()
	}
	return nil
}

// endLimit stops the port's shaper, for good (RemovePort).
func (e *portEntry) endLimit() {
	e.limitMu.Lock()
	defer e.limitMu.Unlock()
	e.stopped = true
	if old := e.limit.Swap(nil); old != nil && old.sh != nil {
		old.sh.stop()
	}
}

// PortLimit returns port no's limit and counters; ok is false when the
// port has no limit (or does not exist).
func (s *Switch) PortLimit(no uint32) (LimitStats, bool) {
	e, ok := (*s.ports.Load())[no]
	if !ok {
		return LimitStats{}, false
	}
	return e.limitStats()
}

func (e *portEntry) limitStats() (LimitStats, bool) {
	pl := e.limit.Load()
	if pl == nil {
		return LimitStats{}, false
	}
	st := LimitStats{Limit: pl.limit}
	if pl.pol != nil {
		st.Egress = pl.pol.counters()
	}
	if pl.sh != nil {
		st.Ingress = pl.sh.counters()
		st.QueuedBytesLimit = len(pl.sh.ring)
	}
	return st, true
}

// shapedFrame is a frame in a shaper's queue: ring[off:off+Headroom+meta.Size].
type shapedFrame struct {
	off  int
	span int // bytes of the ring it holds (Headroom + size, rounded up)
	qi   int // the port's queue it is written to
	meta port.Meta
}

// shaperBatch is how many queued frames the shaper's goroutine writes at
// most in one go.
const shaperBatch = 64

// shaper is the ingress limit of a port: its bucket, its queue of delayed
// frames and the goroutine that writes them. Workers call admit
// concurrently; the goroutine is the only one that removes frames.
type shaper struct {
	s     *Switch
	e     *portEntry
	clock func() int64
	kick  chan struct{} // a frame was queued: the goroutine looks
	quit  chan struct{} // closed by stop
	done  chan struct{} // closed when the goroutine has ended

	mu            sync.Mutex
	b             tokenBucket
	c             LimitCounters
	ring          []byte
	wpos          int           // where the next frame goes, unless it wraps
	recs          []shapedFrame // a ring of records, oldest at rhead
	rhead, rcount int
	// The goroutine's batch: views into ring, written outside mu. The
	// frames stay in the queue (keeping their space) until written.
	out  [][]byte
	outM []port.Meta
	outQ []int
}

// minSpan is the ring space a frame takes at least, which bounds the
// number of records.
const minSpan = Headroom + 64

func newShaper(s *Switch, e *portEntry, bw Bandwidth, queue int, clock func() int64) *shaper {
	sh := &shaper{s: s, e: e, clock: clock,
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		b:    newTokenBucket(bw.Rate, bw.Burst, clock()),
		ring: make([]byte, queue),
		recs: make([]shapedFrame, queue/minSpan+1),
		out:  make([][]byte, 0, shaperBatch), outM: make([]port.Meta, 0, shaperBatch), outQ: make([]int, 0, shaperBatch),
	}
	go sh.run()
	return sh
}

// stop ends the goroutine and waits for it; queued frames are dropped.
func (sh *shaper) stop() {
	close(sh.quit)
	<-sh.done
	sh.mu.Lock()
	for sh.rcount > 0 {
		r := &sh.recs[sh.rhead]
		sh.c.DroppedFrames++
		sh.c.DroppedBytes += uint64(r.meta.Size)
		sh.pop()
	}
	sh.mu.Unlock()
}

func (sh *shaper) counters() LimitCounters {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.c
}

// place returns where a frame taking span bytes of the ring goes, or -1
// when the queue is full.
func (sh *shaper) place(span int) int {
	if sh.rcount == 0 {
		sh.wpos = 0
		if span <= len(sh.ring) {
			return 0
		}
		return -1
	}
	if sh.rcount == len(sh.recs) {
		return -1
	}
	start := sh.recs[sh.rhead].off
	if sh.wpos > start { // the frames lie in [start, wpos): room at the end or at the front
		if sh.wpos+span <= len(sh.ring) {
			return sh.wpos
		}
		if span <= start {
			return 0
		}
		return -1
	}
	// wrapped: the free space is [wpos, start)
	if sh.wpos+span <= start {
		return sh.wpos
	}
	return -1
}

func (sh *shaper) pop() {
	sh.recs[sh.rhead] = shapedFrame{}
	sh.rhead = (sh.rhead + 1) % len(sh.recs)
	sh.rcount--
}

// admit takes the frames a worker has for the port: those that may pass
// now stay in p (compacted, in order) for the worker to write; the others
// are copied into the queue, or dropped when it is full. It returns the
// number of frames dropped.
func (sh *shaper) admit(p *pending, now int64) (dropped int) {
	kept, queued := 0, false
	sh.mu.Lock()
	for k, buf := range p.bufs {
		m := p.meta[k]
		size := m.Size
		if sh.rcount == 0 && sh.b.take(size, now) {
			sh.c.PassedFrames++
			sh.c.PassedBytes += uint64(size)
			p.bufs[kept], p.meta[kept] = buf, m
			kept++
			continue
		}
		span := max(Headroom+size, minSpan)
		off := sh.place(span)
		if off < 0 {
			sh.c.DroppedFrames++
			sh.c.DroppedBytes += uint64(size)
			p.bytes -= size
			dropped++
			continue
		}
		copy(sh.ring[off+Headroom:off+Headroom+size], buf[Headroom:Headroom+size])
		sh.recs[(sh.rhead+sh.rcount)%len(sh.recs)] = shapedFrame{off: off, span: span, qi: p.qi, meta: m}
		sh.rcount++
		sh.wpos = off + span
		sh.c.DelayedFrames++
		sh.c.DelayedBytes += uint64(size)
		p.bytes -= size
		queued = true
	}
	sh.mu.Unlock()
	for k := kept; k < len(p.bufs); k++ {
		p.bufs[k] = nil
	}
	p.bufs, p.meta = p.bufs[:kept], p.meta[:kept]
	if queued {
		select {
		case sh.kick <- struct{}{}:
		default:
		}
	}
	return dropped
}

// run writes the queued frames as the bucket lets them pass, until stop.
func (sh *shaper) run() {
	defer close(sh.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		sh.mu.Lock()
		now := sh.clock()
		n := 0
		for n < sh.rcount && n < shaperBatch {
			r := &sh.recs[(sh.rhead+n)%len(sh.recs)]
			if !sh.b.take(r.meta.Size, now) {
				break
			}
			sh.out = append(sh.out, sh.ring[r.off:r.off+Headroom+r.meta.Size])
			sh.outM = append(sh.outM, r.meta)
			sh.outQ = append(sh.outQ, r.qi)
			n++
		}
		var wait int64 = -1 // -1: nothing queued
		if n == 0 && sh.rcount > 0 {
			wait = max(sh.b.wait(sh.recs[sh.rhead].meta.Size)-(now-sh.b.last), 1)
		}
		sh.mu.Unlock()
		if n > 0 {
			sh.write()
			continue
		}
		if wait < 0 {
			select {
			case <-sh.kick:
			case <-sh.quit:
				return
			}
			continue
		}
		t.Reset(time.Duration(wait))
		select {
		case <-t.C:
		case <-sh.quit:
			t.Stop()
			return
		}
	}
}

// write writes the goroutine's batch, one Write per run of frames for the
// same queue, and then frees their space in the queue.
func (sh *shaper) write() {
	e := sh.e
	var wrote, lost int
	var wroteBytes, lostBytes uint64
	for i := 0; i < len(sh.out); {
		j := i + 1
		for j < len(sh.out) && sh.outQ[j] == sh.outQ[i] {
			j++
		}
		n, err := e.q[sh.outQ[i]].Write(sh.out[i:j], sh.outM[i:j], Headroom)
		n = max(min(n, j-i), 0)
		for k := i; k < j; k++ {
			if k < i+n {
				wroteBytes += uint64(sh.outM[k].Size)
			} else {
				lostBytes += uint64(sh.outM[k].Size)
			}
		}
		wrote += n
		lost += j - i - n
		if n < j-i && err != nil {
			sh.s.txErrorLog(e, err)
		}
		i = j
	}
	e.stats.txPackets.n.Add(uint64(wrote))
	e.stats.txBytes.n.Add(wroteBytes)
	if lost > 0 {
		e.stats.txDrops.n.Add(uint64(lost))
		sh.s.drops[DropTxError].n.Add(uint64(lost))
	}
	sh.mu.Lock()
	for range sh.out {
		sh.pop()
	}
	sh.c.PassedFrames += uint64(wrote)
	sh.c.PassedBytes += wroteBytes
	sh.c.DroppedFrames += uint64(lost)
	sh.c.DroppedBytes += lostBytes
	sh.mu.Unlock()
	clear(sh.out)
	sh.out, sh.outM, sh.outQ = sh.out[:0], sh.outM[:0], sh.outQ[:0]
}
