package vswitch

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// spareBuffers is how many extra buffers a worker keeps for frames that go to
// more than one port (each output after the first gets its own copy).
const spareBuffers = 8

// pending is the frames of one batch queued for one destination port.
type pending struct {
	e     *portEntry
	qi    int // the queue of e the frames are written to
	bufs  [][]byte
	meta  []port.Meta
	bytes int
}

// worker is the per-port reading loop's state. It is owned by one goroutine,
// so nothing in it is shared.
type worker struct {
	s      *Switch
	in     *portEntry
	q      Port // the queue of in this worker reads
	bufs   [][]byte
	meta   []port.Meta
	spare  [][]byte
	nSpare int
	cache  *flowtable.Cache
	f      *flowtable.Fields // the frame's header fields being run: an element of fs
	v      flowtable.Verdict
	hits   flowtable.Counters // rule counters of this batch, flushed at its end
	pend   []pending
	nPend  int
	ports  portMap // the port map for this batch
	// Counts of this batch, added to the switch's counters once per batch.
	nLookups, nHits, nRecircs uint64
	// Idle trimming (trim.go): the coarse time of the last batch, and
	// whether the buffers hold pages worth giving back.
	lastBatch atomic.Int64
	dirty     atomic.Bool
	// wire is scratch space for a capture's outer headers (capture.go).
	wire [MaxWireHeader]byte
	// buf0 is the worker's first buffer: a port that lends buffers
	// (Port) may return a frame in any of them.
	buf0 *byte
	// slab holds bufs and spare (slab.go); it goes back to the switch
	// when the port's workers have ended.
	slab *slab
	ct   ctWorker // connection tracking (conntrack.go)
	// policed marks the frames of the batch the port's egress limit
	// drops (limit.go).
	policed []bool
	hold    *time.Timer // holdBack's, made when first needed
	// The batch's frames' header fields, extracted before the frames run
	// (prefetchCache), whether Extract took each, and their cache
	// hashes.
	fs  []flowtable.Fields
	fok []bool
	hs  []uint64
}

func (s *Switch) newWorker(e *portEntry, q Port) *worker {
	n := max(q.BatchSize(), 1)
	sl := s.slabs.get(n+spareBuffers, Headroom+s.frameSize())
	w := &worker{
		s:       s,
		in:      e,
		q:       q,
		bufs:    append([][]byte(nil), sl.bufs[:n]...),
		meta:    make([]port.Meta, n),
		policed: make([]bool, n),
		fs:      make([]flowtable.Fields, n),
		fok:     make([]bool, n),
		hs:      make([]uint64, n),
		spare:   append([][]byte(nil), sl.bufs[n:]...),
		slab:    sl,
	}
	w.buf0 = &w.bufs[0][0]
	if s.cfg.CacheSize > 0 {
		w.cache = flowtable.NewCache(s.cfg.CacheSize)
	}
	w.ct.init(s.cfg.Conntrack, n)
	return w
}

func (s *Switch) frameSize() int {
	if s.cfg.MaxFrame > 0 {
		return s.cfg.MaxFrame
	}
	return DefaultMaxFrame
}

// worker reads queue qi of e until its context is cancelled or the queue
// fails, or hands its reading on to a new goroutine (port.ErrMoveReader).
func (s *Switch) worker(ctx context.Context, e *portEntry, qi int, wg *sync.WaitGroup) {
	defer wg.Done()
	q := e.q[qi]
	w := e.workers[qi]
	trim := s.cfg.TrimIdle > 0
	for {
		s.park(ctx, q) // pause.go
		if pl := e.limit.Load(); pl != nil && pl.pol != nil {
			if !w.holdBack(ctx, pl.pol) {
				return
			}
		}
		n, err := q.Read(w.bufs, w.meta, Headroom)
		if n > 0 {
			n = min(n, len(w.bufs))
			w.process(n)
			if trim {
				w.used(n)
			}
		}
		if errors.Is(err, port.ErrWoken) {
			w.release()
			if errors.Is(err, port.ErrMoveReader) {
				// The port left this goroutine locked to a thread it no
				// longer needs: end here, so the thread ends too.
				wg.Add(1)
				go s.worker(ctx, e, qi, wg)
				return
			}
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("port read failed; worker stops", "port", e.no, "name", q.Name(), "queue", qi, "err", err)
			}
			return
		}
	}
}

