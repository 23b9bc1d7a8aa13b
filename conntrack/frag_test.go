package conntrack

import (
	"testing"
	"time"
)

// fragment splits an unfragmented IPv4 packet (20-byte header) into
// fragments of at most mtu bytes, as a host would send them.
func fragment(b []byte, mtu int) [][]byte {
	data := b[20:]
	per := (mtu - 20) &^ 7
	var out [][]byte
	for off := 0; off < len(data); off += per {
		n := min(per, len(data)-off)
		f := make([]byte, 20+n)
		copy(f, b[:20])
		copy(f[20:], data[off:off+n])
		put16(f, 2, uint16(20+n))
		fo := uint16(off / 8)
		if off+n < len(data) {
			fo |= 0x2000
		}
		put16(f, 6, fo)
		ipHeaderSum(f)
		out = append(out, f)
	}
	return out
}

// reassemble joins in-order fragments into the datagram they came from.
func reassemble(frags [][]byte) []byte {
	b := append([]byte(nil), frags[0][:20]...)
	for _, f := range frags {
		b = append(b, f[20:]...)
	}
	put16(b, 2, uint16(len(b)))
	put16(b, 6, 0)
	ipHeaderSum(b)
	return b
}

// firewall runs b through a stateful rule set in zone 1, as OVS would:
//
//	table=0, ip, ct_state=-trk, actions=ct(zone=1,table=1)
//	table=1, in_port=inside, ct_state=+trk+new, actions=ct(commit,zone=1),output:outside
//	table=1, ct_state=+trk+est, actions=output:<the other side>
//	table=1, ct_state=+trk+rel, actions=output:<the other side>
//	table=1, priority=0, actions=drop
//
// and reports whether the packet is delivered.
func firewall(tr *Tracker, now Time, b []byte, inside bool) bool {
	var m Meta
	tr.Process(now, b, 0, &Action{Zone: 1}, &m)
	switch {
	case m.State&StateInv != 0:
		return false
	case m.State&StateNew != 0 && inside:
		tr.Process(now, b, 0, &Action{Zone: 1, Commit: true}, &m)
		return m.State&StateInv == 0
	case m.State&(StateEst|StateRel) != 0:
		return true
	}
	return false
}

func TestFragmentedPingThroughFirewall(t *testing.T) {
	tr, c := newTracker(t, Config{})
	req := build(hdr{src: pod, dst: far, proto: ProtoICMP, icmpType: icmpEcho, icmpID: 9, payload: 3000, ipID: 100})
	rep := build(hdr{src: far, dst: pod, proto: ProtoICMP, icmpType: icmpEchoReply, icmpID: 9, payload: 3000, ipID: 200})
	reqs, reps := fragment(req, 1500), fragment(rep, 1500)
	if len(reqs) != 3 {
		t.Fatalf("%d fragments", len(reqs))
	}
	for i, f := range reqs {
		if !firewall(tr, c.Now(), f, true) {
			t.Errorf("request fragment %d dropped", i)
		}
	}
	for i, f := range reps {
		if !firewall(tr, c.Now(), f, false) {
			t.Errorf("reply fragment %d dropped", i)
		}
	}
	// An unsolicited big ping from outside stays out, every fragment.
	in := fragment(build(hdr{src: far, dst: pod, proto: ProtoICMP, icmpType: icmpEcho, icmpID: 10, payload: 3000, ipID: 300}), 1500)
	for i, f := range in {
		if firewall(tr, c.Now(), f, false) {
			t.Errorf("unsolicited fragment %d delivered", i)
		}
	}
	// Later fragments: 2 requests through two ct actions, 2 replies and 2
	// unsolicited ones through one; a record per datagram and ct action.
	if st := tr.Stats(); st.Pending != 4 || st.Fragment != 2*2+2+2 {
		t.Errorf("pending %d, later fragments %d", st.Pending, st.Fragment)
	}
	c.advance(time.Second)
	tr.Sweep(c.Now(), 0)
	if st := tr.Stats(); st.Pending != 0 {
		t.Errorf("%d fragment records a second after their datagrams were complete", st.Pending)
	}
	c.advance(31 * time.Second)
	tr.Sweep(c.Now(), 0)
	if st := tr.Stats(); st.Pending != 0 {
		t.Errorf("%d fragment records after they expired", st.Pending)
	}
}

