package flowtable

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/conntrack"
)

// A differential test of the cache's key mask (keymask.go): random rule
// sets that match on every kind of field (tp_src, ct_tp_src, ct_nw_src,
// masked fields among them) and use every kind of action (move from a
// wildcardable field into a register, output to a register, ct with its
// zone from a field, load, set_field, resubmit, goto_table), and random
// packets. For each packet f a second packet g differs from it only in
// bits outside the snapshot's KeyMask; both go through one Cache, each
// after the other has filled its entry, and every cached verdict must be
// the uncached Snapshot.RunFrom's for the same packet: outputs, hits, ct
// steps, drop. Hashes computed under another snapshot, or wrong ones,
// must give the same verdicts (a stale hash only misses).

var (
	maskAddrs = [...]string{"10.0.0.1", "10.0.0.2", "10.0.1.1", "10.1.0.9"}
	maskPorts = [...]uint16{80, 81, 443, 1000, 0x50ff}
	maskMACs  = [...]string{"0a:00:00:00:00:01", "0a:00:00:00:00:02", "0a:58:0a:80:00:02"}
)

func (b *fuzzBytes) pick(n int) int { return int(b.next()) % n }

// Features a rule set may use (maskRuleText's feat): each rule set leaves
// some out, so that rule sets in which only an action reads a field, or
// in which no rule reads it, are common.
const (
	featNwSrc   = 1 << iota // nw_src matches
	featNwDst               // nw_dst matches
	featCtZone              // ct(zone=NXM_OF_IP_SRC[16..31])
	featTpSrc               // tp_src matches
	featCtTuple             // ct_tp_src, ct_tp_dst, ct_nw_src, ct_nw_dst matches
	featArp                 // arp_op, arp_sha, arp_tha matches
)