// holdBack waits until the port's egress limit lets its worker read again
// (policer). It reports false when ctx ended meanwhile.
func (w *worker) holdBack(ctx context.Context, p *policer) bool {
	d := p.pause(w.s.now())
	if d <= 0 {
		return true
	}
	if w.hold == nil {
		w.hold = time.NewTimer(d)
	} else {
		w.hold.Reset(d)
	}
	select {
	case <-w.hold.C:
		return true
	case <-ctx.Done():
		w.hold.Stop()
		return false
	}
}

// process runs one batch of n frames through the pipeline and writes the
// results.
func (w *worker) process(n int) {
	s := w.s
	in := w.in
	snap := s.cfg.Table.Snapshot()
	w.ports = *s.ports.Load()
	if c := in.capture.Load(); c != nil {
		c.rx(w, n)
	}
	if w.ct.t != nil && snap.HasConntrack() {
		w.prefetch(n)
	}
	w.prefetchCache(snap, n)
	pl := in.limit.Load()
	if pl != nil && pl.pol != nil {
		pl.pol.police(w.meta[:n], w.policed[:n], s.now())
	} else {
		pl = nil
	}
	var rxBytes uint64
	for i := 0; i < n; i++ {
		m := &w.meta[i]
		size := m.Size
		if size < 0 || size > len(w.bufs[i])-Headroom {
			w.drop(DropMalformed) // a port that broke the Read contract
			continue
		}
		if pl != nil && w.policed[i] {
			w.drop(DropPoliced)
			continue
		}
		rxBytes += uint64(size)
		if m.GSO.IsGSO() && !in.caps.Offload {
			w.drop(DropGSO) // Config.NoOffload, or a port that broke its Caps
			continue
		}
		if !w.fok[i] {
			w.drop(DropMalformed)
			continue
		}
		w.f = &w.fs[i]
		w.runHashed(snap, 0, w.f, &w.v, w.hs[i])
		if w.v.NCT > 0 {
			w.tracked(snap, i, size)
			continue
		}
		w.hits.Account(&w.v, size)
		if w.v.NOut == 0 {
			w.drop(fromPipeline(w.v.Drop))
			s.tableDrops[w.v.Table].Add(1)
			continue
		}
		w.route(i, size)
	}
	in.stats.rxPackets.n.Add(uint64(n))
	in.stats.rxBytes.n.Add(rxBytes)
	s.lookups.n.Add(w.nLookups)
	if w.nHits > 0 {
		s.cacheHits.n.Add(w.nHits)
	}
	if w.nRecircs > 0 {
		s.recircs.n.Add(w.nRecircs)
	}
	w.nLookups, w.nHits, w.nRecircs = 0, 0, 0
	w.hits.Flush()
	w.flush()
}

// prefetchCache extracts the header fields of the batch's first n frames
// (into fs and fok), hashes them for the cache and starts loading their
// cache entries, so that the batch's lookups do not each wait for
// memory in turn (flowtable.Cache.Prefetch). A frame that process drops
// before its lookup is extracted too, for nothing; frames are not
// changed between here and their turn in process (each has its own
// buffer), so the fields are the ones Extract would find then.
func (w *worker) prefetchCache(snap *flowtable.Snapshot, n int) {
	in := w.in
	for i := range n {
		m := &w.meta[i]
		w.fok[i] = false
		w.hs[i] = 0
		if m.Size < 0 || m.Size > len(w.bufs[i])-Headroom {
			continue
		}
		f := &w.fs[i]
		*f = flowtable.Fields{InPort: in.no}
		if in.caps.Tunnel {
			f.TunID = uint64(m.Tunnel.VNI)
			f.TunSrc = m.Tunnel.Addr
		}
		if !flowtable.Extract(w.bufs[i][Headroom:Headroom+m.Size], f) {
			continue
		}
		w.fok[i] = true
		if w.cache != nil {
			w.hs[i] = w.cache.Hash(snap, 0, f)
		}
	}
	if w.cache != nil {
		w.cache.Prefetch(w.hs[:n])
	}
}