func TestFragmentsOutOfOrder(t *testing.T) {
	tr, c := newTracker(t, Config{})
	frags := fragment(udp4(pod, 5000, far, 53, 4000), 1500)
	run(t, tr, c, []step{
		{name: "a later fragment first", pkt: frags[1], act: commit, state: trkInv, reason: ReasonFragment},
		{name: "first fragment", pkt: frags[0], act: commit, state: trkNew},
		{name: "later fragment again", pkt: frags[1], act: commit, state: trkNew},
		{name: "last fragment", pkt: frags[2], act: commit, state: trkNew},
		{name: "a duplicate just after", pkt: frags[1], act: commit, state: trkNew},
	})
	c.advance(time.Second)
	run(t, tr, c, []step{
		{name: "after the record ended", pkt: frags[1], act: commit, state: trkInv, reason: ReasonFragment},
		{name: "another zone", pkt: frags[1], act: Action{Zone: 2}, state: trkInv, reason: ReasonFragment},
	})
}

func TestFragmentsNAT(t *testing.T) {
	tr, c := newTracker(t, Config{})
	// Another flow holds pod2's reply tuple on the node address, so the
	// fragmented datagram's port moves: the first fragment's UDP checksum
	// must come out right for the whole datagram.
	run(t, tr, c, []step{{name: "holder", pkt: udp4(pod, 5000, far, 53, 10), act: snat, state: trkNew | StateSNAT}})
	dgram := build(hdr{src: pod2, dst: far, proto: ProtoUDP, sport: 5000, dport: 53, payload: 4000, ipID: 77})
	frags := fragment(dgram, 1500)
	var out [][]byte
	for i, f := range frags {
		f = append([]byte(nil), f...)
		var m Meta
		a := snat
		if i > 0 {
			a = natBare
		}
		if r := tr.Process(c.Now(), f, 0, &a, &m); r != ReasonNone || m.State != trkNew|StateSNAT {
			t.Fatalf("fragment %d: %v %v", i, m.State, r)
		}
		if csumRef(f[:20]) != 0 {
			t.Errorf("fragment %d: IP header checksum", i)
		}
		out = append(out, f)
	}
	whole := reassemble(out)
	port := get16(whole, 20)
	if port == 5000 {
		t.Fatal("the port did not move")
	}
	want := build(hdr{src: node, dst: far, proto: ProtoUDP, sport: port, dport: 53, payload: 4000, ipID: 77})
	if string(whole[20:]) != string(want[20:]) || string(whole[12:20]) != string(want[12:20]) {
		t.Errorf("reassembled datagram differs from the translated one")
	}
	if err := checkChecksums(whole); err != nil {
		t.Error(err)
	}
	// The reply, fragmented, comes back translated.
	back := fragment(build(hdr{src: far, dst: node, proto: ProtoUDP, sport: 53, dport: port, payload: 3000, ipID: 78}), 1000)
	for i, f := range back {
		var m Meta
		if tr.Process(c.Now(), f, 0, &natBare, &m); m.State != trkEstRpl|StateDNAT {
			t.Errorf("reply fragment %d: %v", i, m.State)
		}
		back[i] = f
	}
	if got, want := reassemble(back), build(hdr{src: far, dst: pod2, proto: ProtoUDP, sport: 53, dport: 5000, payload: 3000, ipID: 78}); string(got) != string(want) {
		t.Errorf("reassembled reply\n got %x\nwant %x", got[:28], want[:28])
	}
}

