package conntrack

import (
	"testing"
	"time"
)

// TestAccounting: a SNATed UDP exchange is counted per direction, in IPv4
// bytes; Flows reports it once idle (and again only for later packets),
// active while it lasts; removal hands the rest to OnEnd with the reason.
func TestAccounting(t *testing.T) {
	var ended []Flow
	tr, c := newTracker(t, Config{Accounting: true, OnEnd: func(f Flow) { ended = append(ended, f) }})
	send := func(p []byte, a *Action) {
		var m Meta
		tr.Process(c.Now(), append([]byte(nil), p...), 0, a, &m)
		c.advance(time.Millisecond)
	}
	out := udp4(pod, 5000, far, 53, 100)   // 128 bytes of IPv4
	back := udp4(far, 53, node, 5000, 300) // 328
	start := c.Now()
	send(out, &snat)
	send(out, &natBare)
	send(back, &natBare)
	last := c.Now() - Time(time.Millisecond)

	var got []Flow
	collect := func(f *Flow) { got = append(got, *f) }
	if n := tr.Flows(c.Now(), time.Hour, time.Second, collect); n != 0 {
		t.Fatalf("Flows before the idle timeout reported %d: %+v", n, got)
	}
	c.advance(time.Second)
	if n := tr.Flows(c.Now(), time.Hour, time.Second, collect); n != 1 {
		t.Fatalf("Flows after the idle timeout reported %d, want 1", n)
	}
	f := got[0]
	want := Flow{
		Orig:  Tuple{Src: ip4(pod), Dst: ip4(far), SrcPort: 5000, DstPort: 53, Proto: ProtoUDP},
		Reply: Tuple{Src: ip4(far), Dst: ip4(node), SrcPort: 53, DstPort: 5000, Proto: ProtoUDP},
		NAT:   NATSrc, Class: UDPReplied, Packets: [2]uint64{2, 1}, Bytes: [2]uint64{2 * 128, 328},
		Start: start, Last: last, End: FlowIdle,
	}
	if f != want {
		t.Errorf("idle flow\n got %+v\nwant %+v", f, want)
	}
	if n := tr.Flows(c.Now(), time.Millisecond, time.Second, collect); n != 0 {
		t.Errorf("a reported flow without new packets reported again (%d)", n)
	}

	send(out, &natBare)
	c.advance(2 * time.Second)
	got = nil
	if n := tr.Flows(c.Now(), 2*time.Second, time.Hour, collect); n != 1 || got[0].End != FlowActive ||
		got[0].Packets != [2]uint64{1, 0} || got[0].Bytes != [2]uint64{128, 0} {
		t.Errorf("active report: %d flows %+v, want one of 1 packet, 128 bytes", n, got)
	}

	send(out, &natBare)
	if n := tr.Flush(); n != 1 {
		t.Fatalf("Flush removed %d", n)
	}
	if len(ended) != 1 || ended[0].End != FlowForced || ended[0].Packets != [2]uint64{1, 0} {
		t.Errorf("OnEnd after Flush: %+v, want one forced end of 1 packet", ended)
	}
}

// TestAccountingExpiry: a connection that times out is reported to OnEnd
// as ended by Sweep; one without unreported packets is not reported
// again; a tracker without Accounting reports nothing.
func TestAccountingExpiry(t *testing.T) {
	var ended []Flow
	tr, c := newTracker(t, Config{Accounting: true, OnEnd: func(f Flow) { ended = append(ended, f) },
		Timeouts: Timeouts{UDPUnreplied: time.Second}})
	var m Meta
	tr.Process(c.Now(), udp4(pod, 1, far, 2, 10), 0, &commit, &m)
	m = Meta{}
	tr.Process(c.Now(), udp4(pod, 3, far, 4, 10), 0, &commit, &m)
	tr.Flows(c.Now()+Time(time.Millisecond), 0, time.Millisecond, func(*Flow) {}) // reports both
	m = Meta{}
	tr.Process(c.Now(), udp4(pod, 1, far, 2, 10), 0, &lookup, &m)
	c.advance(2 * time.Second)
	if n := tr.Sweep(c.Now(), 0); n != 2 {
		t.Fatalf("Sweep removed %d, want 2", n)
	}
	if len(ended) != 1 || ended[0].End != FlowEnded || ended[0].Orig.SrcPort != 1 || ended[0].Packets != [2]uint64{1, 0} {
		t.Errorf("OnEnd: %+v, want the one connection with an unreported packet, ended", ended)
	}

	plain, pc := newTracker(t, Config{})
	m = Meta{}
	plain.Process(pc.Now(), udp4(pod, 1, far, 2, 10), 0, &commit, &m)
	pc.advance(time.Hour)
	if n := plain.Flows(pc.Now(), time.Second, time.Second, func(*Flow) {}); n != 0 {
		t.Errorf("Flows without Accounting reported %d", n)
	}
}

// TestAccountingAllocs: accounting adds no allocation to the packet path,
// nor to a connection's end.
func TestAccountingAllocs(t *testing.T) {
	var sink Flow
	tr, c := newTracker(t, Config{Accounting: true, OnEnd: func(f Flow) { sink = f }})
	now := c.Now()
	out, back := flowPkt(1)
	var m Meta
	tr.Process(now, out, CsumVerified, &commit, &m)
	i := uint32(1)
	o, _ := flowPkt(0)
	cases := []struct {
		name string
		f    func()
	}{
		{"established, original", func() { m = Meta{}; tr.Process(now, out, CsumVerified, &lookup, &m) }},
		{"established, reply", func() { m = Meta{}; tr.Process(now, back, CsumVerified, &lookup, &m) }},
		{"commit, then flush (OnEnd)", func() {
			i++
			setFlow(o, nil, i)
			m = Meta{}
			tr.Process(now, o, CsumVerified, &commit, &m)
			tr.FlushTuple(0, m.Orig())
		}},
	}
	for _, tc := range cases {
		if n := testing.AllocsPerRun(200, tc.f); n != 0 {
			t.Errorf("%s: %v allocations", tc.name, n)
		}
	}
	_ = sink
}

// BenchmarkEstablishedHotAccounting is BenchmarkEstablishedHot with
// Accounting on: the cost of the per-packet counts.
func BenchmarkEstablishedHotAccounting(b *testing.B) {
	tr, c := newTracker(b, Config{Accounting: true, OnEnd: func(Flow) {}})
	fillFlows(b, tr, c.Now(), 1)
	out, _ := flowPkt(1)
	loop(b, tr, c, out, CsumVerified, &lookup, trkEst, nil)
}

// BenchmarkConnection is one connection's life, committed by its first
// packet and flushed, without and with Accounting (the flush hands its
// counts to OnEnd): the per-connection cost of accounting.
func BenchmarkConnection(b *testing.B) {
	for _, acct := range []bool{false, true} {
		b.Run(map[bool]string{false: "accounting=off", true: "accounting=on"}[acct], func(b *testing.B) {
			cfg := Config{}
			if acct {
				cfg = Config{Accounting: true, OnEnd: func(Flow) {}}
			}
			tr, c := newTracker(b, cfg)
			out, _ := flowPkt(1)
			var m Meta
			b.ReportAllocs()
			i := uint32(0)
			for b.Loop() {
				i++
				setFlow(out, nil, i)
				m = Meta{}
				tr.Process(c.Now(), out, CsumVerified, &commit, &m)
				tr.FlushTuple(0, m.Orig())
			}
		})
	}
}
