package flowtable

import (
	"math/bits"
	"slices"
)

// The compiled form, tuple-space search:
//
//  1. A Snapshot has one table per table number (nil when empty).
//  2. A table groups its rules by mask into subtables, ordered by the
//     highest priority each holds, so that a lookup stops as soon as no
//     remaining subtable can beat the best match found.
//  3. A subtable is a hash of the masked key, split into nShards shards
//     by the key's hash; each shard is an open-addressing (linear probing)
//     table of entries, and an entry lists the rules with that exact
//     (mask, key), highest priority first.
//
// Everything reachable from a published Snapshot is immutable. A writer
// copies only what it changes (the snapshot's table array, one table's
// subtable list, one subtable's shard array, one shard's slot array),
// marking each copy with the transaction's generation so that a second
// change in the same transaction writes in place. Everything else is shared
// with the previous snapshot: adding a pod's five rules to a table of 100k
// copies five shards of a few hundred slots each.

const (
	shardBits = 8
	nShards   = 1 << shardBits
	minSlots  = 8
)

// Snapshot is an immutable compiled rule set. It is safe for concurrent use
// by any number of goroutines; obtain the current one with Table.Snapshot.
type Snapshot struct {
	gen    uint64
	n      int
	nCT    int // rules with a ct action
	tables [256]*table
	// refs counts, per Field, the rules whose actions refer to it
	// (refs[refUnknown]: rules with an action the key mask cannot
	// express); see keymask.go.
	refs [numFields + 1]int
	// wild is the cache key's wildcard: the Fields bits no rule's match
	// or action can see (setKeyMask, at publish); masked is wild != 0.
	// A zero Snapshot wildcards nothing.
	wild   words
	masked bool
}

// Generation returns the snapshot's generation; each publish by the same
// Table increases it.
func (s *Snapshot) Generation() uint64 { return s.gen }

// Len returns the number of rules in s.
func (s *Snapshot) Len() int { return s.n }

// HasConntrack reports whether a rule of s has a ct action, so that a
// switch can skip connection-tracking work (prefetching, the tracker's
// clock) for rule sets without one.
func (s *Snapshot) HasConntrack() bool { return s.nCT > 0 }