// maskRuleText makes the text of a random rule of table tbl (0 to 3),
// using only the features of feat.
func maskRuleText(b *fuzzBytes, tbl int, feat byte) string {
	var m []string
	sel, sel2 := b.next(), b.next()
	if sel&1 != 0 {
		m = append(m, fmt.Sprintf("in_port=%d", 1+b.pick(4)))
	}
	proto := [...]string{"", "ip", "tcp", "udp", "arp"}[b.pick(5)]
	if proto != "" {
		m = append(m, proto)
	}
	prefix := func() string {
		return fmt.Sprintf("%s/%d", maskAddrs[b.pick(len(maskAddrs))], [...]int{32, 24, 16, 8}[b.pick(4)])
	}
	if proto != "" && sel&2 != 0 && feat&featNwSrc != 0 {
		m = append(m, "nw_src="+prefix())
	}
	if proto != "" && sel&4 != 0 && feat&featNwDst != 0 {
		m = append(m, "nw_dst="+prefix())
	}
	port := func() string {
		p := fmt.Sprint(maskPorts[b.pick(len(maskPorts))])
		if b.next()&1 != 0 {
			p += "/0xff00"
		}
		return p
	}
	switch proto {
	case "tcp", "udp":
		if sel&8 != 0 && feat&featTpSrc != 0 {
			m = append(m, "tp_src="+port())
		}
		if sel&16 != 0 {
			m = append(m, "tp_dst="+port())
		}
	case "arp":
		if feat&featArp == 0 {
			break
		}
		if sel&8 != 0 {
			m = append(m, fmt.Sprintf("arp_op=%d", 1+b.pick(2)))
		}
		if sel&16 != 0 {
			m = append(m, "arp_sha="+maskMACs[b.pick(len(maskMACs))])
		}
		if b.next()&1 != 0 {
			m = append(m, "arp_tha="+maskMACs[b.pick(len(maskMACs))])
		}
	}
	if sel&32 != 0 {
		m = append(m, fmt.Sprintf("reg%d=%d/0xf", b.pick(4), b.pick(8)))
	}
	if sel&64 != 0 {
		m = append(m, fmt.Sprintf("tun_id=%d", b.pick(4)))
	}
	if b.next()&1 != 0 {
		m = append(m, "dl_src="+maskMACs[b.pick(len(maskMACs))])
	}
	tracked := false
	if sel&128 != 0 {
		st := [...]string{"-trk", "+trk+new", "+trk+est", "+trk+est+rpl"}[b.pick(4)]
		m = append(m, "ct_state="+st)
		tracked = st != "-trk"
	}
	if sel2&1 != 0 {
		m = append(m, fmt.Sprintf("ct_zone=%d", b.pick(4)))
	}
	if sel2&2 != 0 {
		m = append(m, fmt.Sprintf("ct_mark=%d", b.pick(2)))
	}
	if tracked && sel2&4 != 0 && feat&featCtTuple != 0 {
		m = append(m, "ct_nw_proto=6")
		if sel2&8 != 0 {
			m = append(m, "ct_tp_src="+port())
		}
		if sel2&16 != 0 {
			m = append(m, "ct_tp_dst="+port())
		}
	}
	if tracked && proto != "" && proto != "arp" && feat&featCtTuple != 0 {
		if sel2&32 != 0 {
			m = append(m, "ct_nw_src="+prefix())
		}
		if sel2&64 != 0 {
			m = append(m, "ct_nw_dst="+prefix())
		}
	}
	var a []string
	for range b.pick(4) {
		switch b.pick(16) {
		case 0:
			a = append(a, fmt.Sprintf("output:%d", 1+b.pick(4)))
		case 1:
			a = append(a, "output:NXM_NX_REG2[0..2]")
		case 2:
			a = append(a, "in_port")
		case 3:
			a = append(a, fmt.Sprintf("load:%#x->NXM_NX_REG%d[0..3]", b.pick(16), b.pick(4)))
		case 4:
			a = append(a, "move:NXM_OF_IP_SRC[0..7]->NXM_NX_REG0[0..7]")
		case 5:
			a = append(a, "move:NXM_OF_IP_DST[8..15]->NXM_NX_REG2[0..7]")
		case 6:
			a = append(a, "move:NXM_NX_REG0[0..2]->NXM_NX_REG2[0..2]")
		case 7:
			a = append(a, fmt.Sprintf("set_field:10.0.0.%d->tun_dst", 1+b.pick(3)))
		case 8:
			a = append(a, "set_field:"+maskMACs[b.pick(len(maskMACs))]+"->eth_dst")
		case 9:
			a = append(a, "ct(table=2,zone=NXM_NX_REG0[0..15])")
		case 10:
			a = append(a, "ct(commit,zone=5)")
		case 11:
			if feat&featCtZone != 0 {
				a = append(a, "ct(zone=NXM_OF_IP_SRC[16..31])")
			}
		case 12:
			a = append(a, "ct_clear")
		case 13:
			a = append(a, fmt.Sprintf("resubmit(,%d)", b.pick(4)))
		case 14:
			a = append(a, "move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG1[]")
		case 15:
			a = append(a, "move:NXM_OF_ETH_SRC[0..7]->NXM_NX_REG3[0..7]")
		}
	}
	if tbl < 3 && b.next()&1 != 0 {
		a = append(a, fmt.Sprintf("goto_table:%d", tbl+1+b.pick(3-tbl)))
	}
	acts := strings.Join(a, ",")
	if acts == "" {
		acts = "drop"
	}
	return fmt.Sprintf("table=%d, priority=%d, %s, actions=%s", tbl, b.pick(6), strings.Join(m, ", "), acts)
}