// TestFragmentsTwoActionsOneZone: a fragmented ping to a virtual address
// through ct(nat,zone=7,table=1) and then ct(commit,zone=7,nat(dst=…)),
// as a DNAT rule set has it. At the first action the first fragment is
// +new and untranslated; at the second it is committed and translated.
// Each later fragment must get the same at the same action — not the
// commit's translation already at the first (the rules would send it
// elsewhere) — and come out translated like the first.
func TestFragmentsTwoActionsOneZone(t *testing.T) {
	tr, c := newTracker(t, Config{})
	const vipS = "10.96.0.10"
	vip, backend := ip4(vipS), ip4("10.128.0.9")
	first := Action{Zone: 7, NAT: NAT{Kind: NATBare}}
	commitDNAT := Action{Zone: 7, Commit: true, NAT: NAT{Kind: NATDst, MinAddr: backend}}
	ping := build(hdr{src: pod, dst: vipS, proto: ProtoICMP, icmpType: icmpEcho, icmpID: 3, payload: 3000, ipID: 42})
	for i, f := range fragment(ping, 1500) {
		var m Meta
		if tr.Process(c.Now(), f, 0, &first, &m); m.State != trkNew || [4]byte(f[16:20]) != vip {
			t.Fatalf("fragment %d at the first action: %v, to %v", i, m.State, f[16:20])
		}
		if tr.Process(c.Now(), f, 0, &commitDNAT, &m); m.State != trkNew|StateDNAT || [4]byte(f[16:20]) != backend || csumRef(f[:20]) != 0 {
			t.Fatalf("fragment %d at the commit: %v, to %v", i, m.State, f[16:20])
		}
		// ct_clear starts the count again: a later fragment cleared
		// and tracked anew in the zone is its first action again.
		m.Clear()
		if i > 0 {
			g := append([]byte(nil), f...)
			copy(g[16:20], vip[:])
			refreshChecksums(g, false)
			if tr.Process(c.Now(), g, 0, &first, &m); [4]byte(g[16:20]) != vip {
				t.Errorf("fragment %d after ct_clear: translated at the first action", i)
			}
		}
	}
}

func TestFragmentTableBounded(t *testing.T) {
	tr, c := newTracker(t, Config{MaxFragments: 16})
	for i := range 200 {
		f := fragment(build(hdr{src: pod, dst: far, proto: ProtoUDP, sport: 5000, dport: 53, payload: 3000, ipID: uint16(i)}), 1500)
		var m Meta
		tr.Process(c.Now(), f[0], 0, &lookup, &m)
	}
	if n := tr.Stats().Pending; n > 16 || n < 8 {
		t.Errorf("%d fragment records in a table of 16", n)
	}
}

// TestFragmentPorts: a later fragment carries the ports its first fragment
// left the same ct action with (after translation), in both directions; a
// first fragment, an unfragmented packet and an ICMP fragment have none,
// also when they reuse a Meta a later fragment filled.
func TestFragmentPorts(t *testing.T) {
	tr, c := newTracker(t, Config{})
	run(t, tr, c, []step{{name: "holder", pkt: udp4(pod, 5000, far, 53, 10), act: snat, state: trkNew | StateSNAT}})
	var m Meta
	check := func(what string, b []byte, a Action, sport, dport uint16, want bool) {
		t.Helper()
		m.Clear()
		tr.Process(c.Now(), b, 0, &a, &m)
		sp, dp, ok := m.FragmentPorts()
		if ok != want || (ok && (sp != sport || dp != dport)) {
			t.Errorf("%s: ports %d → %d (%v), want %d → %d (%v)", what, sp, dp, ok, sport, dport, want)
		}
	}
	frags := fragment(build(hdr{src: pod2, dst: far, proto: ProtoUDP, sport: 5000, dport: 53, payload: 3000, ipID: 90}), 1500)
	check("first fragment", frags[0], snat, 0, 0, false)
	port := get16(frags[0], 20) // as translated
	if port == 5000 {
		t.Fatal("the port did not move")
	}
	for i, f := range frags[1:] {
		check("later fragment "+string(rune('1'+i)), f, natBare, port, 53, true)
	}
	// m now holds a later fragment's ports: an unfragmented packet drops them.
	tr.Process(c.Now(), udp4(pod2, 5001, far, 53, 10), 0, &Action{}, &m)
	if _, _, ok := m.FragmentPorts(); ok {
		t.Error("an unfragmented packet after a later fragment kept its ports")
	}
	back := fragment(build(hdr{src: far, dst: node, proto: ProtoUDP, sport: 53, dport: port, payload: 3000, ipID: 91}), 1000)
	check("reply's first fragment", back[0], natBare, 0, 0, false)
	for _, f := range back[1:] {
		check("reply's later fragment", f, natBare, 53, 5000, true)
	}
	ping := fragment(build(hdr{src: pod, dst: far, proto: ProtoICMP, payload: 3000, ipID: 92}), 1500)
	check("ICMP first fragment", ping[0], Action{Zone: 3}, 0, 0, false)
	check("ICMP later fragment", ping[1], Action{Zone: 3}, 0, 0, false)
}
