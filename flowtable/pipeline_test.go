package flowtable

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func runOn(s *Snapshot, f Fields) Verdict {
	var v Verdict
	s.Run(&f, &v)
	return v
}

func TestProgramPaths(t *testing.T) {
	tbl := loadProgram(t, 100, 20)
	s := tbl.Snapshot()

	// Pod 0 to a pod on remote node 5: out the tunnel with the source VNID.
	v := runOn(s, fieldsOf(t, podPort(0), udpFrame(podIP(0), [4]byte{10, 129, 5, 7}, 1000, 2000)))
	if v.NOut != 1 || v.Outputs[0].Port != 1 || v.Outputs[0].TunID != uint64(podVNID(0)) || v.Outputs[0].TunDst != nodeIP(5) {
		t.Fatalf("pod->remote: %+v", v.Outputs[:v.NOut])
	}
	if v.NHits != 6 {
		t.Errorf("pod->remote hits = %d, want 6 (tables 0,20,27,30,31,90)", v.NHits)
	}

	// Pod 0 to pod 50 (same VNID: 50 projects): delivered to its port.
	v = runOn(s, fieldsOf(t, podPort(0), udpFrame(podIP(0), podIP(50), 1, 2)))
	if v.NOut != 1 || v.Outputs[0].Port != podPort(50) || v.Outputs[0].TunDst != ([4]byte{}) {
		t.Fatalf("pod->local same VNID: %+v drop=%v", v.Outputs[:v.NOut], v.Drop)
	}
	// Pod 0 to pod 1 (another VNID): isolated in table 80.
	v = runOn(s, fieldsOf(t, podPort(0), udpFrame(podIP(0), podIP(1), 1, 2)))
	if v.NOut != 0 || v.Drop != DropAction || v.Table != 80 {
		t.Fatalf("pod->local other VNID: nout=%d drop=%v table=%d", v.NOut, v.Drop, v.Table)
	}
	// Spoofed source: dropped in table 20.
	v = runOn(s, fieldsOf(t, podPort(0), udpFrame(podIP(1), podIP(50), 1, 2)))
	if v.NOut != 0 || v.Table != 20 {
		t.Fatalf("spoof: nout=%d drop=%v table=%d", v.NOut, v.Drop, v.Table)
	}
	// Pods may not send to UDP 4789.
	v = runOn(s, fieldsOf(t, podPort(0), udpFrame(podIP(0), podIP(50), 1, 4789)))
	if v.NOut != 0 || v.Table != 20 {
		t.Fatalf("vxlan from pod: nout=%d table=%d", v.NOut, v.Table)
	}
	// ARP from pod 0 for pod 7: to pod 7's port; with a wrong sender MAC: dropped.
	v = runOn(s, fieldsOf(t, podPort(0), arpFrame(podMAC(0), podIP(0), podIP(7))))
	if v.NOut != 1 || v.Outputs[0].Port != podPort(7) {
		t.Fatalf("arp: %+v drop=%v table=%d", v.Outputs[:v.NOut], v.Drop, v.Table)
	}
	v = runOn(s, fieldsOf(t, podPort(0), arpFrame(podMAC(3), podIP(0), podIP(7))))
	if v.NOut != 0 {
		t.Fatal("arp with a spoofed sender MAC was forwarded")
	}
	// VXLAN from known node 3 with VNID of pod 50's project, to pod 50.
	f := fieldsOf(t, 1, udpFrame([4]byte{10, 129, 3, 9}, podIP(50), 1, 2))
	f.TunID, f.TunSrc = uint64(podVNID(50)), nodeIP(3)
	v = runOn(s, f)
	if v.NOut != 1 || v.Outputs[0].Port != podPort(50) {
		t.Fatalf("vxlan in: %+v drop=%v table=%d", v.Outputs[:v.NOut], v.Drop, v.Table)
	}
	// ... and from an unknown node: dropped in table 10.
	f.TunSrc = [4]byte{192, 0, 2, 1}
	if v = runOn(s, f); v.NOut != 0 || v.Table != 10 {
		t.Fatalf("vxlan from unknown node: nout=%d table=%d", v.NOut, v.Table)
	}
	// To the outside world: egress via tun0.
	v = runOn(s, fieldsOf(t, podPort(0), udpFrame(podIP(0), [4]byte{8, 8, 8, 8}, 1, 53)))
	if v.NOut != 1 || v.Outputs[0].Port != 2 {
		t.Fatalf("egress: %+v", v.Outputs[:v.NOut])
	}
	// Counters.
	v.Account(100)
	for _, r := range v.Hits[:v.NHits] {
		if p, b := r.Stats(); p != 1 || b != 100 {
			t.Fatalf("rule %s: stats %d/%d", r, p, b)
		}
	}
}

