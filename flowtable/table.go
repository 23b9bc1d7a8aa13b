package flowtable

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
)

// Config configures a Table. The zero value is ready to use.
type Config struct {
	// Logger receives one debug line per published change. Nil discards.
	Logger *slog.Logger
}

// Validate reports whether c is usable; every Config is.
func (c Config) Validate() error { return nil }

// Table is the flow table handle: writers (Add, Delete, Apply) serialize on
// a mutex and publish a new immutable Snapshot; readers (Snapshot, Len,
// Rules) never lock. A Table is safe for concurrent use.
type Table struct {
	mu       sync.Mutex
	log      *slog.Logger
	snap     atomic.Pointer[Snapshot]
	byCookie map[uint64]map[*Rule]struct{} // guarded by mu
}

// New returns an empty table.
func New(cfg Config) *Table {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Table{log: log, byCookie: map[uint64]map[*Rule]struct{}{}}
	t.snap.Store(&Snapshot{gen: 1})
	return t
}

// Snapshot returns the current compiled rule set, without locking.
func (t *Table) Snapshot() *Snapshot { return t.snap.Load() }

// Len returns the number of rules installed.
func (t *Table) Len() int { return t.snap.Load().n }

// Rules returns every installed rule, sorted by table, then priority
// (highest first). The rules belong to the table: do not modify them.
func (t *Table) Rules() []*Rule { return t.snap.Load().Rules() }

