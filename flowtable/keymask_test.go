package flowtable

import (
	"testing"

	"github.com/gvswitch/gvs/conntrack"
)

func TestKeyMaskStateful(t *testing.T) {
	m := statefulProgram(t, 60, 4).Snapshot().KeyMask()
	// What the program reads: addresses (pods, services, subnets) and
	// tp_dst (the VXLAN port's rule); not the client's port, nor the
	// connection's tuple.
	if m.TpSrc != 0 || m.CtTpSrc != 0 || m.CtTpDst != 0 || m.CtNwSrc != [4]byte{} || m.CtNwDst != [4]byte{} {
		t.Errorf("the stateful program's key has per-connection fields: %s", FormatFields(m))
	}
	if m.TpDst != 0xffff || m.NwSrc != [4]byte{255, 255, 255, 255} || m.NwDst != [4]byte{255, 255, 255, 255} || m.ArpSha != [6]byte{255, 255, 255, 255, 255, 255} {
		t.Errorf("fields the program reads are not in the key: %s", FormatFields(m))
	}
	// Metadata and what verdicts copy are always in it.
	if m.InPort != ^uint32(0) || m.Regs[7] != ^uint32(0) || m.TunID != ^uint64(0) || m.CtState != ^conntrack.State(0) ||
		m.CtZone != 0xffff || m.CtMark != ^uint32(0) || m.EthDst != [6]byte{255, 255, 255, 255, 255, 255} || m.EthType != 0xffff {
		t.Errorf("metadata left out of the key: %s", FormatFields(m))
	}
	if !statefulProgram(t, 60, 4).Snapshot().masked {
		t.Error("masked is false with fields left out")
	}
	if (&Snapshot{}).masked {
		t.Error("the zero Snapshot masks")
	}
	// The masked hash is the hash of the masked key.
	s := statefulProgram(t, 60, 4).Snapshot()
	f := tcpFields(t, podPort(0), podIP(0), podIP(50), 40000, 80)
	k := f
	for i, w, kw := 0, asWords(&m), asWords(&k); i < len(w); i++ {
		kw[i] &= w[i]
	}
	if h := NewCache(64).Hash(s, 3, &f); h != cacheHash(asWords(&k), 3) {
		t.Errorf("Hash %#x, the hash of the masked key %#x", h, cacheHash(asWords(&k), 3))
	}
}

// The words of Fields that can hold wildcard bits lie in [wildLo, wildHi]
// (the cache compares the others as they are).
func TestWildcardableWords(t *testing.T) {
	for i, w := range wildcardable {
		if w != 0 && (i < wildLo || i > wildHi) {
			t.Errorf("word %d (%#x) of wildcardable is outside [%d, %d]", i, w, wildLo, wildHi)
		}
	}
	if wildcardable[wildLo] == 0 || wildcardable[wildHi] == 0 {
		t.Errorf("[%d, %d] is wider than wildcardable's words", wildLo, wildHi)
	}
}

// A rule set that reads every field the key may leave out makes the key
// the whole of Fields: the cache does not mask at all.
func TestKeyMaskFull(t *testing.T) {
	tbl := New(Config{})
	err := tbl.Add(mustRules(t, `
table=0, priority=1, tcp, nw_src=1.2.3.4, nw_dst=1.2.3.5, tp_src=1, tp_dst=2, actions=drop
table=0, priority=1, arp, arp_op=1, arp_sha=0a:00:00:00:00:01, arp_tha=0a:00:00:00:00:02, actions=drop
table=0, priority=1, ip, ct_state=+trk+new, ct_nw_proto=6, ct_nw_src=1.2.3.4, ct_nw_dst=1.2.3.5, ct_tp_src=1, ct_tp_dst=2, actions=drop`)...)
	if err != nil {
		t.Fatal(err)
	}
	s := tbl.Snapshot()
	if s.masked {
		t.Fatalf("masked with every field read: key mask %s", FormatFields(s.KeyMask()))
	}
	f := fieldsOf(t, 1, udpFrame([4]byte{1, 2, 3, 4}, [4]byte{5, 6, 7, 8}, 10, 20))
	if c := NewCache(64); c.Hash(s, 0, &f) != cacheHash(asWords(&f), 0) {
		t.Error("an unmasked snapshot's hash is not the hash of the whole Fields")
	}
}