func newTable(t *testing.T, rules ...string) *Table {
	t.Helper()
	tbl := New(Config{})
	if err := tbl.Add(mustRules(t, strings.Join(rules, "\n"))...); err != nil {
		t.Fatal(err)
	}
	return tbl
}

func TestPriorityAndMasks(t *testing.T) {
	tbl := newTable(t,
		"priority=10, ip, nw_dst=10.0.0.0/8, actions=output:10",
		"priority=20, ip, nw_dst=10.1.0.0/16, actions=output:20",
		"priority=30, ip, nw_dst=10.1.2.0/24, actions=output:30",
		"priority=5, ip, nw_dst=10.1.2.3, actions=output:5",
		"priority=40, udp, tp_dst=0x1000/0xf000, actions=output:40",
		"priority=50, dl_dst=01:00:00:00:00:00/01:00:00:00:00:00, actions=output:50",
		"priority=1, actions=output:1",
	)
	s := tbl.Snapshot()
	cases := []struct {
		dst   [4]byte
		dport uint16
		want  uint32
	}{
		{[4]byte{10, 1, 2, 3}, 1, 30},
		{[4]byte{10, 1, 3, 3}, 1, 20},
		{[4]byte{10, 2, 3, 3}, 1, 10},
		{[4]byte{11, 2, 3, 3}, 1, 1},
		{[4]byte{10, 1, 2, 3}, 0x1234, 40},
		{[4]byte{11, 1, 2, 3}, 0x2234, 1},
	}
	for _, c := range cases {
		v := runOn(s, fieldsOf(t, 99, udpFrame([4]byte{1, 1, 1, 1}, c.dst, 1, c.dport)))
		if v.NOut != 1 || v.Outputs[0].Port != c.want {
			t.Errorf("dst %v port %#x: got %+v, want port %d", c.dst, c.dport, v.Outputs[:v.NOut], c.want)
		}
	}
	f := fieldsOf(t, 99, udpFrame([4]byte{1, 1, 1, 1}, [4]byte{10, 1, 2, 3}, 1, 1))
	f.EthDst[0] = 1
	if v := runOn(s, f); v.Outputs[0].Port != 50 {
		t.Errorf("multicast dl_dst: port %d, want 50", v.Outputs[0].Port)
	}
	// Same table+priority+match replaces.
	if err := tbl.Add(mustRules(t, "priority=30, ip, nw_dst=10.1.2.0/24, actions=output:31")...); err != nil {
		t.Fatal(err)
	}
	if tbl.Len() != 7 {
		t.Fatalf("Len after replace = %d, want 7", tbl.Len())
	}
	v := runOn(tbl.Snapshot(), fieldsOf(t, 99, udpFrame([4]byte{1, 1, 1, 1}, [4]byte{10, 1, 2, 3}, 1, 1)))
	if v.Outputs[0].Port != 31 {
		t.Fatalf("after replace: port %d, want 31", v.Outputs[0].Port)
	}
	// Empty table: miss.
	v = runOn(New(Config{}).Snapshot(), Fields{InPort: 1})
	if v.Drop != DropTableMiss || v.Table != 0 {
		t.Fatalf("empty table: %v %d", v.Drop, v.Table)
	}
}

