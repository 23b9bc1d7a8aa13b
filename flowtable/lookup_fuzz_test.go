package flowtable

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// A differential test of the lookup: random rules over a few fields, with
// masks and priorities, installed and deleted in random batches, and random
// packets run through each published Snapshot, bare and behind a Cache that
// lives across snapshots, against a brute-force scan of the same rules.
// Equal-priority overlaps are undefined (as in OpenFlow), so a packet that
// meets two rules of the top priority in one table is not compared.

// fuzzBytes hands out the fuzzer's bytes; past the end it returns zeros.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

var (
	fuzzAddrs   = [...]netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.1.0.9")}
	fuzzPrefixs = [...]int{32, 31, 24, 16, 8, 0}
	fuzzPorts   = [...]uint16{80, 81, 443, 0x50ff}
)

// fuzzRule makes a rule for table tbl (0 to 2) from the fuzzer's bytes; nil
// when the bytes describe no valid rule.
func fuzzRule(b *fuzzBytes, tbl uint8, cookie uint64) *Rule {
	var conds []Cond
	sel := b.next()
	if sel&1 != 0 {
		conds = append(conds, InPort(uint32(1+b.next()%4)))
	}
	proto := b.next() % 4 // 0 none, 1 ip, 2 tcp, 3 udp
	switch proto {
	case 1:
		conds = append(conds, IP())
	case 2:
		conds = append(conds, TCP())
	case 3:
		conds = append(conds, UDP())
	}
	if proto != 0 && sel&2 != 0 {
		a, p := fuzzAddrs[b.next()%4], fuzzPrefixs[b.next()%6]
		conds = append(conds, NwSrcPrefix(netip.PrefixFrom(a, p)))
	}
	if proto != 0 && sel&4 != 0 {
		a, p := fuzzAddrs[b.next()%4], fuzzPrefixs[b.next()%6]
		conds = append(conds, NwDstPrefix(netip.PrefixFrom(a, p)))
	}
	if proto >= 2 && sel&8 != 0 {
		mask := uint16(0xffff)
		if b.next()&1 != 0 {
			mask = 0xff00
		}
		conds = append(conds, TpDstMasked(fuzzPorts[b.next()%4], mask))
	}
	if sel&16 != 0 {
		conds = append(conds, RegMasked(0, uint32(b.next()%16), uint32(b.next()%16)))
	}
	if sel&32 != 0 {
		conds = append(conds, RegMasked(1, uint32(b.next()%4), 3))
	}
	var acts []Action
	switch b.next() % 4 {
	case 0: // drop
	case 1:
		acts = append(acts, OutputPort(uint32(1+b.next()%4)))
	case 2:
		if tbl < 2 {
			acts = append(acts, Load(uint64(b.next()%4), FieldReg1.Whole()), GotoTable(tbl+1+b.next()%(2-tbl)))
		}
	case 3:
		acts = append(acts, OutputPort(uint32(1+b.next()%4)), OutputPort(uint32(1+b.next()%4)))
		if tbl < 2 {
			acts = append(acts, GotoTable(2))
		}
	}
	r, err := NewRule(tbl, uint16(b.next()%6), cookie, conds, acts...)
	if err != nil {
		return nil
	}
	return r
}

// fuzzPacket makes packet fields from the fuzzer's bytes.
func fuzzPacket(b *fuzzBytes) Fields {
	f := Fields{InPort: uint32(1 + b.next()%4), EthType: 0x0800}
	switch b.next() % 3 {
	case 1:
		f.NwProto = 6
	case 2:
		f.NwProto = 17
	}
	f.NwSrc = fuzzAddrs[b.next()%4].As4()
	f.NwDst = fuzzAddrs[b.next()%4].As4()
	if f.NwProto != 0 {
		f.TpDst = fuzzPorts[b.next()%4] ^ uint16(b.next()%2)
	}
	f.Regs[0] = uint32(b.next() % 16)
	return f
}

// bruteRun runs f through rules by scanning them all, as the pipeline is
// documented to behave, for the actions fuzzRule makes (output, load,
// goto_table). ok is false when the outcome is undefined: two rules of the
// top priority match in one table.
func bruteRun(rules []*Rule, f Fields) (v Verdict, ok bool) {
	tbl := uint8(0)
	for {
		var best *Rule
		tie := false
		for _, r := range rules {
			if r.Table != tbl || !r.Match.Matches(&f) {
				continue
			}
			switch {
			case best == nil || r.Priority > best.Priority:
				best, tie = r, false
			case r.Priority == best.Priority:
				tie = true
			}
		}
		if tie {
			return v, false
		}
		if best == nil {
			if v.NOut == 0 {
				v.Drop, v.Table = DropTableMiss, tbl
			}
			return v, true
		}
		v.Hits[v.NHits] = best
		v.NHits++
		next := -1
		for _, a := range best.Actions {
			switch a.Kind {
			case ActOutput:
				if a.Port != f.InPort {
					v.Outputs[v.NOut] = Output{Port: a.Port}
					v.NOut++
				}
			case ActLoad:
				f.Regs[a.Dst.Field-FieldReg0] = uint32(a.Value)
			case ActGotoTable:
				next = int(a.Table)
			}
		}
		if next < 0 {
			if v.NOut == 0 {
				v.Drop, v.Table = DropAction, tbl
			}
			return v, true
		}
		tbl = uint8(next)
	}
}