// run runs the pipeline of snap from table start for f into v, behind the
// worker's cache.
func (w *worker) run(snap *flowtable.Snapshot, start uint8, f *flowtable.Fields, v *flowtable.Verdict) {
	var h uint64
	if w.cache != nil {
		h = w.cache.Hash(snap, start, f)
	}
	w.runHashed(snap, start, f, v, h)
}

// runHashed is run for fields whose cache hash h is known (prefetchCache
// computed it for the batch).
func (w *worker) runHashed(snap *flowtable.Snapshot, start uint8, f *flowtable.Fields, v *flowtable.Verdict, h uint64) {
	w.nLookups++
	if w.cache == nil {
		snap.RunFrom(start, f, v)
		return
	}
	if w.cache.RunHashed(snap, start, f, v, h) {
		w.nHits++
	}
}

func (w *worker) drop(r DropReason) {
	w.s.drops[r].n.Add(1)
	w.in.stats.rxDrops.n.Add(1)
}

// route queues frame i for each output of the verdict in w.v.
func (w *worker) route(i, size int) {
	hash := FlowHash(w.f)
	g := w.meta[i].GSO
	// Outputs after the first get copies, made before the first output may
	// rewrite the original. Copies take spare buffers; when none is left
	// in this batch (multicast to many nodes and pods), what is queued is
	// written out first, which frees them all: here every spare in use is
	// in a queue (the connection-tracking path, which holds one across a
	// recirculation, does not come this way), and the original is queued
	// last.
	for k := w.v.NOut - 1; k >= 0; k-- {
		if k > 0 && w.nSpare == len(w.spare) {
			w.flush()
		}
		w.output(w.bufs[i], size, g, &w.v.Outputs[k], hash, k > 0)
	}
}

// output queues the frame in buf (size bytes at Headroom, offload
// metadata g) for out; with cp, on a copy in a spare buffer, leaving buf
// as it is.
func (w *worker) output(buf []byte, size int, g packet.GSO, out *flowtable.Output, hash uint32, cp bool) {
	dst, ok := w.ports[out.Port]
	if !ok {
		w.drop(DropNoPort)
		return
	}
	if cp {
		c := w.spareBuf()
		if c == nil {
			w.drop(DropNoBuffer)
			return
		}
		copy(c[Headroom:Headroom+size], buf[Headroom:Headroom+size])
		buf = c
	}
	if out.SetEthDst {
		copy(buf[Headroom:Headroom+6], out.EthDst[:])
	}
	if g.IsGSO() && !dst.caps.Offload {
		w.drop(DropGSO)
		return
	}
	m := port.Meta{Size: size, GSO: g, Hash: hash}
	if dst.caps.Tunnel {
		if out.TunDst == ([4]byte{}) {
			w.drop(DropNoTunnelDst)
			return
		}
		m.Tunnel = port.Endpoint{Addr: out.TunDst, VNI: uint32(out.TunID) & 0xffffff}
	}
	p := w.pendingFor(dst, dst.queueFor(hash))
	p.bufs = append(p.bufs, buf[:Headroom+size])
	p.meta = append(p.meta, m)
	p.bytes += size
}

// spareBuf returns a spare buffer for this batch, nil when none is left.
func (w *worker) spareBuf() []byte {
	if w.nSpare == len(w.spare) {
		return nil
	}
	w.nSpare++
	return w.spare[w.nSpare-1]
}

// queueFor returns the index of the queue of e a frame of flow hash h is
// written to.
func (e *portEntry) queueFor(h uint32) int {
	if len(e.q) == 1 {
		return 0
	}
	return int(h % uint32(len(e.q)))
}

