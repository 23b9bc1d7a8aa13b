package conntrack

import (
	"crypto/rand"
	"encoding/binary"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Time is a point on the tracker's monotonic clock, in nanoseconds (see
// Config.Clock and Tracker.Now).
type Time int64

// key is one direction of a connection: what a packet of that direction
// carries, plus the zone, packed in two words so that parse loads it with
// two reads and a lookup compares it with two:
//
//	a: source address << 32 | destination address
//	b: source port << 48 | destination port << 32 | zone << 16 | protocol << 8 | ICMP type
//
// For an ICMP query both ports hold the identifier and the ICMP type is
// the one the source end sends (echo request 8, its reply 0, …); it is 0
// for other protocols, and the ports are 0 for protocols without any.
type key struct{ a, b uint64 }

func mkKey(src, dst uint32, sport, dport, zone uint16, proto, icmpType uint8) key {
	return key{
		a: uint64(src)<<32 | uint64(dst),
		b: uint64(sport)<<48 | uint64(dport)<<32 | uint64(zone)<<16 | uint64(proto)<<8 | uint64(icmpType),
	}
}

func (k key) src() uint32      { return uint32(k.a >> 32) }
func (k key) dst() uint32      { return uint32(k.a) }
func (k key) sport() uint16    { return uint16(k.b >> 48) }
func (k key) dport() uint16    { return uint16(k.b >> 32) }
func (k key) zone() uint16     { return uint16(k.b >> 16) }
func (k key) proto() uint8     { return uint8(k.b >> 8) }
func (k key) icmpType() uint8  { return uint8(k.b) }
func (k *key) setSrc(v uint32) { k.a = k.a&0xffffffff | uint64(v)<<32 }
func (k *key) setDst(v uint32) { k.a = k.a&^0xffffffff | uint64(v) }
func (k *key) setSport(v uint16) {
	k.b = k.b&^(0xffff<<48) | uint64(v)<<48
}
func (k *key) setDport(v uint16) {
	k.b = k.b&^(0xffff<<32) | uint64(v)<<32
}
func (k *key) setZone(v uint16) { k.b = k.b&^(0xffff<<16) | uint64(v)<<16 }

// words returns k as an entry stores it.
func (k key) words() (a, b uint64) { return k.a, k.b }

func keyOf(a, b uint64) key { return key{a, b} }

// reverse returns the key of the opposite direction without translation.
func (k key) reverse() key {
	r := key{a: k.a<<32 | k.a>>32, b: uint64(k.dport())<<48 | uint64(k.sport())<<32 | k.b&0xffffffff}
	if k.proto() == ProtoICMP {
		r.b = r.b&^0xff | uint64(icmpReverse(uint8(k.b)))
	}
	return r
}

// tuple returns k as a Tuple (the ct_* fields of ovs-fields(7)).
func (k key) tuple() Tuple {
	t := Tuple{Src: addr4(k.src()), Dst: addr4(k.dst()), Proto: k.proto(), SrcPort: k.sport(), DstPort: k.dport()}
	if k.proto() == ProtoICMP {
		t.SrcPort, t.DstPort, t.ID = uint16(k.icmpType()), 0, k.sport()
	}
	return t
}

// ICMP query types and their replies (RFC 792).
const (
	icmpEchoReply      = 0
	icmpUnreach        = 3
	icmpSourceQuench   = 4
	icmpRedirect       = 5
	icmpEcho           = 8
	icmpTimeExceeded   = 11
	icmpParamProblem   = 12
	icmpTimestamp      = 13
	icmpTimestampReply = 14
	icmpInfo           = 15
	icmpInfoReply      = 16
)

// icmpReverse maps a query type to its reply and back; other types map to
// themselves (they never make a key).
func icmpReverse(t uint8) uint8 {
	switch t {
	case icmpEcho:
		return icmpEchoReply
	case icmpEchoReply:
		return icmpEcho
	case icmpTimestamp, icmpInfo:
		return t + 1
	case icmpTimestampReply, icmpInfoReply:
		return t - 1
	}
	return t
}

func icmpQuery(t uint8) bool {
	switch t {
	case icmpEcho, icmpEchoReply, icmpTimestamp, icmpTimestampReply, icmpInfo, icmpInfoReply:
		return true
	}
	return false
}

// mix is a 64-bit finaliser (MurmurHash3's fmix64).
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// hash returns a seeded hash of k that does not change when k is
// reversed, so that an entry whose reply key is its forward key reversed
// sits in one bucket for both directions (as OVS's conn_key_hash). The
// two endpoints (address and port, 48 bits each) are put in order, the
// lower one is mixed with a secret seed by an odd multiplier and the
// higher one added in; a final mix spreads it. Colliding keys cannot be
// made up without the seed. The zone is left out, so that Prefetch can
// find a packet's bucket before the pipeline has chosen the zone (a
// tuple tracked in several zones shares one chain).
func (t *Tracker) hash(k key) uint64 {
	e1 := k.a>>32<<16 | k.b>>48
	e2 := k.a&0xffffffff<<16 | k.b>>32&0xffff
	lo, hi := min(e1, e2), max(e1, e2)
	hi |= k.b >> 8 & 0xff << 48 // protocol
	if k.proto() == ProtoICMP {
		hi |= uint64(min(k.icmpType(), icmpReverse(k.icmpType()))) << 56 // echo and its reply alike
	}
	return mix((lo^t.seed[0])*0x9e3779b97f4a7c15 ^ hi ^ t.seed[1])
}

// Prefetch starts loading what Process will need for the packets pkts
// (IPv4 packets, as for Process) into the CPU cache and returns without
// waiting for it. A caller with a batch of packets calls it once for the
// batch before running their ct actions one by one, so that the memory
// latency of a large table's lookups overlaps instead of adding up. It
// goes in two passes over each group of 32 packets, first their buckets,
// then the chains they lead to, so that more misses are in flight at
// once. Each pass is a loop of loads and little else, so that the CPU
// can issue many of them before the first one returns. It reads the
// packets and changes nothing; a packet may be anything (nothing is
// fetched for what is not an unfragmented or first-fragment IPv4
// packet). It does not allocate.
func (t *Tracker) Prefetch(pkts ...[]byte) {
	const group = 32
	var bis [group]uint64   // bucket indexes of the packets with a key
	var keys [group]uint64  // their key words a (addresses)
	var heads [group]uint32 // their chain heads
	for len(pkts) > 0 {
		n := min(len(pkts), group)
		m := 0
		for _, b := range pkts[:n] {
			if k, ok := prefetchKey(b); ok {
				bis[m], keys[m] = t.hash(k)&t.bmask, k.a
				m++
			}
		}
		// The buckets and their stripes' sequences.
		for j := range m {
			heads[j] = t.buckets[bis[j]].Load()
			t.stripes[bis[j]&t.smask].seq.Load()
		}
		// The first line of each chain's first node (its second line
		// comes with the walk below; asking for it here as well was slower).
		for j := range m {
			if r := heads[j]; r >= 2 {
				t.entries[r>>1-1].gen.Load()
			}
		}
		// The rest of a chain whose first node is not the packet's
		// (rare: chains hold half an entry on average), walked as lookup
		// does (the zone is unknown: any zone's entry with these addresses
		// will do).
		for j := range m {
			r := heads[j]
			for range 4 {
				if r < 2 {
					break
				}
				e := &t.entries[r>>1-1]
				e.line2.Load()
				if e.k[0][0].Load() == keys[j] || e.k[1][0].Load() == keys[j] {
					break
				}
				r = e.next[r&1].Load()
			}
		}
		pkts = pkts[n:]
	}
}

// prefetchKey is parse's key for Prefetch: no checks beyond bounds, no
// zone.
func prefetchKey(b []byte) (key, bool) {
	if len(b) < 20 || b[0]>>4 != 4 || get16(b, 6)&0x1fff != 0 {
		return key{}, false
	}
	ihl := int(b[0]&15) * 4
	if ihl < 20 || len(b) < ihl+8 {
		return key{}, false
	}
	k := key{a: get64(b, 12), b: uint64(b[9]) << 8}
	switch b[9] {
	case ProtoTCP, ProtoUDP, ProtoSCTP:
		k.b |= uint64(get32(b, ihl)) << 32
	case ProtoICMP:
		id := uint64(get16(b, ihl+4))
		k.b |= id<<48 | id<<32 | uint64(b[ihl])
	}
	return k, true
}

// tcpPeer is one end of a TCP connection as OVS's conntrack-tcp (after
// pf) tracks it.
type tcpPeer struct {
	seqlo  uint32 // highest sequence number sent
	seqhi  uint32 // highest the other end acknowledged plus its window
	maxWin uint16 // largest window seen, unscaled
	wscale uint8  // window scale option: wsKnown|shift, or wsUnknown
	state  uint8  // TCPState
}

// Entry flags.
const (
	flagRevNode   uint8 = 1 << iota // the reply key is linked in its own chain (translated)
	flagAssured                     // seen in both directions (informational)
	flagKnownMask = flagRevNode | flagAssured
)

// NAT recorded for a connection.
const (
	natNone uint8 = iota
	natSrc
	natDst
)

// Protocol state of UDP, ICMP and other connections.
const (
	pFirst    uint8 = iota // one packet, one direction
	pMultiple              // more packets, one direction (UDP/other)
	pBidir                 // both directions
)

// entry is one connection. It is 128 bytes, two cache lines: the first
// holds what a lookup reads without locks (keys, chain links, generation)
// and the lock and expiry every packet touches.
//
// The keys and links are atomics: lookups read them without a lock while
// writers, holding the stripe locks of the buckets involved, link and
// unlink entries. A key changes only while its entry is linked nowhere.
// gen is odd while the entry is in use: link makes it odd (under the
// stripe locks, as it publishes the entry) and remove makes it even again
// (under the stripe locks and mu), so a reference (index, gen) taken
// without locks is checked under mu before use.
type entry struct {
	k    [2][2]atomic.Uint64 // [dir]: the forward and reply keys, as words()
	next [2]atomic.Uint32    // chain links of the forward and reply nodes; next[0] links the free list
	gen  atomic.Uint32
	_    uint32
	mu   sync.Mutex

	// Guarded by mu.
	expires Time
	mark    uint32
	label   Label
	tcp     [2]tcpPeer // [dir]
	class   Class
	pstate  uint8
	nat     uint8
	flags   uint8
	line2   atomic.Uint32 // never written: walk loads it to fetch this line along with the first
	_       [4]byte
}

// A reference to a chain node is (slab index + 1) << 1 | direction; 0 and
// 1 end a chain.
func ref(idx uint32, dir int) uint32 { return (idx+1)<<1 | uint32(dir) }

// stripe guards the buckets whose index has the same low bits: writers
// take mu and make seq odd while they change a chain; readers check that
// seq was even and unchanged around their walk (a sequence lock).
type stripe struct {
	mu  sync.Mutex
	seq atomic.Uint32
	_   [64 - 12]byte
}

// Tracker is a connection tracker: a fixed-size table of connections,
// safe for concurrent use by any number of goroutines. Process is the
// per-packet entry point; Sweep expires entries; the rest is management.
type Tracker struct {
	log         *slog.Logger
	clock       func() Time
	timeouts    [NumClasses]int64
	fragTimeout int64
	seed        [2]uint64
	tcpWindow   bool
	max         int64

	entries []entry
	buckets []atomicU32 // chain heads
	mapped  int         // bytes mapped outside the Go heap for them (slab_linux.go)
	bmask   uint64
	stripes []stripe
	smask   uint64

	bump  atomic.Uint32 // slab slots handed out at least once
	free  atomic.Uint64 // free-list head: tag << 32 | ref
	count atomic.Int64  // entries in use or reserved

	zoneCount []atomic.Int32 // [65536]
	zoneLimit []atomic.Int32 // [65536]; 0: none

	evictCursor atomic.Uint32
	lastWarn    atomic.Int64 // when a rate-limited warning was last logged
	sweepMu     sync.Mutex
	sweepPos    uint32

	frags fragTable
	stats counters

	acct    []acct     // Config.Accounting: one record per entry, or nil (acct.go)
	onEnd   func(Flow) // Config.OnEnd
	flowsMu sync.Mutex // Flows calls take turns
}

// New returns a tracker configured by cfg, with storage for
// cfg.MaxEntries entries allocated up front.
func New(cfg Config) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := cfg.MaxEntries
	if n == 0 {
		n = DefaultMaxEntries
	}
	nb := 1
	for nb < 2*n { // chains of 0.5 entries on average, 1 with every reply translated
		nb <<= 1
	}
	ns := nb
	if ns > 4096 {
		ns = 4096
	}
	t := &Tracker{
		log:         cfg.Logger,
		clock:       cfg.Clock,
		timeouts:    cfg.Timeouts.byClass(),
		fragTimeout: cfg.Timeouts.fragment(),
		tcpWindow:   !cfg.NoTCPWindowCheck,
		max:         int64(n),
		bmask:       uint64(nb - 1),
		stripes:     make([]stripe, ns),
		smask:       uint64(ns - 1),
		zoneCount:   make([]atomic.Int32, 1<<16),
		zoneLimit:   make([]atomic.Int32, 1<<16),
	}
	t.entries, t.buckets = t.allocSlab(n, nb)
	if cfg.Accounting {
		t.acct = make([]acct, n)
		t.onEnd = cfg.OnEnd
	}
	if t.log == nil {
		t.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if t.clock == nil {
		start := time.Now()
		t.clock = func() Time { return Time(time.Since(start)) }
	}
	var seed [16]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	t.seed[0] = binary.LittleEndian.Uint64(seed[:8])
	t.seed[1] = binary.LittleEndian.Uint64(seed[8:])
	if cfg.DefaultZoneLimit > 0 {
		for z := range t.zoneLimit {
			t.zoneLimit[z].Store(clampLimit(cfg.DefaultZoneLimit))
		}
	}
	for z, l := range cfg.ZoneLimits {
		t.zoneLimit[z].Store(clampLimit(l))
	}
	nf := cfg.MaxFragments
	if nf == 0 {
		nf = DefaultMaxFragments
	}
	t.frags.init(nf)
	return t, nil
}

func clampLimit(l int) int32 {
	if l > MaxEntriesLimit {
		return MaxEntriesLimit
	}
	return int32(l)
}

// Now reads the tracker's clock (Config.Clock).
func (t *Tracker) Now() Time { return t.clock() }

// SetZoneLimit caps zone's entries at limit (0: no cap). Entries already
// over the new cap stay until they expire; new ones are refused.
func (t *Tracker) SetZoneLimit(zone uint16, limit int) {
	if limit < 0 {
		limit = 0
	}
	t.zoneLimit[zone].Store(clampLimit(limit))
}

// ZoneLimit returns zone's cap (0: none) and how many entries it holds.
func (t *Tracker) ZoneLimit(zone uint16) (limit, count int) {
	return int(t.zoneLimit[zone].Load()), int(t.zoneCount[zone].Load())
}

// Len returns the number of entries in use.
func (t *Tracker) Len() int { return int(t.count.Load()) }

// Cap returns the global entry limit.
func (t *Tracker) Cap() int { return int(t.max) }

// atomicU32 is a chain head.
type atomicU32 = atomic.Uint32

// entrySize is the size of one slab entry, for the docs and tests.
const entrySize = unsafe.Sizeof(entry{})

// maxWalk bounds a lock-free chain walk; a longer chain (or a walk
// misled by a concurrent change) is walked again under the stripe lock.
const maxWalk = 64

// lookup finds the entry that has k as its forward (dir 0) or reply
// (dir 1) key. It returns the slab index and the generation the entry had
// when seen; the caller locks the entry and checks the generation before
// trusting it. No lock is taken unless writers keep changing the chain.
func (t *Tracker) lookup(k key, h uint64) (idx uint32, dir int, gen uint32, ok bool) {
	a, b := k.words()
	bi := h & t.bmask
	st := &t.stripes[bi&t.smask]
	for range 4 {
		s1 := st.seq.Load()
		if s1&1 != 0 {
			continue
		}
		idx, dir, gen, ok, complete := t.walk(bi, a, b, maxWalk)
		if complete && st.seq.Load() == s1 {
			return idx, dir, gen, ok
		}
	}
	st.mu.Lock()
	idx, dir, gen, ok, _ = t.walk(bi, a, b, -1)
	st.mu.Unlock()
	return idx, dir, gen, ok
}

// walk searches bucket bi's chain for key words (a, b), visiting at most
// limit nodes (negative: no limit). complete is false when it stopped at
// the limit.
func (t *Tracker) walk(bi, a, b uint64, limit int) (idx uint32, dir int, gen uint32, ok, complete bool) {
	r := t.buckets[bi].Load()
	for n := 0; r >= 2; n++ {
		if n == limit {
			return 0, 0, 0, false, false
		}
		i := r>>1 - 1
		e := &t.entries[i]
		e.line2.Load() // both lines' misses overlap: the update needs the second
		if e.k[0][0].Load() == a && e.k[0][1].Load() == b {
			return i, 0, e.gen.Load(), true, true
		}
		if e.k[1][0].Load() == a && e.k[1][1].Load() == b {
			return i, 1, e.gen.Load(), true, true
		}
		r = e.next[r&1].Load()
	}
	return 0, 0, 0, false, true
}

// lockStripes locks the stripes of buckets b1 and b2 in a fixed order and
// makes their sequences odd; unlockStripes undoes it.
func (t *Tracker) lockStripes(b1, b2 uint64) {
	s1, s2 := b1&t.smask, b2&t.smask
	if s1 > s2 {
		s1, s2 = s2, s1
	}
	t.stripes[s1].mu.Lock()
	if s2 != s1 {
		t.stripes[s2].mu.Lock()
	}
}

func (t *Tracker) unlockStripes(b1, b2 uint64) {
	s1, s2 := b1&t.smask, b2&t.smask
	t.stripes[s1].mu.Unlock()
	if s2 != s1 {
		t.stripes[s2].mu.Unlock()
	}
}

// beginWrite/endWrite bracket a change to the chains of b1 and b2 (whose
// stripes the caller holds) for lock-free readers.
func (t *Tracker) beginWrite(b1, b2 uint64) {
	s1, s2 := b1&t.smask, b2&t.smask
	t.stripes[s1].seq.Add(1)
	if s2 != s1 {
		t.stripes[s2].seq.Add(1)
	}
}

func (t *Tracker) endWrite(b1, b2 uint64) { t.beginWrite(b1, b2) }

// Results of link.
type linkResult uint8

const (
	linked     linkResult = iota
	fwdTaken              // another entry has the forward key
	revTaken              // another entry has the reply key
	staleTaken            // the key is held by an expired entry: remove it and retry
)

// link publishes entry idx, whose keys and fields are set already and
// whose generation is even (unused), unless another entry holds its
// forward or reply key; it makes the generation odd as it links. For
// linked it returns that generation (in i); for staleTaken the expired
// holder's index and generation. stale reports the expired holder
// (index, generation) for staleTaken.
func (t *Tracker) link(idx uint32, fwd, rev key, revNode bool, now Time) (res linkResult, i, g uint32) {
	hf, hr := t.hash(fwd), t.hash(rev)
	b1, b2 := hf&t.bmask, hr&t.bmask
	t.lockStripes(b1, b2)
	defer t.unlockStripes(b1, b2)
	fa, fb := fwd.words()
	if i, _, g, ok, _ := t.walk(b1, fa, fb, -1); ok {
		if t.expiredAt(i, g, now) {
			return staleTaken, i, g
		}
		return fwdTaken, 0, 0
	}
	ra, rb := rev.words()
	if i, _, g, ok, _ := t.walk(b2, ra, rb, -1); ok {
		if t.expiredAt(i, g, now) {
			return staleTaken, i, g
		}
		return revTaken, 0, 0
	}
	e := &t.entries[idx]
	t.beginWrite(b1, b2)
	g = e.gen.Add(1) // odd: in use; readers that saw it even fail their sequence check
	e.next[0].Store(t.buckets[b1].Load())
	t.buckets[b1].Store(ref(idx, 0))
	if revNode {
		e.next[1].Store(t.buckets[b2].Load())
		t.buckets[b2].Store(ref(idx, 1))
	}
	t.endWrite(b1, b2)
	return linked, g, 0
}

// expiredAt reports whether entry i, generation g, has expired at now.
// The caller may hold stripe locks (they come before entry locks).
func (t *Tracker) expiredAt(i, g uint32, now Time) bool {
	e := &t.entries[i]
	e.mu.Lock()
	x := e.gen.Load() == g && e.expires <= now
	e.mu.Unlock()
	return x
}

// unlinkNode removes node r from bucket bi's chain; the caller holds the
// stripe and has begun the write.
func (t *Tracker) unlinkNode(bi uint64, r uint32) {
	p := &t.buckets[bi]
	for c := p.Load(); c >= 2; c = p.Load() {
		if c == r {
			p.Store(t.entries[c>>1-1].next[c&1].Load())
			return
		}
		p = &t.entries[c>>1-1].next[c&1]
	}
	panic("conntrack: chain does not hold a linked entry")
}

// Conditions for remove.
type removeMode uint8

const (
	removeAlways    removeMode = iota // flush, force, a TCP connection reopened
	removeExpired                     // only if it has expired (sweep, lazy expiry)
	removeEvictable                   // only if expired or of an evictable class (early drop)
	removeFlush                       // always: Flush, FlushZone, FlushTuple (reported as a forced end)
)

// remove unlinks and frees entry idx if it still has generation gen and
// mode allows. It takes the entry's stripes, then the entry: the caller
// must hold neither.
func (t *Tracker) remove(idx, gen uint32, mode removeMode, now Time) bool {
	e := &t.entries[idx]
	a0, b0 := e.k[0][0].Load(), e.k[0][1].Load()
	a1, b1 := e.k[1][0].Load(), e.k[1][1].Load()
	if e.gen.Load() != gen {
		return false
	}
	fwd, rev := keyOf(a0, b0), keyOf(a1, b1)
	bf, br := t.hash(fwd)&t.bmask, t.hash(rev)&t.bmask
	t.lockStripes(bf, br)
	e.mu.Lock()
	ok := e.gen.Load() == gen
	if ok {
		switch mode {
		case removeExpired:
			ok = e.expires <= now
		case removeEvictable:
			ok = e.expires <= now || e.class.evictable()
		}
	}
	if !ok {
		e.mu.Unlock()
		t.unlockStripes(bf, br)
		return false
	}
	class, revNode := e.class, e.flags&flagRevNode != 0
	var f Flow
	report := t.onEnd != nil && t.flowOf(idx, now, endReason(mode, e.expires <= now), &f)
	t.beginWrite(bf, br)
	t.unlinkNode(bf, ref(idx, 0))
	if revNode {
		t.unlinkNode(br, ref(idx, 1))
	}
	t.endWrite(bf, br)
	e.gen.Add(1)
	e.mu.Unlock()
	t.unlockStripes(bf, br)
	t.stats.byClass[class].Add(-1)
	t.release(idx, fwd.zone())
	if report {
		t.onEnd(f)
	}
	return true
}

// release returns slot idx to the free list, then gives back its place
// in the global and zone counts (in that order, so that a count reserved
// always finds a slot).
func (t *Tracker) release(idx uint32, zone uint16) {
	r := uint64(ref(idx, 0))
	for {
		h := t.free.Load()
		t.entries[idx].next[0].Store(uint32(h))
		if t.free.CompareAndSwap(h, (h>>32+1)<<32|r) {
			break
		}
	}
	t.zoneCount[zone].Add(-1)
	t.count.Add(-1)
}

// alloc hands out a free slot; the caller has reserved a place in the
// count, which guarantees one (release puts a slot on the list before it
// gives its place back), so the loop ends.
func (t *Tracker) alloc() (uint32, bool) {
	for range 1 << 20 {
		h := t.free.Load()
		if r := uint32(h); r >= 2 {
			next := t.entries[r>>1-1].next[0].Load()
			if t.free.CompareAndSwap(h, (h>>32+1)<<32|uint64(next)) {
				return r>>1 - 1, true
			}
			continue
		}
		n := t.bump.Load()
		if int(n) >= len(t.entries) {
			continue
		}
		if t.bump.CompareAndSwap(n, n+1) {
			return n, true
		}
	}
	return 0, false
}

// reserve takes a place for a new entry of zone in the zone and global
// counts, evicting an expired or evictable entry when a limit is reached
// and evict is set. It returns the refusal reason or ReasonNone.
func (t *Tracker) reserve(zone uint16, now Time, evict bool) Reason {
	if lim := t.zoneLimit[zone].Load(); lim > 0 {
		if t.zoneCount[zone].Add(1) > lim {
			t.zoneCount[zone].Add(-1)
			if !evict || !t.evict(now, int32(zone)) {
				return ReasonZoneFull
			}
			if t.zoneCount[zone].Add(1) > lim {
				t.zoneCount[zone].Add(-1)
				return ReasonZoneFull
			}
		}
	} else {
		t.zoneCount[zone].Add(1)
	}
	if t.count.Add(1) > t.max {
		t.count.Add(-1)
		ok := evict && t.evict(now, -1)
		if ok && t.count.Add(1) > t.max {
			t.count.Add(-1) // another goroutine took the place evict made
			ok = false
		}
		if !ok {
			t.zoneCount[zone].Add(-1)
			return ReasonTableFull
		}
	}
	return ReasonNone
}

// unreserve gives back a place reserve took when no entry was made.
func (t *Tracker) unreserve(zone uint16) {
	t.zoneCount[zone].Add(-1)
	t.count.Add(-1)
}

// evictScan is how many slots one early-drop attempt examines.
const evictScan = 32

// evict frees one entry to make room: an expired one, else the evictable
// one (not seen both ways, or a closing TCP connection) that expires
// first among evictScan slots from a rotating cursor. zone >= 0 limits it
// to that zone. It reports whether it freed one.
func (t *Tracker) evict(now Time, zone int32) bool {
	n := t.bump.Load()
	if n == 0 {
		return false
	}
	start := t.evictCursor.Add(evictScan) - evictScan
	best, bestGen, bestExp := uint32(0), uint32(0), Time(0)
	found := false
	for i := range uint32(evictScan) {
		idx := (start + i) % n
		e := &t.entries[idx]
		g := e.gen.Load()
		if g&1 == 0 {
			continue
		}
		if zone >= 0 && uint16(e.k[0][1].Load()>>16) != uint16(zone) {
			continue
		}
		e.mu.Lock()
		if e.gen.Load() != g {
			e.mu.Unlock()
			continue
		}
		exp, c := e.expires, e.class
		e.mu.Unlock()
		if exp <= now {
			if t.remove(idx, g, removeExpired, now) {
				t.stats.expired.Add(1)
				return true
			}
			continue
		}
		if c.evictable() && (!found || exp < bestExp) {
			best, bestGen, bestExp, found = idx, g, exp, true
		}
	}
	if found && t.remove(best, bestGen, removeEvictable, now) {
		t.stats.evicted.Add(1)
		return true
	}
	return false
}