func TestActions(t *testing.T) {
	tbl := newTable(t,
		"table=0, priority=10, in_port=3, actions=load:0x5->NXM_NX_REG0[],load:0x7->NXM_NX_REG2[],resubmit(,5),output:NXM_NX_REG2[],goto_table:9",
		"table=5, priority=10, reg0=0x5, actions=load:0xabc->NXM_NX_TUN_ID[0..31],set_field:10.0.0.9->tun_dst,output:1,move:NXM_NX_REG0[0..15]->NXM_NX_REG3[16..31]",
		"table=9, priority=10, reg3=0x50000, actions=set_field:0a:00:00:00:00:01->eth_dst,output:4,output:3,resubmit(,7),in_port",
		"table=0, priority=10, in_port=8, actions=resubmit(,0)",
		"table=0, priority=10, in_port=9, actions="+manyOutputs(MaxOutputs+1),
		"table=0, priority=10, in_port=10, actions=note:aa,load:0x1->NXM_NX_REG0[]",
		"table=0, priority=10, in_port=11, actions=goto_table:1",
	)
	s := tbl.Snapshot()
	f := Fields{InPort: 3}
	var v Verdict
	s.Run(&f, &v)
	want := []Output{
		{Port: 1, TunID: 0xabc, TunDst: [4]byte{10, 0, 0, 9}},
		{Port: 7, TunID: 0xabc, TunDst: [4]byte{10, 0, 0, 9}},
		{Port: 4, TunID: 0xabc, TunDst: [4]byte{10, 0, 0, 9}, EthDst: [6]byte{0x0a, 0, 0, 0, 0, 1}, SetEthDst: true},
		{Port: 3, TunID: 0xabc, TunDst: [4]byte{10, 0, 0, 9}, EthDst: [6]byte{0x0a, 0, 0, 0, 0, 1}, SetEthDst: true},
	}
	if v.NOut != len(want) {
		t.Fatalf("outputs %+v, want %+v", v.Outputs[:v.NOut], want)
	}
	for i := range want {
		if v.Outputs[i] != want[i] {
			t.Errorf("output %d = %+v, want %+v", i, v.Outputs[i], want[i])
		}
	}
	if f.Regs[3] != 0x50000 || v.NHits != 3 || v.Drop != DropNone {
		t.Errorf("reg3=%#x hits=%d drop=%v", f.Regs[3], v.NHits, v.Drop)
	}
	// Loop.
	if v = runOn(s, Fields{InPort: 8}); v.Drop != DropLoop || v.NOut != 0 || v.NHits != MaxHits {
		t.Errorf("loop: drop=%v nout=%d hits=%d", v.Drop, v.NOut, v.NHits)
	}
	// Too many outputs: the first MaxOutputs are kept.
	if v = runOn(s, Fields{InPort: 9}); v.NOut != MaxOutputs || v.Drop != DropTooManyOutputs {
		t.Errorf("overflow: nout=%d drop=%v", v.NOut, v.Drop)
	}
	// No output: DropAction in the table of the last rule.
	if v = runOn(s, Fields{InPort: 10}); v.NOut != 0 || v.Drop != DropAction || v.Table != 0 {
		t.Errorf("no output: nout=%d drop=%v table=%d", v.NOut, v.Drop, v.Table)
	}
	// goto a missing table.
	if v = runOn(s, Fields{InPort: 11}); v.Drop != DropTableMiss || v.Table != 1 {
		t.Errorf("goto miss: drop=%v table=%d", v.Drop, v.Table)
	}
}

