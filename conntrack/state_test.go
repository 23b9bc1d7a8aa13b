package conntrack

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// dump returns the entries as dpctl/dump-conntrack lines, sorted.
func dump(tr *Tracker, c *clock, stats bool) []string {
	var out []string
	for e := range tr.All(c.Now()) {
		out = append(out, string(e.AppendText(nil, stats)))
	}
	slices.Sort(out)
	return out
}

func TestZones(t *testing.T) {
	tr, c := newTracker(t, Config{})
	out := udp4("10.1.1.1", 1, "10.1.1.2", 2, 10)
	back := udp4("10.1.1.2", 2, "10.1.1.1", 1, 10)
	z1, z2 := Action{Zone: 1, Commit: true}, Action{Zone: 2}
	run(t, tr, c, []step{
		{name: "commit in zone 1", pkt: out, act: z1, state: trkNew},
		{name: "zone 2 does not know it", pkt: back, act: z2, state: trkNew},
		{name: "zone 2 sees a new one", pkt: out, act: z2, state: trkNew},
		{name: "zone 1 knows the reply", pkt: back, act: Action{Zone: 1}, state: trkEstRpl},
	})
	var m Meta
	tr.Process(c.Now(), back, 0, &Action{Zone: 1}, &m)
	if m.Zone != 1 {
		t.Errorf("ct_zone %d", m.Zone)
	}
	tr.Process(c.Now(), back, 0, &Action{Zone: 2, Commit: true}, &m)
	if m.Zone != 2 || m.State != trkNew {
		t.Errorf("entering zone 2 from zone 1: zone %d state %v, want 2 +trk+new", m.Zone, m.State)
	}
	want := []string{
		"udp,orig=(src=10.1.1.1,dst=10.1.1.2,sport=1,dport=2),reply=(src=10.1.1.2,dst=10.1.1.1,sport=2,dport=1),zone=1",
		"udp,orig=(src=10.1.1.2,dst=10.1.1.1,sport=2,dport=1),reply=(src=10.1.1.1,dst=10.1.1.2,sport=1,dport=2),zone=2",
	}
	if got := dump(tr, c, false); !slices.Equal(got, want) {
		t.Errorf("dump\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := tr.FlushZone(1); n != 1 || tr.Len() != 1 {
		t.Errorf("FlushZone(1) removed %d, %d left", n, tr.Len())
	}
	if l, n := tr.ZoneLimit(2); l != 0 || n != 1 {
		t.Errorf("zone 2: limit %d count %d", l, n)
	}
}

func TestMarkAndLabel(t *testing.T) {
	tr, c := newTracker(t, Config{})
	out := udp4("10.1.1.2", 2, "10.1.1.1", 1, 10)
	back := udp4("10.1.1.1", 1, "10.1.1.2", 2, 10)
	set := Action{Zone: 5, Commit: true, SetMark: true, Mark: 0xaa, MarkMask: 0xff,
		SetLabel: true, Label: Label{Lo: 0xaa00000000}, LabelMask: Label{Lo: 0xff00000000}}
	var m Meta
	tr.Process(c.Now(), out, 0, &set, &m)
	if m.Mark != 0xaa || m.Label != (Label{Lo: 0xaa00000000}) {
		t.Errorf("after commit: mark %#x label %v", m.Mark, m.Label)
	}
	m = Meta{}
	tr.Process(c.Now(), back, 0, &Action{Zone: 5}, &m)
	if m.State != trkEstRpl || m.Mark != 0xaa || m.Label != (Label{Lo: 0xaa00000000}) {
		t.Errorf("reply: %v mark %#x label %v", m.State, m.Mark, m.Label)
	}
	// A masked set keeps the other bits.
	m = Meta{}
	tr.Process(c.Now(), out, 0, &Action{Zone: 5, Commit: true, SetMark: true, Mark: 0x100, MarkMask: 0xf00,
		SetLabel: true, Label: Label{Hi: 1 << 63}, LabelMask: Label{Hi: 1 << 63}}, &m)
	if m.Mark != 0x1aa || m.Label != (Label{Hi: 1 << 63, Lo: 0xaa00000000}) {
		t.Errorf("masked set: mark %#x label %v", m.Mark, m.Label)
	}
	want := "udp,orig=(src=10.1.1.2,dst=10.1.1.1,sport=2,dport=1),reply=(src=10.1.1.1,dst=10.1.1.2,sport=1,dport=2),zone=5,mark=426,labels=0x8000000000000000000000aa00000000"
	if got := dump(tr, c, false); len(got) != 1 || got[0] != want {
		t.Errorf("dump %q\nwant %q", got, want)
	}
	// Without a connection the mark and label are zero.
	m = Meta{Mark: 9, Label: Label{Lo: 9}}
	tr.Process(c.Now(), udp4("10.1.1.3", 2, "10.1.1.1", 1, 10), 0, &Action{Zone: 5, SetMark: true, Mark: 3, MarkMask: 3}, &m)
	if m.Mark != 0 || !m.Label.IsZero() {
		t.Errorf("untracked connection: mark %#x label %v", m.Mark, m.Label)
	}
	if s := (Label{Lo: 0x0102}).String(); s != "0x102" {
		t.Errorf("label %s", s)
	}
}

func TestCachedConnection(t *testing.T) {
	tr, c := established(t)
	a := Action{}
	var m Meta
	tr.Process(c.Now(), tcpc(tcpACK, 1001, 5001, 10), 0, &a, &m)
	if m.State != trkEst || m.conn == 0 {
		t.Fatalf("first ct: %v, cached %d", m.State, m.conn)
	}
	before := entryTimeout(t, tr, c)
	c.advance(10 * time.Second)
	// A second ct in the same zone is not looked up again: no state
	// update (the timeout is not refreshed), the packet is not checked
	// again (this one would be out of window), the mark is applied.
	bad := tcpc(tcpACK, 1001+1<<30, 5001, 10)
	r := tr.Process(c.Now(), bad, 0, &Action{Commit: true, SetMark: true, Mark: 7, MarkMask: ^uint32(0)}, &m)
	if r != ReasonNone || m.State != trkEst || m.Mark != 7 {
		t.Errorf("second ct: %v %v mark %d", r, m.State, m.Mark)
	}
	if after := entryTimeout(t, tr, c); after != before-10*time.Second {
		t.Errorf("timeout refreshed by the cached ct: %v then %v", before, after)
	}
	// force always looks up.
	r = tr.Process(c.Now(), bad, 0, &Action{Commit: true, Force: true}, &m)
	if r != ReasonTCPWindow || m.State != trkInv {
		t.Errorf("force: %v %v", r, m.State)
	}
	// A stale cache (the entry flushed and reused) is not trusted.
	m = Meta{}
	tr.Process(c.Now(), tcpc(tcpACK, 1001, 5001, 10), 0, &a, &m)
	tr.Flush()
	run(t, tr, c, []step{{name: "other flow reuses the slot", pkt: udp4(cli, 1, srv, 2, 0), act: commit, state: trkNew}})
	tr.Process(c.Now(), tcpc(tcpACK, 1001, 5001, 10), 0, &a, &m)
	if m.State != trkNew || m.Orig().Proto != ProtoTCP {
		t.Errorf("stale cache: %v orig %+v", m.State, m.Orig())
	}
}

func TestForce(t *testing.T) {
	tr, c := newTracker(t, Config{})
	fwd, rev := udp4(cli, 1000, srv, 53, 10), udp4(srv, 53, cli, 1000, 10)
	run(t, tr, c, []step{
		{name: "commit", pkt: fwd, act: commit, state: trkNew},
		{name: "reply, force", pkt: rev, act: Action{Commit: true, Force: true}, state: trkNew},
		{name: "the old direction is the reply now", pkt: fwd, act: lookup, state: trkEstRpl},
		{name: "force in the original direction changes nothing", pkt: rev, act: Action{Commit: true, Force: true}, state: trkEst},
	})
	if got := dump(tr, c, false); len(got) != 1 || !strings.HasPrefix(got[0], "udp,orig=(src=10.0.0.2,dst=10.0.0.1,sport=53,dport=1000)") {
		t.Errorf("dump %q", got)
	}
}

func TestNATTwiceInAZone(t *testing.T) {
	tr, c := newTracker(t, Config{})
	dn := Action{Zone: 1, Commit: true, NAT: NAT{Kind: NATDst, MinAddr: ip4(bknd)}}
	b := tcp4(cliIP, 50000, vip, 80, tcpSYN, 1, 0, 0)
	var m Meta
	tr.Process(c.Now(), b, 0, &dn, &m)
	if m.State != trkNew|StateDNAT || m.conn != 0 {
		t.Fatalf("commit: %v, cache %d", m.State, m.conn)
	}
	// ct(zone=1,nat) again: found through its translated header, and not
	// translated twice.
	tr.Process(c.Now(), b, 0, &Action{Zone: 1, NAT: NAT{Kind: NATBare}}, &m)
	if want := tcp4(cliIP, 50000, bknd, 80, tcpSYN, 1, 0, 0); string(b) != string(want) || m.State != trkNew|StateDNAT {
		t.Errorf("second ct(nat): %v, packet %x", m.State, b[12:24])
	}
	if want := (Tuple{Src: ip4(cliIP), Dst: ip4(vip), SrcPort: 50000, DstPort: 80, Proto: ProtoTCP}); m.Orig() != want {
		t.Errorf("orig %+v", m.Orig())
	}
	// In another zone, the translated packet is a connection of its own.
	tr.Process(c.Now(), b, 0, &Action{Zone: 2, Commit: true}, &m)
	if m.State != trkNew || m.Orig().Dst != ip4(bknd) || tr.Len() != 2 {
		t.Errorf("zone 2: %v orig %+v, %d entries", m.State, m.Orig(), tr.Len())
	}
	// An out-of-window packet of the translated connection is +inv and
	// left as it is.
	run(t, tr, c, []step{
		{name: "SYN+ACK", pkt: tcp4(bknd, 80, cliIP, 50000, tcpSYN|tcpACK, 9, 2, 0), act: Action{Zone: 1, NAT: NAT{Kind: NATBare}}, state: trkEstRpl | StateSNAT},
		{name: "out of window", pkt: tcp4(cliIP, 50000, vip, 80, tcpACK, 1<<31, 10, 10), act: Action{Zone: 1, NAT: NAT{Kind: NATBare}},
			state: trkInv, reason: ReasonTCPWindow, want: tcp4(cliIP, 50000, vip, 80, tcpACK, 1<<31, 10, 10)},
	})
}

func TestDumpFormat(t *testing.T) {
	tr, c := newTracker(t, Config{})
	run(t, tr, c, []step{
		{name: "SYN", pkt: tcp4(pod, 40000, far, 80, tcpSYN, 1, 0, 0), act: Action{Zone: 7, Commit: true, NAT: snat.NAT}, state: trkNew | StateSNAT},
		{name: "ping", pkt: echo(pod, far, icmpEcho, 7, 8), act: commit, state: trkNew},
		{name: "gre", pkt: build(hdr{src: pod, dst: far, proto: 47}), act: commit, state: trkNew},
		{name: "sctp", pkt: build(hdr{src: pod, dst: far, proto: ProtoSCTP, sport: 5000, dport: 7777}), act: commit, state: trkNew},
	})
	// SCTP is tracked as "other" (by its addresses; OVS tracks its
	// ports too) and printed by name.
	want := []string{
		"47,orig=(src=10.128.0.5,dst=93.184.216.34,sport=0,dport=0),reply=(src=93.184.216.34,dst=10.128.0.5,sport=0,dport=0),timeout=599",
		"icmp,orig=(src=10.128.0.5,dst=93.184.216.34,id=7,type=8,code=0),reply=(src=93.184.216.34,dst=10.128.0.5,id=7,type=0,code=0),timeout=29",
		"sctp,orig=(src=10.128.0.5,dst=93.184.216.34,sport=5000,dport=7777),reply=(src=93.184.216.34,dst=10.128.0.5,sport=7777,dport=5000),timeout=599",
		"tcp,orig=(src=10.128.0.5,dst=93.184.216.34,sport=40000,dport=80),reply=(src=93.184.216.34,dst=192.168.1.10,sport=80,dport=40000),zone=7,timeout=119,protoinfo=(state=SYN_SENT)",
	}
	if got := dump(tr, c, true); !slices.Equal(got, want) {
		t.Errorf("dump\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