// passes runs packet f through c as the switch does with the stateful
// program: a first pass from table 0, whose ct step recirculates to table
// 0 with the tracker's state (given: st) and the connection's tuple, the
// client's. It checks both cached verdicts against the uncached ones and
// returns the second's.
func passes(t *testing.T, c *Cache, s *Snapshot, f Fields, st conntrack.State, client, server [4]byte, cport, sport uint16) Verdict {
	t.Helper()
	var v, want Verdict
	x, y := f, f
	c.Run(s, &x, &v)
	s.Run(&y, &want)
	if d := diffVerdict(&v, &want); d != "" {
		t.Fatalf("first pass of %s: cached %s", FormatFields(f), d)
	}
	if v.NCT != 1 || v.CT[0].CT == nil || !v.CT[0].CT.Recirc {
		t.Fatalf("first pass of %s: no ct(table=0) step (%d steps)", FormatFields(f), v.NCT)
	}
	step := v.CT[0]
	r := f
	r.Regs, r.TunID, r.TunSrc, r.TunDst = step.Regs, step.TunID, step.TunSrc, step.TunDst
	r.CtState, r.CtZone, r.CtNwProto = st|conntrack.StateTrk, step.Zone, 6
	r.CtNwSrc, r.CtNwDst, r.CtTpSrc, r.CtTpDst = client, server, cport, sport
	x, y = r, r
	c.RunFrom(s, step.CT.Table, &x, &v)
	s.RunFrom(step.CT.Table, &y, &want)
	if d := diffVerdict(&v, &want); d != "" {
		t.Fatalf("recirculation of %s: cached %s", FormatFields(r), d)
	}
	return v
}

// N connections from a client pod to a server pod on the same node, each
// from a port of its own, through the stateful program: in the client's
// direction the cache misses for the first connection only (its first
// pass, its +new pass and its +est pass), not three times per connection.
// In the server's direction tp_dst (the client's port) is in the key
// (the VXLAN rule reads tp_dst), so each connection misses there.
func TestCacheMaskConnections(t *testing.T) {
	tbl := statefulProgram(t, 60, 4)
	s := tbl.Snapshot()
	const client, server = 0, 50 // the same VNID (podVNID)
	cip, sip := podIP(client), podIP(server)
	toServer, toClient := NewCache(4096), NewCache(4096)
	const n = 200
	for k := range n {
		cport := uint16(40000 + k)
		syn := tcpFields(t, podPort(client), cip, sip, cport, 80)
		if v := passes(t, toServer, s, syn, conntrack.StateNew, cip, sip, cport, 80); v.NOut != 1 || v.Outputs[0].Port != podPort(server) || v.NCT != 1 {
			t.Fatalf("connection %d: the SYN's +new pass gives %d outputs, %d ct steps", k, v.NOut, v.NCT)
		}
		synack := tcpFields(t, podPort(server), sip, cip, 80, cport)
		if v := passes(t, toClient, s, synack, conntrack.StateEst|conntrack.StateRpl, cip, sip, cport, 80); v.NOut != 1 || v.Outputs[0].Port != podPort(client) {
			t.Fatalf("connection %d: the SYN-ACK's +est pass gives %d outputs", k, v.NOut)
		}
		for range 2 { // the ACK and a request
			passes(t, toServer, s, syn, conntrack.StateEst, cip, sip, cport, 80)
		}
	}
	h, m := toServer.Stats()
	if m != 3 || h != 3*2*n-3 {
		t.Errorf("client to server: %d hits, %d misses for %d connections; want %d hits, 3 misses", h, m, n, 3*2*n-3)
	}
	h, m = toClient.Stats()
	if m != 2*n {
		t.Errorf("server to client: %d hits, %d misses for %d connections; want 2 misses a connection", h, m, n)
	}
	t.Logf("server to client: %d hits, %d misses for %d connections", h, m, n)
}

// refuse checks that packets a and b, which the rules of text treat
// differently, get their own verdicts through a warm cache, whichever
// fills it first; it returns the verdicts (of a, of b).
func refuse(t *testing.T, text string, a, b Fields) (va, vb Verdict) {
	t.Helper()
	tbl := New(Config{})
	if err := tbl.Add(mustRules(t, text)...); err != nil {
		t.Fatal(err)
	}
	s := tbl.Snapshot()
	x, y := a, b
	s.Run(&x, &va)
	s.Run(&y, &vb)
	if diffVerdict(&va, &vb) == "" {
		t.Fatalf("the rules treat %s and %s alike: no refusal to test", FormatFields(a), FormatFields(b))
	}
	for _, order := range [][2]Fields{{a, b}, {b, a}} {
		c := NewCache(64)
		for range 2 {
			for _, p := range order {
				var got, want Verdict
				x, y = p, p
				c.Run(s, &x, &got)
				s.Run(&y, &want)
				if d := diffVerdict(&got, &want); d != "" {
					t.Fatalf("%s: cached %s\nkey mask %s", FormatFields(p), d, FormatFields(s.KeyMask()))
				}
			}
		}
		if h, m := c.Stats(); h != 2 || m != 2 {
			t.Errorf("%d hits, %d misses: the two packets share an entry", h, m)
		}
	}
	return va, vb
}