func TestDelete(t *testing.T) {
	tbl := loadProgram(t, 10, 5)
	total := tbl.Len()
	// Strict: exactly one rule.
	f, err := ParseFilter("table=20, priority=100, in_port=3, ip, nw_src=10.128.0.2")
	if err != nil {
		t.Fatal(err)
	}
	f.Strict = true
	if n := tbl.Delete(f); n != 1 {
		t.Fatalf("strict delete removed %d", n)
	}
	f.Priority = 99
	if n := tbl.Delete(f); n != 0 {
		t.Fatalf("strict delete with another priority removed %d", n)
	}
	// Non-strict: everything at least as specific as "arp, nw_dst=10.128.0.0/16".
	f, _ = ParseFilter("arp, nw_dst=10.128.0.0/16")
	if n := tbl.Delete(f); n != 13 {
		t.Fatalf("non-strict delete removed %d, want 13 (table 40, 3 fixed)", n)
	}
	// Cookie with mask: all remote-node rules.
	if n := tbl.Delete(Filter{Table: -1, Cookie: nodeCookieBase, CookieMask: 0xffffffffffff0000}); n != 15 {
		t.Fatalf("cookie mask delete removed %d, want 15", n)
	}
	// Exact cookie: pod 4's remaining 4 rules.
	if n := tbl.Delete(Filter{Table: -1, Cookie: podCookie(4), CookieMask: ^uint64(0)}); n != 4 {
		t.Fatalf("cookie delete removed %d, want 4", n)
	}
	if got, want := tbl.Len(), total-1-13-15-4; got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
	if got := len(tbl.Rules()); got != tbl.Len() {
		t.Fatalf("Rules() has %d, Len %d", got, tbl.Len())
	}
	// Table filter: all of table 80.
	if n := tbl.Delete(Filter{Table: 80}); n != 54 {
		t.Fatalf("table delete removed %d, want 54", n)
	}
	// Everything.
	tbl.Delete(Filter{Table: -1})
	if tbl.Len() != 0 || len(tbl.Rules()) != 0 {
		t.Fatalf("after delete all: %d", tbl.Len())
	}
	for _, tb := range tbl.Snapshot().tables {
		if tb != nil {
			t.Fatal("empty table left in snapshot")
		}
	}
}

func TestApplyAtomicAndSharing(t *testing.T) {
	tbl := loadProgram(t, 2000, 10)
	old := tbl.Snapshot()
	gen := old.Generation()
	i := 2000
	if err := tbl.Apply(nil, mustRules(t, strings.Join(podRules(i), "\n"))); err != nil {
		t.Fatal(err)
	}
	s := tbl.Snapshot()
	if s.Generation() <= gen {
		t.Fatal("generation did not increase")
	}
	for id := range s.tables {
		switch id {
		case 20, 25, 40, 70:
			if s.tables[id] == old.tables[id] {
				t.Errorf("table %d not copied", id)
			}
			changed := 0
			for k, st := range s.tables[id].subs {
				if st != old.tables[id].subs[k] {
					changed++
					shards := 0
					for x := range st.shards {
						if st.shards[x] != old.tables[id].subs[k].shards[x] {
							shards++
						}
					}
					if shards != 1 {
						t.Errorf("table %d: %d shards copied, want 1", id, shards)
					}
				}
			}
			if changed == 0 || changed > 2 {
				t.Errorf("table %d: %d subtables copied", id, changed)
			}
		default:
			if s.tables[id] != old.tables[id] {
				t.Errorf("untouched table %d was copied", id)
			}
		}
	}
	// The old snapshot is unchanged.
	if old.Len()+5 != s.Len() {
		t.Fatalf("Len old %d new %d", old.Len(), s.Len())
	}
	f := fieldsOf(t, podPort(i), udpFrame(podIP(i), podIP(0), 1, 2))
	if v := runOn(old, f); v.NOut != 0 {
		t.Fatal("old snapshot sees the new pod")
	}
	// Atomic replace: delete pod i by cookie and re-add it on another port.
	rs := mustRules(t, strings.ReplaceAll(strings.Join(podRules(i), "\n"), "in_port=2003", "in_port=5000"))
	if err := tbl.Apply([]Filter{{Table: -1, Cookie: podCookie(i), CookieMask: ^uint64(0)}}, rs); err != nil {
		t.Fatal(err)
	}
	if tbl.Len() != s.Len() {
		t.Fatalf("Len after replace %d, want %d", tbl.Len(), s.Len())
	}
	f.InPort = 5000
	if v := runOn(tbl.Snapshot(), f); v.NOut != 0 && v.Outputs[0].Port == podPort(0) {
		// pod 2000's VNID is 10, pod 0's is 10: delivered.
	} else {
		t.Fatalf("moved pod not forwarded: %+v %v %d", v.Outputs[:v.NOut], v.Drop, v.Table)
	}
	// Invalid rule: nothing changes.
	bad := &Rule{Table: 3, Actions: []Action{{Kind: ActGotoTable, Table: 2}}}
	g := tbl.Snapshot().Generation()
	if err := tbl.Add(bad); err == nil {
		t.Fatal("backward goto accepted")
	}
	if tbl.Snapshot().Generation() != g {
		t.Fatal("failed Add published")
	}
}