// FlowHash is the flow hash the switch gives every frame it writes
// (port.Meta.Hash): a hash of f's IPv4 addresses (ARP's too) and, for TCP,
// UDP and SCTP, of the protocol and ports; of the Ethernet addresses and
// type for frames other than IPv4 and ARP. It is the same for both
// directions of a flow: symmetric in source and destination, and blind to
// what differs between a request and its reply (ICMP types, ARP opcodes).
// It allocates nothing.
func FlowHash(f *flowtable.Fields) uint32 {
	a := binary.BigEndian.Uint32(f.NwSrc[:])
	b := binary.BigEndian.Uint32(f.NwDst[:])
	var pa, pb, proto uint32
	switch f.EthType {
	case 0x0800:
		switch f.NwProto {
		case 6, 17, 132: // TCP, UDP, SCTP
			pa, pb, proto = uint32(f.TpSrc), uint32(f.TpDst), uint32(f.NwProto)
		}
	case 0x0806:
	default:
		// IPv6 and the rest, whose L3 Extract does not parse: the
		// Ethernet addresses tell the conversations apart.
		a = binary.BigEndian.Uint32(f.EthSrc[2:])
		b = binary.BigEndian.Uint32(f.EthDst[2:])
		pa = uint32(binary.BigEndian.Uint16(f.EthSrc[:2]))
		pb = uint32(binary.BigEndian.Uint16(f.EthDst[:2]))
		proto = uint32(f.EthType)
	}
	if a > b || (a == b && pa > pb) {
		a, b, pa, pb = b, a, pb, pa
	}
	h := a*0x9e3779b1 ^ b*0x85ebca77 ^ (pa<<16|pb)*0xc2b2ae3d ^ proto
	// murmur3's finalizer mixes every input bit into the low bits the
	// modulo keeps.
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

func (w *worker) pendingFor(e *portEntry, qi int) *pending {
	for j := 0; j < w.nPend; j++ {
		if w.pend[j].e == e && w.pend[j].qi == qi {
			return &w.pend[j]
		}
	}
	if w.nPend == len(w.pend) {
		capacity := len(w.bufs) + len(w.spare)
		w.pend = append(w.pend, pending{
			bufs: make([][]byte, 0, capacity),
			meta: make([]port.Meta, 0, capacity),
		})
	}
	p := &w.pend[w.nPend]
	w.nPend++
	p.e, p.qi = e, qi
	return p
}

// flush writes every queued destination and resets the queues.
func (w *worker) flush() {
	w.sparseFirst()
	for j := 0; j < w.nPend; j++ {
		p := &w.pend[j]
		if c := p.e.capture.Load(); c != nil {
			c.tx(w, p)
		}
		if pl := p.e.limit.Load(); pl != nil && pl.sh != nil {
			if lost := pl.sh.admit(p, w.s.now()); lost > 0 {
				p.e.stats.txDrops.n.Add(uint64(lost))
				w.s.drops[DropShaperQueue].n.Add(uint64(lost))
			}
			if len(p.bufs) == 0 {
				w.resetPending(p)
				continue
			}
		}
		n, err := p.e.q[p.qi].Write(p.bufs, p.meta, Headroom)
		n = max(min(n, len(p.bufs)), 0)
		p.e.stats.txPackets.n.Add(uint64(n))
		if n == len(p.bufs) {
			p.e.stats.txBytes.n.Add(uint64(p.bytes))
		} else {
			for _, m := range p.meta[:n] {
				p.e.stats.txBytes.n.Add(uint64(m.Size))
			}
			lost := uint64(len(p.bufs) - n)
			p.e.stats.txDrops.n.Add(lost)
			w.s.drops[DropTxError].n.Add(lost)
			if err != nil {
				w.s.txErrorLog(p.e, err)
			}
		}
		w.resetPending(p)
	}
	w.nPend = 0
	w.nSpare = 0
}

// resetPending empties p for the next batch.
func (w *worker) resetPending(p *pending) {
	for k := range p.bufs {
		p.bufs[k] = nil
	}
	p.bufs = p.bufs[:0]
	p.meta = p.meta[:0]
	p.bytes = 0
	p.e, p.qi = nil, 0
}

// sparseFirst orders the batch's destinations by their bytes, fewest
// first: a write toward a pod runs that pod's receive path in the
// writer's context (tens of µs for a TCP super-frame), so a ping or a DNS
// answer in the same batch as a bulk stream's frames leaves before them
// instead of after. Frames to one destination keep their order; between
// destinations there is none to keep.
func (w *worker) sparseFirst() {
	p := w.pend[:w.nPend]
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && p[j].bytes < p[j-1].bytes; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}