func sameVerdict(a, b *Verdict) bool {
	if a.NOut != b.NOut || a.Drop != b.Drop || a.NHits != b.NHits {
		return false
	}
	if a.NOut == 0 && a.Table != b.Table {
		return false
	}
	for i := range a.NOut {
		if a.Outputs[i].Port != b.Outputs[i].Port {
			return false
		}
	}
	for i := range a.NHits {
		if a.Hits[i] != b.Hits[i] {
			return false
		}
	}
	return true
}

// lookupDifferential is the body of FuzzLookup.
func lookupDifferential(t *testing.T, data []byte) {
	b := fuzzBytes(data)
	tbl := New(Config{})
	cache := NewCache(64)
	var live []*Rule // what the table should hold
	cookie := uint64(0)
	for step := 0; step < 12 && len(b) > 0; step++ {
		if op := b.next(); op%4 == 3 && cookie > 0 {
			c := uint64(b.next()) % cookie
			n := tbl.Delete(Filter{Table: -1, Cookie: c, CookieMask: ^uint64(0)})
			kept := live[:0]
			for _, r := range live {
				if r.Cookie == c {
					n--
				} else {
					kept = append(kept, r)
				}
			}
			live = kept
			if n != 0 {
				t.Fatalf("Delete(cookie %d) removed a different number of rules than it should", c)
			}
		} else {
			var batch []*Rule
			for range 1 + int(b.next()%6) {
				if r := fuzzRule(&b, b.next()%3, cookie); r != nil {
					batch = append(batch, r)
				}
			}
			cookie++
			if err := tbl.Apply(nil, batch); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			for _, r := range batch {
				// A rule with the table, priority and match of an earlier
				// one (of this batch too) replaces it.
				kept := live[:0]
				for _, o := range live {
					if o.Table != r.Table || o.Priority != r.Priority || o.Match != r.Match {
						kept = append(kept, o)
					}
				}
				live = append(kept, r)
			}
		}
		s := tbl.Snapshot()
		if s.Len() != len(live) {
			t.Fatalf("snapshot holds %d rules, want %d", s.Len(), len(live))
		}
		for range 6 {
			f := fuzzPacket(&b)
			want, defined := bruteRun(live, f)
			if !defined {
				continue
			}
			var got Verdict
			g := f
			s.Run(&g, &got)
			if !sameVerdict(&got, &want) {
				t.Fatalf("packet %s: lookup %+v, brute force %+v\nrules:\n%s", FormatFields(f), verdictString(&got), verdictString(&want), rulesString(live))
			}
			for pass := range 2 { // a miss, then a hit
				g = f
				hit := cache.Run(s, &g, &got)
				if !sameVerdict(&got, &want) {
					t.Fatalf("packet %s, cache pass %d (hit %v): %s, brute force %s\nrules:\n%s", FormatFields(f), pass, hit, verdictString(&got), verdictString(&want), rulesString(live))
				}
			}
		}
	}
}

func verdictString(v *Verdict) string {
	s := "outputs:"
	for i := range v.NOut {
		s += " " + Action{Kind: ActOutput, Port: v.Outputs[i].Port}.String()
	}
	s += " drop:" + v.Drop.String() + " hits:"
	for i := range v.NHits {
		s += " [" + v.Hits[i].String() + "]"
	}
	return s
}

func rulesString(rs []*Rule) string {
	var s string
	for _, r := range rs {
		s += r.String() + "\n"
	}
	return s
}

func FuzzLookup(f *testing.F) {
	f.Add([]byte{0, 3, 0x3f, 1, 2, 1, 3, 2, 0, 1, 1, 0, 1, 7, 1, 3, 1, 1, 2, 0, 0, 1, 2, 3, 1, 0, 1, 2, 3})
	f.Add([]byte{0, 5, 1, 0x07, 2, 2, 1, 3, 1, 2, 0, 1, 3, 2, 0x3e, 1, 2, 0, 3, 1, 5, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) { lookupDifferential(t, data) })
}

// TestLookupDifferential runs FuzzLookup's body on random inputs, so that a
// plain go test covers more than the seed corpus.
func TestLookupDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for range n {
		data := make([]byte, 64+rng.IntN(512))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		lookupDifferential(t, data)
	}
}