// A rule that reads a field the key would otherwise leave out puts it in
// the key: packets that differ in it get their own entries and verdicts.
func TestCacheMaskRefusals(t *testing.T) {
	src, dst := [4]byte{10, 128, 0, 2}, [4]byte{10, 128, 0, 3}
	t.Run("tp_src", func(t *testing.T) {
		a, b := tcpFields(t, 1, src, dst, 1000, 80), tcpFields(t, 1, src, dst, 1001, 80)
		va, vb := refuse(t, `
table=0, priority=100, tcp, tp_src=1000, actions=drop
table=0, priority=50, ip, actions=output:2`, a, b)
		if va.NOut != 0 || vb.NOut != 1 {
			t.Errorf("tp_src=1000: %d outputs, tp_src=1001: %d", va.NOut, vb.NOut)
		}
	})
	t.Run("masked tp_src", func(t *testing.T) {
		a, b := tcpFields(t, 1, src, dst, 0x1000, 80), tcpFields(t, 1, src, dst, 0x2000, 80)
		refuse(t, `
table=0, priority=100, tcp, tp_src=0x1000/0xf000, actions=drop
table=0, priority=50, ip, actions=output:2`, a, b)
	})
	t.Run("ct_tp_src", func(t *testing.T) {
		a := tcpFields(t, 1, src, dst, 1000, 80)
		a.CtState, a.CtNwProto, a.CtNwSrc, a.CtNwDst, a.CtTpSrc, a.CtTpDst = conntrack.StateTrk|conntrack.StateNew, 6, src, dst, 1000, 80
		b := a
		b.TpSrc, b.CtTpSrc = 1001, 1001
		refuse(t, `
table=0, priority=100, ct_state=+trk+new, ct_nw_proto=6, ct_tp_src=1000, actions=drop
table=0, priority=50, ip, actions=output:2`, a, b)
	})
	t.Run("move from nw_src", func(t *testing.T) {
		a := tcpFields(t, 1, [4]byte{10, 128, 0, 5}, dst, 1000, 80)
		b := tcpFields(t, 1, [4]byte{10, 128, 0, 6}, dst, 1000, 80)
		refuse(t, `
table=0, priority=100, ip, actions=move:NXM_OF_IP_SRC[0..7]->NXM_NX_REG3[0..7],goto_table:1
table=1, priority=100, reg3=5, actions=output:2
table=1, priority=0, actions=drop`, a, b)
	})
	t.Run("output to a port moved from nw_dst", func(t *testing.T) {
		a := tcpFields(t, 1, src, [4]byte{10, 128, 0, 5}, 1000, 80)
		b := tcpFields(t, 1, src, [4]byte{10, 128, 0, 6}, 1000, 80)
		refuse(t, `table=0, priority=100, ip, actions=move:NXM_OF_IP_DST[0..7]->NXM_NX_REG2[0..7],output:NXM_NX_REG2[]`, a, b)
	})
	t.Run("ct zone from nw_src", func(t *testing.T) {
		a := tcpFields(t, 1, [4]byte{10, 128, 0, 5}, dst, 1000, 80)
		b := tcpFields(t, 1, [4]byte{10, 129, 0, 5}, dst, 1000, 80)
		refuse(t, `table=0, priority=100, ip, actions=ct(zone=NXM_OF_IP_SRC[16..31],table=1)`, a, b)
	})
	// Tenant isolation: pod 0 (VNID 10) may reach pod 50 (VNID 10) and not
	// pod 1 (VNID 11); pod 0 sending with pod 50's address is dropped at
	// table 20. Each through a cache that the other packet warmed.
	t.Run("tenant isolation by address", func(t *testing.T) {
		text := programText(60, 4)
		same := tcpFields(t, podPort(0), podIP(0), podIP(50), 1000, 80)
		other := tcpFields(t, podPort(0), podIP(0), podIP(1), 1000, 80)
		va, vb := refuse(t, text, same, other)
		if va.NOut != 1 || vb.NOut != 0 {
			t.Errorf("to its own tenant: %d outputs; to another: %d", va.NOut, vb.NOut)
		}
		spoof := tcpFields(t, podPort(0), podIP(50), podIP(50), 1000, 80)
		if _, vs := refuse(t, text, same, spoof); vs.NOut != 0 || vs.Table != 20 {
			t.Errorf("a spoofed source: %d outputs, dropped in table %d", vs.NOut, vs.Table)
		}
	})
}

// The masked hit path (Hash, Prefetch, RunHashed) allocates nothing.
func TestCacheMaskNoAllocs(t *testing.T) {
	s := statefulProgram(t, 60, 4).Snapshot()
	if !s.masked {
		t.Fatal("the stateful program's key is not masked")
	}
	c := NewCache(4096)
	fs := make([]Fields, 64)
	for k := range fs {
		fs[k] = tcpFields(t, podPort(0), podIP(0), podIP(50), uint16(40000+k), 80)
	}
	var v Verdict
	var hs [64]uint64
	for k := range fs {
		f := fs[k]
		c.Run(s, &f, &v)
	}
	h0, _ := c.Stats()
	allocs := testing.AllocsPerRun(100, func() {
		for k := range fs {
			hs[k] = c.Hash(s, 0, &fs[k])
		}
		c.Prefetch(hs[:])
		for k := range fs {
			f := fs[k]
			c.RunHashed(s, 0, &f, &v, hs[k])
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch, want 0", allocs)
	}
	if h, _ := c.Stats(); h-h0 != 101*64 {
		t.Errorf("%d hits of %d lookups", h-h0, 101*64)
	}
}