func TestInPortRule(t *testing.T) {
	tbl := newTable(t,
		"priority=10, in_port=3, actions=output:3,output:4",
		"priority=10, in_port=4, actions=output:4",
		"priority=10, in_port=5, actions=in_port",
		"priority=10, in_port=6, actions=load:0x6->NXM_NX_REG2[],output:NXM_NX_REG2[]",
	)
	s := tbl.Snapshot()
	if v := runOn(s, Fields{InPort: 3}); v.NOut != 1 || v.Outputs[0].Port != 4 {
		t.Errorf("in_port 3: %+v", v.Outputs[:v.NOut])
	}
	if v := runOn(s, Fields{InPort: 4}); v.NOut != 0 || v.Drop != DropAction {
		t.Errorf("in_port 4: nout %d drop %v", v.NOut, v.Drop)
	}
	if v := runOn(s, Fields{InPort: 5}); v.NOut != 1 || v.Outputs[0].Port != 5 {
		t.Errorf("in_port action: %+v", v.Outputs[:v.NOut])
	}
	if v := runOn(s, Fields{InPort: 6}); v.NOut != 0 {
		t.Errorf("output:reg2 to in_port: %+v", v.Outputs[:v.NOut])
	}
}

func TestCache(t *testing.T) {
	tbl := loadProgram(t, 100, 20)
	c := NewCache(64)
	f0 := fieldsOf(t, podPort(0), udpFrame(podIP(0), [4]byte{10, 129, 5, 7}, 1000, 2000))
	var v Verdict
	f := f0
	if c.Run(tbl.Snapshot(), &f, &v) {
		t.Fatal("hit on an empty cache")
	}
	want := v
	f = f0
	if !c.Run(tbl.Snapshot(), &f, &v) {
		t.Fatal("miss on a repeated packet")
	}
	if v.NOut != want.NOut || v.Outputs[0] != want.Outputs[0] || v.NHits != want.NHits || v.Hits[5] != want.Hits[5] {
		t.Fatalf("cached verdict differs: %+v vs %+v", v.Outputs[:v.NOut], want.Outputs[:want.NOut])
	}
	// Move remote node 5: the cache must see the new snapshot.
	rs := mustRules(t, strings.ReplaceAll(strings.Join(remoteRules(5), "\n"), ip(nodeIP(5)), "10.99.0.1"))
	if err := tbl.Apply([]Filter{{Table: -1, Cookie: nodeCookieBase + 5, CookieMask: ^uint64(0)}}, rs); err != nil {
		t.Fatal(err)
	}
	f = f0
	if c.Run(tbl.Snapshot(), &f, &v) {
		t.Fatal("hit after an update")
	}
	if v.Outputs[0].TunDst != [4]byte{10, 99, 0, 1} {
		t.Fatalf("stale tunnel dst %v", v.Outputs[0].TunDst)
	}
	f = f0
	if !c.Run(tbl.Snapshot(), &f, &v) || v.Outputs[0].TunDst != [4]byte{10, 99, 0, 1} {
		t.Fatal("no hit after refill")
	}
	if h, m := c.Stats(); h != 2 || m != 2 {
		t.Fatalf("stats %d/%d", h, m)
	}
	// Drops are cached too.
	f = Fields{InPort: 77}
	c.Run(tbl.Snapshot(), &f, &v)
	f = Fields{InPort: 77}
	if !c.Run(tbl.Snapshot(), &f, &v) || v.NOut != 0 || v.Drop == DropNone {
		t.Fatal("drop not cached")
	}
}