// hasCT reports whether r has a ct action.
func (r *Rule) hasCT() bool {
	for i := range r.Actions {
		if r.Actions[i].Kind == ActCT {
			return true
		}
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

type table struct {
	owner uint64
	n     int
	subs  []*subtable // by maxPrio, descending
}

type prioCount struct {
	prio uint16
	n    int
}

type subtable struct {
	owner   uint64
	mask    words
	idx     []uint8 // indexes of the non-zero words of mask (shared, immutable)
	maxPrio uint16
	n       int
	prios   []prioCount // descending
	shards  [nShards]*shard
}

type shard struct {
	owner uint64
	n     int
	slots []slot // power-of-two length, at most half full
}

type slot struct {
	hash uint64
	e    *entry // nil: empty
}

type entry struct {
	key   words
	rules []*Rule // highest priority first; immutable
}

const (
	hashSeed = 0x2d358dccaa6c78a5
	hashMul1 = 0x9e3779b97f4a7c15
	hashMul2 = 0xbf58476d1ce4e5b9
)

func hashWord(h, w uint64) uint64 {
	return bits.RotateLeft64((h^w)*hashMul1, 31)
}

func hashFinish(h uint64) uint64 {
	h ^= h >> 33
	h *= hashMul2
	h ^= h >> 29
	return h
}

// hashMasked hashes fw & st.mask over the subtable's words.
func (st *subtable) hashMasked(fw *words) uint64 {
	h := uint64(hashSeed)
	for _, i := range st.idx {
		h = hashWord(h, fw[i]&st.mask[i])
	}
	return hashFinish(h)
}

// lookup returns the best rule of st matching fw, or nil.
func (st *subtable) lookup(fw *words) *Rule {
	h := st.hashMasked(fw)
	sh := st.shards[h&(nShards-1)]
	if sh == nil {
		return nil
	}
	m := uint64(len(sh.slots) - 1)
	for p := h >> shardBits; ; p++ {
		s := &sh.slots[p&m]
		if s.e == nil {
			return nil
		}
		if s.hash == h && st.matchKey(s.e, fw) {
			return s.e.rules[0]
		}
	}
}

func (st *subtable) matchKey(e *entry, fw *words) bool {
	for _, i := range st.idx {
		if e.key[i] != fw[i]&st.mask[i] {
			return false
		}
	}
	return true
}

// lookup returns the highest-priority rule of table tid matching f.
func (s *Snapshot) lookup(tid uint8, f *Fields) *Rule {
	t := s.tables[tid]
	if t == nil {
		return nil
	}
	fw := asWords(f)
	var best *Rule
	for _, st := range t.subs {
		if best != nil && st.maxPrio <= best.Priority {
			break
		}
		if r := st.lookup(fw); r != nil && (best == nil || r.Priority > best.Priority) {
			best = r
		}
	}
	return best
}

// forEach calls fn for every rule of table t.
func (t *table) forEach(fn func(*Rule)) {
	for _, st := range t.subs {
		for _, sh := range st.shards {
			if sh == nil {
				continue
			}
			for _, sl := range sh.slots {
				if sl.e != nil {
					for _, r := range sl.e.rules {
						fn(r)
					}
				}
			}
		}
	}
}

// find returns the slot index of key in sh, or -1.
func (sh *shard) find(st *subtable, key *words, h uint64) int {
	if sh == nil || len(sh.slots) == 0 {
		return -1
	}
	m := uint64(len(sh.slots) - 1)
	for p := h >> shardBits; ; p++ {
		s := &sh.slots[p&m]
		if s.e == nil {
			return -1
		}
		if s.hash == h && s.e.key == *key {
			return int(p & m)
		}
	}
}

// put inserts or replaces the entry for e.key (sh must be writable).
func (sh *shard) put(st *subtable, e *entry, h uint64) {
	if i := sh.find(st, &e.key, h); i >= 0 {
		sh.slots[i].e = e
		return
	}
	if (sh.n+1)*2 > len(sh.slots) {
		sh.grow()
	}
	sh.insert(slot{h, e})
	sh.n++
}

func (sh *shard) insert(s slot) {
	m := uint64(len(sh.slots) - 1)
	for p := s.hash >> shardBits; ; p++ {
		if sh.slots[p&m].e == nil {
			sh.slots[p&m] = s
			return
		}
	}
}

func (sh *shard) grow() {
	n := len(sh.slots) * 2
	if n < minSlots {
		n = minSlots
	}
	old := sh.slots
	sh.slots = make([]slot, n)
	for _, s := range old {
		if s.e != nil {
			sh.insert(s)
		}
	}
}

// remove deletes slot i with backward-shift deletion (sh must be writable).
func (sh *shard) remove(i int) {
	m := len(sh.slots) - 1
	sh.n--
	for {
		sh.slots[i] = slot{}
		j := i
		for {
			j = (j + 1) & m
			if sh.slots[j].e == nil {
				return
			}
			k := int(sh.slots[j].hash>>shardBits) & m
			// Leave slot j alone when its home k lies cyclically in (i, j].
			if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
				continue
			}
			sh.slots[i] = sh.slots[j]
			i = j
			break
		}
	}
}

func newSubtable(owner uint64, mask *words) *subtable {
	st := &subtable{owner: owner, mask: *mask}
	for i, w := range mask {
		if w != 0 {
			st.idx = append(st.idx, uint8(i))
		}
	}
	return st
}

func (st *subtable) addPrio(p uint16) {
	i, found := slices.BinarySearchFunc(st.prios, p, func(pc prioCount, p uint16) int { return int(p) - int(pc.prio) })
	if found {
		st.prios[i].n++
	} else {
		st.prios = slices.Insert(st.prios, i, prioCount{p, 1})
	}
	st.maxPrio = st.prios[0].prio
}

func (st *subtable) delPrio(p uint16) {
	i, found := slices.BinarySearchFunc(st.prios, p, func(pc prioCount, p uint16) int { return int(p) - int(pc.prio) })
	if !found {
		return
	}
	if st.prios[i].n--; st.prios[i].n == 0 {
		st.prios = slices.Delete(st.prios, i, i+1)
	}
	if len(st.prios) > 0 {
		st.maxPrio = st.prios[0].prio
	} else {
		st.maxPrio = 0
	}
}