// maskPacket makes packet fields from the fuzzer's bytes, from small sets
// of values so that the rules of maskRuleText match them often.
func maskPacket(b *fuzzBytes) Fields {
	mac := func() (a [6]byte) {
		a = [6]byte{0x0a, 0, 0, 0, 0, byte(1 + b.pick(2))}
		if b.next()&3 == 0 {
			a = [6]byte{0x0a, 0x58, 0x0a, 0x80, 0, 2}
		}
		return a
	}
	addr := func() [4]byte {
		var a [4]byte
		fmt.Sscanf(maskAddrs[b.pick(len(maskAddrs))], "%d.%d.%d.%d", &a[0], &a[1], &a[2], &a[3])
		if b.next()&3 == 0 {
			a[3] ^= 0x40
		}
		return a
	}
	port := func() uint16 { return maskPorts[b.pick(len(maskPorts))] ^ uint16(b.pick(2)) }
	f := Fields{InPort: uint32(1 + b.pick(4)), EthSrc: mac(), EthDst: mac()}
	if b.next()%4 == 0 {
		f.EthType = 0x0806
		f.ArpOp = uint16(1 + b.pick(2))
		f.NwProto = uint8(f.ArpOp)
		f.ArpSha, f.ArpTha = mac(), mac()
	} else {
		f.EthType = 0x0800
		f.NwProto = [...]uint8{6, 17, 1}[b.pick(3)]
		f.TpSrc, f.TpDst = port(), port()
	}
	f.NwSrc, f.NwDst = addr(), addr()
	for i := range 4 {
		f.Regs[i] = uint32(b.pick(8))
	}
	f.TunID = uint64(b.pick(4))
	trk := conntrack.StateTrk
	f.CtState = [...]conntrack.State{0, trk | conntrack.StateNew, trk | conntrack.StateEst, trk | conntrack.StateEst | conntrack.StateRpl, trk | conntrack.StateInv}[b.pick(5)]
	if f.CtState != 0 {
		f.CtZone = uint16(b.pick(4))
		f.CtMark = uint32(b.pick(2))
		f.CtNwProto = 6
		f.CtNwSrc, f.CtNwDst = addr(), addr()
		f.CtTpSrc, f.CtTpDst = port(), port()
	}
	return f
}

// besides returns a packet that agrees with f on every bit of keep (a
// snapshot's KeyMask) and takes the other bits from o.
func besides(f, o Fields, keep *Fields) Fields {
	g := f
	gw, ow, kw := asWords(&g), asWords(&o), asWords(keep)
	for i := range gw {
		gw[i] = gw[i]&kw[i] | ow[i]&^kw[i]
	}
	return g
}

// diffVerdict describes how a differs from b, or returns "" when they are
// the same in everything a caller acts on.
func diffVerdict(a, b *Verdict) string {
	switch {
	case a.NOut != b.NOut || a.Drop != b.Drop || a.NHits != b.NHits || a.NCT != b.NCT:
		return fmt.Sprintf("outputs %d/%d, drop %v/%v, hits %d/%d, ct %d/%d", a.NOut, b.NOut, a.Drop, b.Drop, a.NHits, b.NHits, a.NCT, b.NCT)
	case a.NOut == 0 && a.Table != b.Table:
		return fmt.Sprintf("drop in table %d/%d", a.Table, b.Table)
	}
	for i := range a.NOut {
		if a.Outputs[i] != b.Outputs[i] {
			return fmt.Sprintf("output %d: %+v/%+v", i, a.Outputs[i], b.Outputs[i])
		}
	}
	for i := range a.NHits {
		if a.Hits[i] != b.Hits[i] {
			return fmt.Sprintf("hit %d: %s/%s", i, a.Hits[i], b.Hits[i])
		}
	}
	for i := range a.NCT {
		if a.CT[i] != b.CT[i] {
			return fmt.Sprintf("ct step %d: %+v/%+v", i, a.CT[i], b.CT[i])
		}
	}
	return ""
}

