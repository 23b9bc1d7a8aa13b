package flowtable

// Sizes of a cached verdict; a verdict with more outputs or hits is not
// cached (the pipeline runs for it every time).
const (
	cacheOuts = 4
	cacheHits = 12
)

// DefaultCacheSize is the number of entries NewCache uses for size <= 0.
const DefaultCacheSize = 4096

// Cache is a direct-mapped exact-match cache in front of a Snapshot's
// pipeline, keyed by the complete Fields given to Run. Entries are valid
// only for the snapshot that filled them: a new snapshot empties the cache
// logically (by bumping an epoch, in O(1)).
//
// A Cache belongs to one worker: it is not safe for concurrent use.
type Cache struct {
	entries []cacheEntry
	mask    uint64
	snap    *Snapshot
	epoch   uint32
	hits    uint64
	misses  uint64
}

type cacheEntry struct {
	key   words
	epoch uint32 // 0: empty
	nOut  uint8
	nHits uint8
	drop  DropReason
	table uint8
	outs  [cacheOuts]Output
	rules [cacheHits]*Rule
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
	return &Cache{entries: make([]cacheEntry, n), mask: uint64(n - 1), epoch: 1}
}

// Stats returns the cache's hit and miss counts.
func (c *Cache) Stats() (hits, misses uint64) { return c.hits, c.misses }

// Run is Snapshot.Run behind the cache: on a hit it copies the cached
// verdict into v and leaves f untouched; on a miss it runs s's pipeline
// (modifying f) and caches the verdict. It reports whether it hit. It does
// not allocate.
func (c *Cache) Run(s *Snapshot, f *Fields, v *Verdict) (hit bool) {
	if s != c.snap {
		c.snap = s
		c.epoch++
		if c.epoch == 0 {
			clear(c.entries)
			c.epoch = 1
		}
	}
	fw := asWords(f)
	h := uint64(hashSeed)
	for _, w := range fw {
		h = hashWord(h, w)
	}
	e := &c.entries[hashFinish(h)&c.mask]
	if e.epoch == c.epoch && e.key == *fw {
		c.hits++
		v.NOut = int(e.nOut)
		v.NHits = int(e.nHits)
		v.Drop = e.drop
		v.Table = e.table
		copy(v.Outputs[:e.nOut], e.outs[:e.nOut])
		copy(v.Hits[:e.nHits], e.rules[:e.nHits])
		return true
	}
	c.misses++
	e.key = *fw
	s.Run(f, v)
	if v.NOut > cacheOuts || v.NHits > cacheHits {
		e.epoch = 0
		return false
	}
	e.epoch = c.epoch
	e.nOut, e.nHits, e.drop, e.table = uint8(v.NOut), uint8(v.NHits), v.Drop, v.Table
	copy(e.outs[:], v.Outputs[:v.NOut])
	copy(e.rules[:], v.Hits[:v.NHits])
	return false
}