// Rules returns every rule of s, sorted by table, then priority (highest
// first), then cookie and match.
func (s *Snapshot) Rules() []*Rule {
	out := make([]*Rule, 0, s.n)
	for _, tb := range s.tables {
		if tb != nil {
			tb.forEach(func(r *Rule) { out = append(out, r) })
		}
	}
	slices.SortFunc(out, func(a, b *Rule) int {
		if c := cmp.Compare(a.Table, b.Table); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Cookie, b.Cookie); c != 0 {
			return c
		}
		aw, bw := asWords(&a.Match.Value), asWords(&b.Match.Value)
		am, bm := asWords(&a.Match.Mask), asWords(&b.Match.Mask)
		for i := range aw {
			if c := cmp.Compare(am[i], bm[i]); c != 0 {
				return c
			}
			if c := cmp.Compare(aw[i], bw[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	return out
}

// Add installs rules in one atomic change. A rule with the same table,
// priority and match as an installed one replaces it (as an OpenFlow add
// does); the new rule's counters start at zero. Invalid rules make Add fail
// without changing anything; the error wraps ErrInvalidRule.
func (t *Table) Add(rules ...*Rule) error { return t.Apply(nil, rules) }

// Delete removes the rules f selects and returns how many it removed.
func (t *Table) Delete(f Filter) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.begin()
	n := x.delete(&f)
	if n > 0 {
		t.publish(x)
	}
	return n
}

// Apply deletes what dels select, then adds adds, and publishes the result
// as one snapshot: no reader sees a state in between.
func (t *Table) Apply(dels []Filter, adds []*Rule) error {
	for i, r := range adds {
		if err := r.check(); err != nil {
			return fmt.Errorf("rule %d (%s): %w: %w", i+1, r, ErrInvalidRule, err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.begin()
	for i := range dels {
		x.delete(&dels[i])
	}
	for _, r := range adds {
		r.packets.Store(0)
		r.bytes.Store(0)
		x.insert(r)
	}
	if x.dels > 0 || len(adds) > 0 {
		t.publish(x)
	}
	return nil
}

// txn is one copy-on-write change: nodes whose owner is x.tag were created
// by this transaction and may be written in place.
type txn struct {
	t       *Table
	tag     uint64
	s       *Snapshot
	touched []uint8
	dels    int
	adds    int
}

func (t *Table) begin() *txn {
	old := t.snap.Load()
	ns := &Snapshot{}
	*ns = *old
	ns.gen = old.gen + 1
	return &txn{t: t, tag: ns.gen, s: ns}
}

func (t *Table) publish(x *txn) {
	for _, id := range x.touched {
		tb := x.s.tables[id]
		tb.subs = slices.DeleteFunc(tb.subs, func(st *subtable) bool { return st.n == 0 })
		slices.SortStableFunc(tb.subs, func(a, b *subtable) int { return cmp.Compare(b.maxPrio, a.maxPrio) })
		if tb.n == 0 {
			x.s.tables[id] = nil
		}
	}
	x.s.setKeyMask()
	t.snap.Store(x.s)
	t.log.Debug("flowtable: published", "generation", x.s.gen, "rules", x.s.n, "added", x.adds, "deleted", x.dels)
}

func (x *txn) tableW(id uint8) *table {
	tb := x.s.tables[id]
	if tb != nil && tb.owner == x.tag {
		return tb
	}
	nt := &table{owner: x.tag}
	if tb != nil {
		nt.n = tb.n
		nt.subs = slices.Clone(tb.subs)
	}
	x.s.tables[id] = nt
	x.touched = append(x.touched, id)
	return nt
}

func (x *txn) subW(tb *table, i int) *subtable {
	st := tb.subs[i]
	if st.owner == x.tag {
		return st
	}
	ns := &subtable{}
	*ns = *st
	ns.owner = x.tag
	ns.prios = slices.Clone(st.prios)
	tb.subs[i] = ns
	return ns
}

func (x *txn) shardW(st *subtable, i uint64) *shard {
	sh := st.shards[i]
	if sh != nil && sh.owner == x.tag {
		return sh
	}
	ns := &shard{owner: x.tag}
	if sh != nil {
		ns.n = sh.n
		ns.slots = slices.Clone(sh.slots)
	}
	st.shards[i] = ns
	return ns
}

func findSub(tb *table, mask *words) int {
	for i, st := range tb.subs {
		if st.mask == *mask {
			return i
		}
	}
	return -1
}

// insert adds or replaces r (already checked).
func (x *txn) insert(r *Rule) {
	tb := x.tableW(r.Table)
	mask := asWords(&r.Match.Mask)
	i := findSub(tb, mask)
	if i < 0 {
		tb.subs = append(tb.subs, newSubtable(x.tag, mask))
		i = len(tb.subs) - 1
	}
	st := x.subW(tb, i)
	key := asWords(&r.Match.Value)
	h := st.hashMasked(key)
	sh := x.shardW(st, h&(nShards-1))
	var rules []*Rule
	var replaced *Rule
	if si := sh.find(st, key, h); si >= 0 {
		old := sh.slots[si].e.rules
		rules = make([]*Rule, 0, len(old)+1)
		for _, o := range old {
			if o.Priority == r.Priority {
				replaced = o
				continue
			}
			rules = append(rules, o)
		}
	}
	at, _ := slices.BinarySearchFunc(rules, r.Priority, func(o *Rule, p uint16) int { return cmp.Compare(p, o.Priority) })
	rules = slices.Insert(rules, at, r)
	sh.put(st, &entry{key: *key, rules: rules}, h)
	x.adds++
	x.s.nCT += b2i(r.hasCT())
	x.s.countRefs(r, 1)
	if replaced != nil {
		x.s.nCT -= b2i(replaced.hasCT())
		x.s.countRefs(replaced, -1)
		x.unindex(replaced)
	} else {
		st.n++
		tb.n++
		x.s.n++
		st.addPrio(r.Priority)
	}
	x.index(r)
}

// remove deletes exactly r if it is installed.
func (x *txn) remove(r *Rule) bool {
	tb := x.s.tables[r.Table]
	if tb == nil {
		return false
	}
	mask := asWords(&r.Match.Mask)
	i := findSub(tb, mask)
	if i < 0 {
		return false
	}
	key := asWords(&r.Match.Value)
	h := tb.subs[i].hashMasked(key)
	if tb.subs[i].shards[h&(nShards-1)].find(tb.subs[i], key, h) < 0 {
		return false
	}
	tb = x.tableW(r.Table)
	st := x.subW(tb, i)
	sh := x.shardW(st, h&(nShards-1))
	si := sh.find(st, key, h)
	old := sh.slots[si].e.rules
	at := slices.Index(old, r)
	if at < 0 {
		return false
	}
	if len(old) == 1 {
		sh.remove(si)
		if sh.n == 0 {
			st.shards[h&(nShards-1)] = nil
		}
	} else {
		sh.slots[si].e = &entry{key: *key, rules: slices.Delete(slices.Clone(old), at, at+1)}
	}
	st.n--
	tb.n--
	x.s.n--
	x.s.nCT -= b2i(r.hasCT())
	x.s.countRefs(r, -1)
	st.delPrio(r.Priority)
	x.unindex(r)
	x.dels++
	return true
}

func (x *txn) index(r *Rule) {
	m := x.t.byCookie[r.Cookie]
	if m == nil {
		m = map[*Rule]struct{}{}
		x.t.byCookie[r.Cookie] = m
	}
	m[r] = struct{}{}
}

func (x *txn) unindex(r *Rule) {
	if m := x.t.byCookie[r.Cookie]; m != nil {
		delete(m, r)
		if len(m) == 0 {
			delete(x.t.byCookie, r.Cookie)
		}
	}
}

// delete removes what f selects, using the cookie index for an exact
// cookie, a direct lookup for a strict filter, and a scan of the subtables
// that can hold more specific rules otherwise.
func (x *txn) delete(f *Filter) int {
	g := *f
	g.Match.normalize()
	var cand []*Rule
	switch {
	case g.CookieMask == ^uint64(0):
		for r := range x.t.byCookie[g.Cookie] {
			if g.Selects(r) {
				cand = append(cand, r)
			}
		}
	case g.Strict:
		for id := range x.s.tables {
			if tb := x.s.tables[id]; tb != nil && (g.Table < 0 || g.Table == id) {
				if i := findSub(tb, asWords(&g.Match.Mask)); i >= 0 {
					st := tb.subs[i]
					key := asWords(&g.Match.Value)
					h := st.hashMasked(key)
					sh := st.shards[h&(nShards-1)]
					if si := sh.find(st, key, h); si >= 0 {
						for _, r := range sh.slots[si].e.rules {
							if g.Selects(r) {
								cand = append(cand, r)
							}
						}
					}
				}
			}
		}
	default:
		fm := asWords(&g.Match.Mask)
		for id := range x.s.tables {
			tb := x.s.tables[id]
			if tb == nil || (g.Table >= 0 && g.Table != id) {
				continue
			}
			for _, st := range tb.subs {
				covers := true
				for i := range fm {
					if fm[i]&^st.mask[i] != 0 {
						covers = false
						break
					}
				}
				if !covers {
					continue
				}
				for _, sh := range st.shards {
					if sh == nil {
						continue
					}
					for _, sl := range sh.slots {
						if sl.e == nil {
							continue
						}
						for _, r := range sl.e.rules {
							if g.Selects(r) {
								cand = append(cand, r)
							}
						}
					}
				}
			}
		}
	}
	n := 0
	for _, r := range cand {
		if x.remove(r) {
			n++
		}
	}
	return n
}