// cacheMaskDifferential is the body of FuzzCacheMask. It returns the
// number of times a packet hit an entry that a packet with other fields
// (outside the key) filled, so that a caller can see that the property
// was exercised.
func cacheMaskDifferential(t *testing.T, data []byte) (shared int) {
	b := fuzzBytes(data)
	tbl := New(Config{})
	cache := NewCache(64)
	var live []string
	var prev *Snapshot
	feat := b.next()
	for step := 0; step < 4 && len(b) > 0; step++ {
		var batch []*Rule
		for range 2 + b.pick(8) {
			text := maskRuleText(&b, b.pick(4), feat)
			r, err := ParseRule(text)
			if err != nil {
				continue // a combination the rules refuse (prerequisites)
			}
			batch = append(batch, r)
			live = append(live, text)
		}
		if err := tbl.Apply(nil, batch); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		s := tbl.Snapshot()
		keep := s.KeyMask()
		seed := uint64(b.next())<<8 | uint64(b.next())
		rng := rand.New(rand.NewPCG(seed, 1))
		for range 8 {
			f := maskPacket(&b)
			g := besides(f, maskPacket(&b), &keep)
			if b.next()&1 != 0 { // and random bits, too
				var r Fields
				for i, rw := 0, asWords(&r); i < len(rw); i++ {
					rw[i] = rng.Uint64()
				}
				g = besides(g, r, &keep)
			}
			start := [...]uint8{0, 0, 2, 1}[b.pick(4)]
			var wantF, wantG, got Verdict
			x := f
			s.RunFrom(start, &x, &wantF)
			x = g
			s.RunFrom(start, &x, &wantG)
			fail := func(what string, p Fields, got, want *Verdict) {
				t.Helper()
				if d := diffVerdict(got, want); d != "" {
					t.Fatalf("%s, packet %s from table %d: cached %s against uncached\nkey mask %s\nrules:\n%s",
						what, FormatFields(p), start, d, FormatFields(keep), strings.Join(live, "\n"))
				}
			}
			// g fills the entry, then f meets it, then g again.
			x = g
			cache.RunFrom(s, start, &x, &got)
			fail("g first", g, &got, &wantG)
			x = f
			if cache.RunFrom(s, start, &x, &got) && f != g {
				shared++
			}
			fail("f after g", f, &got, &wantF)
			x = g
			cache.RunFrom(s, start, &x, &got)
			fail("g after f", g, &got, &wantG)
			// A hash from another snapshot's mask, or a wrong one, may
			// only miss.
			if prev != nil {
				x = f
				cache.RunHashed(s, start, &x, &got, cache.Hash(prev, start, &f))
				fail("f with the previous snapshot's hash", f, &got, &wantF)
			}
			x = f
			cache.RunHashed(s, start, &x, &got, rng.Uint64())
			fail("f with a random hash", f, &got, &wantF)
			x = g
			cache.RunHashed(s, start, &x, &got, cache.Hash(s, start, &f))
			fail("g with f's hash", g, &got, &wantG)
		}
		prev = s
	}
	return shared
}

func FuzzCacheMask(f *testing.F) {
	f.Add([]byte{0x8b, 0x1c, 2, 1, 2, 0, 1, 2, 3, 1, 0, 1, 9, 2, 1, 3, 0, 4, 2, 1, 2, 3, 1, 0, 0, 1, 2, 3, 1, 2, 3, 0, 1})
	f.Add([]byte{0xff, 0xff, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, data []byte) { cacheMaskDifferential(t, data) })
}

// TestCacheMaskDifferential runs FuzzCacheMask's body on random inputs,
// so that a plain go test covers more than the seed corpus, and checks
// that packets with different fields did share entries.
func TestCacheMaskDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 3))
	n := 2000
	if testing.Short() {
		n = 200
	}
	shared := 0
	for range n {
		data := make([]byte, 128+rng.IntN(1024))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		shared += cacheMaskDifferential(t, data)
	}
	if shared < n {
		t.Errorf("only %d hits on entries other packets filled in %d rule sets", shared, n)
	}
	t.Logf("%d hits on entries filled by packets with other fields", shared)
}
