package flowtable

import (
	"math/bits"
	"unsafe"
)

// prefetchSpan is the part of a cache entry Prefetch loads: up to the
// end of its rules.
const prefetchSpan = unsafe.Offsetof(cacheEntry{}.ct)

// Sizes of a cached verdict; a verdict with more outputs or hits is not
// cached (the pipeline runs for it every time).
const (
	cacheOuts = 4
	cacheHits = 12
	cacheCT   = 2
)

// DefaultCacheSize is the number of entries NewCache uses for size <= 0.
const DefaultCacheSize = 4096

// MinCacheSize is the number of entries a Cache starts with (or its size,
// if smaller). A cache grows fourfold, up to its size, each time it has
// missed as often as it has entries, and Shrink takes it back: an entry is
// 520 bytes, so a quiet worker's cache stays at 32 KiB instead of the
// 2 MiB of a busy one (with 250 pods, half a gigabyte of Go heap that the
// garbage collector would scan at every cycle).
const MinCacheSize = 64

// Cache is a direct-mapped exact-match cache in front of a Snapshot's
// pipeline, keyed by the table the run starts in (0, or a
// recirculation's table) and the bits of the Fields given to Run that the
// snapshot can look at: f & s.KeyMask(), a snapshot-wide megaflow mask
// (keymask.go). KeyMask is the union of every subtable's match mask and
// of every field an action reads or copies into a verdict, and it always
// holds the pipeline metadata (in_port, registers, tunnel fields, ct_state,
// ct_zone, ct_mark, ct_label), the Ethernet fields and the protocols; only
// header fields no rule reads (typically tp_src and the conntrack tuple's
// ct_tp_src) are left out, so that a new connection's packets meet the
// entries an earlier connection filled. A hit therefore means that the
// pipeline's verdict cannot depend on the fields in which the packet
// differs from the one that filled the entry. When the mask is all ones
// the key is the complete Fields, as it was before the mask, and the
// cache does not mask at all.
//
// The ct_* fields are in the key as far as rules match them, so a
// packet of one flow meets one entry while it is +new and another once it
// is +est; and a run's ct actions are part of what it caches (Verdict.CT),
// never carried out by it, so a hit skips no ct action: the caller still
// hands every packet to the tracker for each of them. Entries are valid
// only for the snapshot that filled them: a new snapshot empties the cache
// logically (by bumping an epoch, in O(1)).
//
// A Cache belongs to one worker: it is not safe for concurrent use.
type Cache struct {
	entries []cacheEntry
	mask    uint64
	max     int    // the size it may grow to
	missed  uint64 // misses since it last changed size
	snap    *Snapshot
	epoch   uint32
	hits    uint64
	misses  uint64
	sink    uint64 // Prefetch's loads end here, so that they are not left out
}

type cacheEntry struct {
	key   words
	epoch uint32 // 0: empty
	start uint8  // the table the run started in
	nOut  uint8
	nHits uint8
	nCT   uint8
	drop  DropReason
	table uint8 // where a drop happened
	outs  [cacheOuts]Output
	rules [cacheHits]*Rule
	ct    [cacheCT]CTStep
}

// NewCache returns a cache of size entries, rounded up to a power of two
// (DefaultCacheSize when size <= 0).
func NewCache(size int) *Cache {
	if size <= 0 {
		size = DefaultCacheSize
	}
	n := 1
	for n < size {
		n <<= 1
	}
	c := &Cache{max: n, epoch: 1}
	c.resize(min(n, MinCacheSize))
	return c
}

// resize makes the cache n entries (a power of two), empty.
func (c *Cache) resize(n int) {
	c.entries, c.mask, c.missed = make([]cacheEntry, n), uint64(n-1), 0
}

// Len returns the number of entries the cache has now.
func (c *Cache) Len() int { return len(c.entries) }

// Shrink takes the cache back to its starting size (MinCacheSize), empty,
// if it has grown: for a worker that has gone idle, to give the memory
// back.
func (c *Cache) Shrink() {
	if n := min(c.max, MinCacheSize); len(c.entries) > n {
		c.resize(n)
	}
}

// Stats returns the cache's hit and miss counts.
func (c *Cache) Stats() (hits, misses uint64) { return c.hits, c.misses }

// Run is Snapshot.Run behind the cache: on a hit it copies the cached
// verdict into v and leaves f untouched; on a miss it runs s's pipeline
// (modifying f) and caches the verdict. It reports whether it hit. It
// allocates only when the cache grows (MinCacheSize): a few times after a
// start or a Shrink, on misses.
func (c *Cache) Run(s *Snapshot, f *Fields, v *Verdict) (hit bool) { return c.RunFrom(s, 0, f, v) }

// RunFrom is Snapshot.RunFrom behind the cache, as Run.
func (c *Cache) RunFrom(s *Snapshot, start uint8, f *Fields, v *Verdict) (hit bool) {
	return c.RunHashed(s, start, f, v, c.Hash(s, start, f))
}

// Hash returns the hash of the cache key of f from table start under
// snapshot s (f masked with s.KeyMask()), which Prefetch and RunHashed
// take. It is the same for every Cache.
func (c *Cache) Hash(s *Snapshot, start uint8, f *Fields) uint64 {
	return keyHash(asWords(f), &s.wild, start)
}