func TestTrace(t *testing.T) {
	tbl := loadProgram(t, 10, 10)
	if err := tbl.Add(mustRules(t, "table=60, priority=300, ip, nw_dst=172.30.0.10, actions=resubmit(,61),output:2\ntable=61, priority=1, actions=load:0x1->NXM_NX_REG5[]")...); err != nil {
		t.Fatal(err)
	}
	f, err := ParseFields("in_port=3,udp,nw_src=10.128.0.2,nw_dst=10.129.5.7,udp_dst=53")
	if err != nil {
		t.Fatal(err)
	}
	tr := tbl.Snapshot().Trace(f)
	out := tr.String()
	for _, want := range []string{
		"Flow: in_port=3,udp,nw_src=10.128.0.2,nw_dst=10.129.5.7,tp_dst=53",
		" 0. ip, priority 100\n    goto_table:20\n",
		"20. in_port=3,ip,nw_src=10.128.0.2, priority 100, cookie 0x100000000\n    load:0xa->NXM_NX_REG0[]\n     -> reg0=0xa (was 0x0)\n    goto_table:27\n",
		"90. ip,nw_dst=10.129.5.0/24, priority 100, cookie 0xa000005\n",
		"set_field:10.0.1.7->tun_dst\n     -> tun_dst=10.0.1.7\n",
		"output:1\n     -> output to port 1 (tunnel tun_id=0xa dst=10.0.1.7)\n",
		"Final flow: in_port=3,udp,reg0=10,tun_id=0xa,tun_dst=10.0.1.7,",
		"Datapath actions: set(tunnel(tun_id=0xa,dst=10.0.1.7)),1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
	if len(tr.Outputs()) != 1 || tr.Outputs()[0].TunDst != nodeIP(5) {
		t.Errorf("trace outputs %+v", tr.Outputs())
	}
	if _, err := json.Marshal(tr); err != nil {
		t.Fatal(err)
	}
	// Resubmit and miss.
	f, _ = ParseFields("in_port=3,ip,nw_src=10.128.0.2,nw_dst=172.30.0.10")
	out = tbl.Snapshot().Trace(f).String()
	for _, want := range []string{"    resubmit(,61)\n    61. priority 1\n        load:0x1->NXM_NX_REG5[]\n", "    output:2\n     -> output to port 2\n", "Datapath actions: 2\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
	f, _ = ParseFields("in_port=3,ip,nw_src=10.128.0.99")
	tr = tbl.Snapshot().Trace(f)
	if tr.Drop == "" || !strings.Contains(tr.String(), "Datapath actions: drop") {
		t.Errorf("spoof trace:\n%s", tr.String())
	}
	tr = New(Config{}).Snapshot().Trace(Fields{InPort: 1})
	if !strings.Contains(tr.String(), " 0. No match.\n    drop\n") || tr.Drop != "table_miss" {
		t.Errorf("miss trace:\n%s", tr.String())
	}
}

func TestExtract(t *testing.T) {
	fr := udpFrame([4]byte{1, 2, 3, 4}, [4]byte{5, 6, 7, 8}, 10, 20)
	f := Fields{InPort: 7, Regs: [8]uint32{1}, TunID: 9, TpSrc: 99, ArpOp: 3}
	if !Extract(fr, &f) {
		t.Fatal("Extract failed")
	}
	want := Fields{InPort: 7, Regs: [8]uint32{1}, TunID: 9, EthType: 0x0800, NwProto: 17,
		NwSrc: [4]byte{1, 2, 3, 4}, NwDst: [4]byte{5, 6, 7, 8}, TpSrc: 10, TpDst: 20,
		EthSrc: [6]byte{0x0a, 0x58, 1, 2, 3, 4}, EthDst: [6]byte{0x0a, 0x58, 5, 6, 7, 8}}
	if f != want {
		t.Fatalf("got %+v\nwant %+v", f, want)
	}
	// Truncated L4: no ports.
	short := fr[:14+20+4]
	short[14+3] = 24 // total length
	Extract(short, &f)
	if f.TpSrc != 0 || f.NwProto != 17 {
		t.Fatalf("truncated udp: %+v", f)
	}
	// Non-first fragment: no ports.
	fr2 := udpFrame([4]byte{1, 2, 3, 4}, [4]byte{5, 6, 7, 8}, 10, 20)
	fr2[14+7] = 1
	Extract(fr2, &f)
	if f.TpSrc != 0 || f.NwSrc != [4]byte{1, 2, 3, 4} {
		t.Fatalf("fragment: %+v", f)
	}
	// ICMP echo: type/code in tp_src/tp_dst.
	fr3 := udpFrame([4]byte{1, 2, 3, 4}, [4]byte{5, 6, 7, 8}, 0x0800, 0)
	fr3[14+9] = 1
	Extract(fr3, &f)
	if f.NwProto != 1 || f.TpSrc != 8 || f.TpDst != 0 {
		t.Fatalf("icmp: %+v", f)
	}
	// ARP.
	Extract(arpFrame(podMAC(1), podIP(1), podIP(2)), &f)
	if f.ArpOp != 1 || f.NwProto != 1 || f.NwSrc != podIP(1) || f.NwDst != podIP(2) || f.ArpSha != podMAC(1) || f.TpSrc != 0 {
		t.Fatalf("arp: %+v", f)
	}
	// Too short.
	if Extract(fr[:13], &f) {
		t.Fatal("13-byte frame accepted")
	}
	if f.EthType != 0 || f.NwSrc != ([4]byte{}) {
		t.Fatal("fields not zeroed on failure")
	}
}

// A cache starts at MinCacheSize entries, grows fourfold each time it has
// missed as often as it has entries, never past its size, keeps giving
// the pipeline's verdicts, and Shrink takes it back to its start.
func TestCacheGrowsAndShrinks(t *testing.T) {
	tbl := loadProgram(t, 100, 20)
	keepTpSrc(t, tbl) // a flow is a source port
	s := tbl.Snapshot()
	c := NewCache(1024)
	if c.Len() != MinCacheSize {
		t.Fatalf("a new cache has %d entries, want %d", c.Len(), MinCacheSize)
	}
	flow := func(i int) Fields {
		return fieldsOf(t, podPort(0), udpFrame(podIP(0), [4]byte{10, 129, 5, 7}, uint16(1000+i), 2000))
	}
	var v, want Verdict
	sizes := []int{c.Len()}
	for i := range 4000 {
		f := flow(i)
		c.Run(s, &f, &v)
		if n := c.Len(); n != sizes[len(sizes)-1] {
			sizes = append(sizes, n)
		}
	}
	if fmt.Sprint(sizes) != "[64 256 1024]" {
		t.Errorf("sizes %v, want [64 256 1024]", sizes)
	}
	f := flow(7)
	s.Run(&f, &want)
	for range 2 {
		f = flow(7)
		c.Run(s, &f, &v)
	}
	f = flow(7)
	if hit := c.Run(s, &f, &v); !hit || v.NOut != want.NOut || v.Outputs[0] != want.Outputs[0] {
		t.Errorf("after growing: hit %v, outputs %+v, want %+v", hit, v.Outputs[:v.NOut], want.Outputs[:want.NOut])
	}
	c.Shrink()
	if c.Len() != MinCacheSize {
		t.Errorf("after Shrink: %d entries", c.Len())
	}
	if f = flow(7); c.Run(s, &f, &v) {
		t.Error("a hit right after Shrink")
	}
	if small := NewCache(16); small.Len() != 16 {
		t.Errorf("NewCache(16) has %d entries", small.Len())
	}
}

func TestAllocs(t *testing.T) {
	tbl := loadProgram(t, 100, 20)
	s := tbl.Snapshot()
	fr := udpFrame(podIP(0), [4]byte{10, 129, 5, 7}, 1000, 2000)
	var f Fields
	var v Verdict
	if n := testing.AllocsPerRun(100, func() { Extract(fr, &f) }); n != 0 {
		t.Errorf("Extract: %v allocs", n)
	}
	f0 := fieldsOf(t, podPort(0), fr)
	if n := testing.AllocsPerRun(100, func() { f = f0; s.Run(&f, &v); v.Account(len(fr)) }); n != 0 {
		t.Errorf("Run: %v allocs", n)
	}
	c := NewCache(1024)
	if n := testing.AllocsPerRun(100, func() { f = f0; c.Run(s, &f, &v) }); n != 0 {
		t.Errorf("Cache.Run: %v allocs", n)
	}
}

func FuzzExtract(f *testing.F) {
	f.Add(udpFrame([4]byte{1, 2, 3, 4}, [4]byte{5, 6, 7, 8}, 10, 20))
	f.Add(arpFrame(podMAC(1), podIP(1), podIP(2)))
	f.Add([]byte{})
	f.Add(make([]byte, 14))
	tbl := loadProgram(f, 10, 5)
	f.Fuzz(func(t *testing.T, b []byte) {
		fl := Fields{InPort: 3}
		ok := Extract(b, &fl)
		if ok != (len(b) >= 14) {
			t.Fatalf("Extract(%d bytes) = %v", len(b), ok)
		}
		var v Verdict
		tbl.Snapshot().Run(&fl, &v)
	})
}

// TestConcurrentReaders runs lookups while a writer adds and removes pods;
// run with -race.
func TestConcurrentReaders(t *testing.T) {
	tbl := loadProgram(t, 200, 10)
	done := make(chan struct{})
	errc := make(chan string, 2)
	for w := 0; w < 2; w++ {
		go func() {
			c := NewCache(256)
			f0 := fieldsOf(t, podPort(0), udpFrame(podIP(0), podIP(50), 1, 2))
			var v Verdict
			for {
				select {
				case <-done:
					errc <- ""
					return
				default:
				}
				f := f0
				c.Run(tbl.Snapshot(), &f, &v)
				v.Account(60)
				if v.NOut != 1 || v.Outputs[0].Port != podPort(50) {
					errc <- "pod 0 -> pod 50 not delivered during updates"
					return
				}
			}
		}()
	}
	for k := 0; k < 200; k++ {
		i := 1000 + k%7
		if err := tbl.Add(mustRules(t, strings.Join(podRules(i), "\n"))...); err != nil {
			t.Fatal(err)
		}
		tbl.Delete(Filter{Table: -1, Cookie: podCookie(i), CookieMask: ^uint64(0)})
	}
	close(done)
	for w := 0; w < 2; w++ {
		if e := <-errc; e != "" {
			t.Fatal(e)
		}
	}
}

// manyOutputs returns n output actions to ports 100 onwards.
func manyOutputs(n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = "output:" + strconv.Itoa(100+i)
	}
	return strings.Join(out, ",")
}