// Prefetch starts loading into the CPU's cache the entries that lookups of
// the hashes hs (from Hash) will read first, and returns without waiting
// for them. A worker with a batch of frames hashes them all and calls it
// once before running them one by one, so that the memory latency of a
// large cache's entries overlaps instead of adding up. It is a loop of
// independent loads and little else, so that the CPU can issue many of
// them before the first returns. It changes nothing that a lookup sees
// and does not allocate.
func (c *Cache) Prefetch(hs []uint64) {
	var x uint64
	for _, h := range hs {
		e := &c.entries[h&c.mask]
		// Every line a hit reads: from the key to the end of the rules,
		// six or seven lines (an entry is not line-aligned); ct, at the
		// end, only a tracked flow's verdict has.
		p := unsafe.Pointer(e)
		for off := uintptr(0); off < prefetchSpan; off += 64 {
			x += *(*uint64)(unsafe.Add(p, off))
		}
		x += *(*uint64)(unsafe.Add(p, prefetchSpan-8))
	}
	c.sink = x
}

// RunHashed is RunFrom for a key whose hash h = c.Hash(s, start, f) the
// caller has computed already (for Prefetch). A wrong h (one computed
// under another snapshot's mask, or for other fields) makes the lookup
// miss where it could have hit, and fills the wrong entry, but never
// returns another key's verdict: only the runs of the snapshot that
// filled an entry (epoch) compare against it, with that snapshot's mask.
func (c *Cache) RunHashed(s *Snapshot, start uint8, f *Fields, v *Verdict, h uint64) (hit bool) {
	if s != c.snap {
		c.snap = s
		c.epoch++
		if c.epoch == 0 {
			clear(c.entries)
			c.epoch = 1
		}
	}
	fw := asWords(f)
	e := &c.entries[h&c.mask]
	// An entry keeps the whole Fields of the packet that filled it: a
	// packet of that flow hits with a block compare; another one whose
	// fields differ only outside the key mask hits with the masked one.
	if e.epoch == c.epoch && e.start == start && (e.key == *fw || s.masked && s.sameKey(&e.key, fw)) {
		c.hits++
		v.NOut = int(e.nOut)
		v.NHits = int(e.nHits)
		v.NCT = int(e.nCT)
		v.Drop = e.drop
		v.Table = e.table
		copy(v.Outputs[:e.nOut], e.outs[:e.nOut])
		copy(v.Hits[:e.nHits], e.rules[:e.nHits])
		copy(v.CT[:e.nCT], e.ct[:e.nCT])
		return true
	}
	c.misses++
	if c.missed++; c.missed >= uint64(len(c.entries)) && len(c.entries) < c.max {
		c.resize(min(4*len(c.entries), c.max))
		e = &c.entries[h&c.mask]
	}
	e.key = *fw
	s.RunFrom(start, f, v)
	if v.NOut > cacheOuts || v.NHits > cacheHits || v.NCT > cacheCT {
		e.epoch = 0
		return false
	}
	e.epoch = c.epoch
	e.start = start
	e.nOut, e.nHits, e.nCT, e.drop, e.table = uint8(v.NOut), uint8(v.NHits), uint8(v.NCT), v.Drop, v.Table
	copy(e.outs[:], v.Outputs[:v.NOut])
	copy(e.rules[:], v.Hits[:v.NHits])
	copy(e.ct[:], v.CT[:v.NCT])
	return false
}

// keyHash hashes a cache key: the words of Fields fw with the wildcard
// bits wild cleared (none, for a snapshot that wildcards nothing), and
// the start table, without making the masked key. It runs four
// independent lanes, so that the multiplications of neighbouring words
// overlap instead of waiting for each other. Only words wildLo to wildHi
// can have wildcard bits (keymask.go). Its tests check it against a
// plain loop over the masked key (cacheHash, in the tests).
func keyHash(fw, wild *words, start uint8) uint64 {
	// The words are written out: Fields must be 17 words, and
	// [wildLo, wildHi] = [8, 14] (both checked when compiling, below).
	h0, h1, h2, h3 := uint64(hashSeed)^uint64(start), uint64(hashMul1), uint64(hashMul2), uint64(hashSeed)>>1
	h0, h1, h2, h3 = hashWord(h0, fw[0]), hashWord(h1, fw[1]), hashWord(h2, fw[2]), hashWord(h3, fw[3])
	h0, h1, h2, h3 = hashWord(h0, fw[4]), hashWord(h1, fw[5]), hashWord(h2, fw[6]), hashWord(h3, fw[7])
	h0, h1, h2, h3 = hashWord(h0, fw[8]&^wild[8]), hashWord(h1, fw[9]&^wild[9]), hashWord(h2, fw[10]&^wild[10]), hashWord(h3, fw[11]&^wild[11])
	h0, h1, h2, h3 = hashWord(h0, fw[12]&^wild[12]), hashWord(h1, fw[13]&^wild[13]), hashWord(h2, fw[14]&^wild[14]), hashWord(h3, fw[15])
	h0 = hashWord(h0, fw[16])
	return hashFinish(h0 ^ bits.RotateLeft64(h1, 17) ^ bits.RotateLeft64(h2, 31) ^ bits.RotateLeft64(h3, 47))
}

// Compile-time checks of keyHash's layout: a negative array
// length does not compile.
var (
	_ [nWords - 17]struct{}
	_ [17 - nWords]struct{}
	_ [wildLo - 8]struct{}
	_ [8 - wildLo]struct{}
	_ [wildHi - 14]struct{}
	_ [14 - wildHi]struct{}
)
