package conntrack

import (
	"strings"
	"testing"
	"time"
)

const (
	cli = "10.0.0.1"
	srv = "10.0.0.2"
)

func tcpc(flags uint8, seq, ack uint32, payload int) []byte {
	return build(hdr{src: cli, dst: srv, proto: ProtoTCP, sport: 40000, dport: 80, flags: flags, seq: seq, ack: ack, payload: payload})
}

func tcps(flags uint8, seq, ack uint32, payload int) []byte {
	return build(hdr{src: srv, dst: cli, proto: ProtoTCP, sport: 80, dport: 40000, flags: flags, seq: seq, ack: ack, payload: payload})
}

// classOf returns the class of the only entry.
func classOf(t *testing.T, tr *Tracker, c *clock) (Class, string) {
	t.Helper()
	var got []Entry
	for e := range tr.All(c.Now()) {
		got = append(got, e)
	}
	if len(got) != 1 {
		t.Fatalf("%d entries, want 1", len(got))
	}
	return got[0].Class, got[0].String()
}

func TestTCPLifecycle(t *testing.T) {
	const (
		syn    = tcpSYN
		synack = tcpSYN | tcpACK
		ack    = tcpACK
		finack = tcpFIN | tcpACK
		pshack = tcpPSH | tcpACK
	)
	tr, c := newTracker(t, Config{})
	steps := []struct {
		step
		class Class
		dump  string
	}{
		{step{name: "SYN", pkt: tcpc(syn, 1000, 0, 0), act: commit, state: trkNew}, TCPSynSent, "SYN_SENT"},
		{step{name: "SYN retransmitted", pkt: tcpc(syn, 1000, 0, 0), act: commit, state: trkNew}, TCPSynSent, "SYN_SENT"},
		{step{name: "SYN+ACK", pkt: tcps(synack, 5000, 1001, 0), act: lookup, state: trkEstRpl}, TCPSynRecv, "ESTABLISHED"},
		{step{name: "ACK", pkt: tcpc(ack, 1001, 5001, 0), act: lookup, state: trkEst}, TCPEstablished, "ESTABLISHED"},
		{step{name: "client data", pkt: tcpc(pshack, 1001, 5001, 100), act: lookup, state: trkEst}, TCPEstablished, "ESTABLISHED"},
		{step{name: "server data", pkt: tcps(pshack, 5001, 1101, 200), act: lookup, state: trkEstRpl}, TCPEstablished, "ESTABLISHED"},
		{step{name: "retransmitted data", pkt: tcpc(pshack, 1001, 5201, 100), act: lookup, state: trkEst}, TCPEstablished, "ESTABLISHED"},
		{step{name: "client FIN", pkt: tcpc(finack, 1101, 5201, 0), act: lookup, state: trkEst}, TCPFinWait, "CLOSING"},
		{step{name: "server ACKs the FIN", pkt: tcps(ack, 5201, 1102, 0), act: lookup, state: trkEstRpl}, TCPFinWait, "TIME_WAIT"},
		{step{name: "server FIN", pkt: tcps(finack, 5201, 1102, 0), act: lookup, state: trkEstRpl}, TCPLastAck, "TIME_WAIT"},
		{step{name: "client ACKs the FIN", pkt: tcpc(ack, 1102, 5202, 0), act: lookup, state: trkEst}, TCPTimeWait, "TIME_WAIT"},
		{step{name: "new SYN reopens", pkt: tcpc(syn, 9000, 0, 0), act: commit, state: trkNew}, TCPSynSent, "SYN_SENT"},
	}
	for _, s := range steps {
		run(t, tr, c, []step{s.step})
		class, dump := classOf(t, tr, c)
		if class != s.class || !strings.HasSuffix(dump, "protoinfo=(state="+s.dump+")") {
			t.Errorf("%s: class %v, dump %s; want %v, state=%s", s.name, class, dump, s.class, s.dump)
		}
	}
	if st := tr.Stats(); st.Created != 2 || st.Entries != 1 || st.ByClass[TCPSynSent] != 1 {
		t.Errorf("stats %+v: want 2 created, 1 entry in SYN_SENT", st)
	}
}

// established returns a tracker with the handshake of tcpc/tcps done
// (client seq 1001, server seq 5001, windows 65535 unscaled).
func established(t *testing.T) (*Tracker, *clock) {
	tr, c := newTracker(t, Config{})
	run(t, tr, c, []step{
		{name: "SYN", pkt: tcpc(tcpSYN, 1000, 0, 0), act: commit, state: trkNew},
		{name: "SYN+ACK", pkt: tcps(tcpSYN|tcpACK, 5000, 1001, 0), act: lookup, state: trkEstRpl},
		{name: "ACK", pkt: tcpc(tcpACK, 1001, 5001, 0), act: lookup, state: trkEst},
	})
	return tr, c
}

func TestTCPInvalid(t *testing.T) {
	cases := []step{
		{name: "data beyond the window", pkt: tcpc(tcpACK, 1001+70000, 5001, 100), state: trkInv, reason: ReasonTCPWindow},
		{name: "data a window behind", pkt: tcpc(tcpACK, 1001+(1<<32-200000), 5001, 100), state: trkInv, reason: ReasonTCPWindow},
		{name: "acks data never sent", pkt: tcpc(tcpACK, 1001, 5001+200000, 0), state: trkInv, reason: ReasonTCPWindow},
		{name: "RST with a wrong sequence", pkt: tcps(tcpRST, 5001+1000, 0, 0), state: trkInv, reason: ReasonTCPWindow},
		{name: "SYN+FIN", pkt: tcpc(tcpSYN|tcpFIN, 1001, 0, 0), state: trkInv, reason: ReasonTCPFlags},
		{name: "SYN+RST", pkt: tcpc(tcpSYN|tcpRST, 1001, 0, 0), state: trkInv, reason: ReasonTCPFlags},
		{name: "no flags", pkt: tcpc(0, 1001, 5001, 0), state: trkInv, reason: ReasonTCPFlags},
		{name: "FIN without ACK", pkt: tcpc(tcpFIN, 1001, 0, 0), state: trkInv, reason: ReasonTCPFlags},
		{name: "PSH without ACK", pkt: tcpc(tcpPSH, 1001, 0, 10), state: trkInv, reason: ReasonTCPFlags},
		{name: "URG without ACK", pkt: tcpc(tcpURG, 1001, 0, 10), state: trkInv, reason: ReasonTCPFlags},
		{name: "in window", pkt: tcpc(tcpACK, 1001+1000, 5001, 100), state: trkEst},
	}
	for _, s := range cases {
		t.Run(s.name, func(t *testing.T) {
			tr, c := established(t)
			run(t, tr, c, []step{s})
			if tr.Len() != 1 {
				t.Errorf("%d entries, want 1", tr.Len())
			}
		})
	}
}

func TestTCPNewRefused(t *testing.T) {
	tr, c := newTracker(t, Config{})
	run(t, tr, c, []step{
		{name: "SYN+ACK cannot open", pkt: tcps(tcpSYN|tcpACK, 5000, 1001, 0), act: commit, state: trkInv, reason: ReasonNotNew},
		{name: "SYN+FIN cannot open", pkt: tcpc(tcpSYN|tcpFIN, 1000, 0, 0), act: commit, state: trkInv, reason: ReasonTCPFlags},
		{name: "bare FIN cannot open", pkt: tcpc(tcpFIN, 1000, 0, 0), act: commit, state: trkInv, reason: ReasonTCPFlags},
	})
	if tr.Len() != 0 {
		t.Errorf("%d entries after refused openings", tr.Len())
	}
	// A segment mid-stream is picked up (OVS, and Linux's tcp_loose).
	run(t, tr, c, []step{
		{name: "mid-stream ACK opens", pkt: tcpc(tcpACK|tcpPSH, 777777, 888888, 50), act: commit, state: trkNew},
		{name: "its reply", pkt: tcps(tcpACK, 888888, 777777+50, 0), state: trkEstRpl},
		{name: "more data", pkt: tcpc(tcpACK|tcpPSH, 777777+50, 888888, 1400), state: trkEst},
	})
}

func TestTCPReset(t *testing.T) {
	tr, c := established(t)
	run(t, tr, c, []step{{name: "RST with the exact sequence", pkt: tcps(tcpRST|tcpACK, 5001, 1001, 0), state: trkEstRpl}})
	class, dump := classOf(t, tr, c)
	if class != TCPClose || !strings.Contains(dump, "state=TIME_WAIT") {
		t.Errorf("after RST: class %v, %s", class, dump)
	}
	if left := entryTimeout(t, tr, c); left != 10*time.Second-time.Millisecond {
		t.Errorf("1ms after RST the entry has %v left, want 10s-1ms", left)
	}
}

func entryTimeout(t *testing.T, tr *Tracker, c *clock) time.Duration {
	t.Helper()
	for e := range tr.All(c.Now()) {
		return e.Timeout
	}
	t.Fatal("no entry")
	return 0
}

func TestTCPWindowScale(t *testing.T) {
	ws := func(shift byte) []byte { return []byte{1, 3, 3, shift} } // NOP, window scale
	tr, c := newTracker(t, Config{})
	syn := build(hdr{src: cli, dst: srv, proto: ProtoTCP, sport: 40000, dport: 80, flags: tcpSYN, seq: 1000, win: 64240, opts: ws(7)})
	synack := build(hdr{src: srv, dst: cli, proto: ProtoTCP, sport: 80, dport: 40000, flags: tcpSYN | tcpACK, seq: 5000, ack: 1001, win: 65160, opts: ws(7)})
	data := func(seq uint32, n int) []byte {
		return build(hdr{src: srv, dst: cli, proto: ProtoTCP, sport: 80, dport: 40000, flags: tcpACK, seq: seq, ack: 1001, win: 500, payload: n})
	}
	run(t, tr, c, []step{
		{name: "SYN ws 7", pkt: syn, act: commit, state: trkNew},
		{name: "SYN+ACK ws 7", pkt: synack, state: trkEstRpl},
		// The client advertises 1000 << 7 = 128000 bytes.
		{name: "ACK", pkt: build(hdr{src: cli, dst: srv, proto: ProtoTCP, sport: 40000, dport: 80, flags: tcpACK, seq: 1001, ack: 5001, win: 1000}), state: trkEst},
		{name: "inside the scaled window", pkt: data(5001+100000, 1000), state: trkEstRpl},
		{name: "past the scaled window", pkt: data(5001+130000, 1000), state: trkInv, reason: ReasonTCPWindow},
	})
}

func TestTCPSuperFrame(t *testing.T) {
	tr, c := established(t)
	// A 64 KiB GSO super-frame: one segment's headers, the whole payload,
	// the checksum partial (the pseudo-header sum only).
	b := tcpc(tcpACK|tcpPSH, 1001, 5001, 65000)
	setPartial(b)
	run(t, tr, c, []step{
		{name: "super-frame", pkt: b, flags: CsumPartial, state: trkEst},
		// The server's window (65535) has 535 bytes left.
		{name: "next one overruns the window", pkt: partialCopy(tcpc(tcpACK|tcpPSH, 1001+65000, 5001, 1000)), flags: CsumPartial, state: trkInv, reason: ReasonTCPWindow},
		{name: "server acks it", pkt: tcps(tcpACK, 5001, 1001+65000, 0), state: trkEstRpl},
		{name: "now it fits", pkt: partialCopy(tcpc(tcpACK|tcpPSH, 1001+65000, 5001, 1000)), flags: CsumPartial, state: trkEst},
	})
}

// setPartial puts the folded pseudo-header sum in b's TCP/UDP checksum
// field, as a sender with checksum offload (CHECKSUM_PARTIAL) leaves it.
func setPartial(b []byte) {
	off := 20 + 16
	if b[9] == ProtoUDP {
		off = 20 + 6
	}
	p := pseudo(b, len(b)-20)
	b[off], b[off+1] = 0, 0
	put16(b, off, ^csumRef(p))
}

func partialCopy(b []byte) []byte { setPartial(b); return b }

func TestUDP(t *testing.T) {
	tr, c := newTracker(t, Config{})
	out := build(hdr{src: cli, dst: srv, proto: ProtoUDP, sport: 5000, dport: 53, payload: 30})
	back := build(hdr{src: srv, dst: cli, proto: ProtoUDP, sport: 53, dport: 5000, payload: 60})
	bad := append([]byte(nil), out...)
	bad[len(bad)-1] ^= 0xff
	zero := build(hdr{src: cli, dst: srv, proto: ProtoUDP, sport: 5000, dport: 53, payload: 30, noUDPCsum: true})
	port0 := build(hdr{src: cli, dst: srv, proto: ProtoUDP, sport: 0, dport: 53, payload: 30})
	run(t, tr, c, []step{
		{name: "uncommitted", pkt: out, act: lookup, state: trkNew},
		{name: "bad checksum", pkt: bad, act: commit, state: trkInv, reason: ReasonChecksum},
		{name: "bad checksum, but partial", pkt: bad, act: lookup, flags: CsumPartial, state: trkNew},
		{name: "bad checksum, but verified", pkt: bad, act: lookup, flags: CsumVerified, state: trkNew},
		{name: "port 0", pkt: port0, act: commit, state: trkInv, reason: ReasonMalformed},
	})
	if tr.Len() != 0 {
		t.Fatalf("%d entries before any commit", tr.Len())
	}
	run(t, tr, c, []step{
		{name: "first", pkt: out, act: commit, state: trkNew},
		{name: "second, same way", pkt: zero, act: commit, state: trkNew},
	})
	if cl, _ := classOf(t, tr, c); cl != UDPUnreplied {
		t.Errorf("class %v, want udp_unreplied", cl)
	}
	run(t, tr, c, []step{
		{name: "reply", pkt: back, act: lookup, state: trkEstRpl},
		{name: "then", pkt: out, act: lookup, state: trkEst},
	})
	if cl, _ := classOf(t, tr, c); cl != UDPReplied {
		t.Errorf("class %v, want udp_replied", cl)
	}
	if left := entryTimeout(t, tr, c); left != 120*time.Second-time.Millisecond {
		t.Errorf("1ms after a packet replied UDP has %v left, want 120s-1ms", left)
	}
}

func TestOtherProtocol(t *testing.T) {
	tr, c := newTracker(t, Config{})
	gre := func(src, dst string) []byte { return build(hdr{src: src, dst: dst, proto: 47, payload: 40}) }
	run(t, tr, c, []step{
		{name: "GRE out", pkt: gre(cli, srv), act: commit, state: trkNew},
		{name: "GRE back", pkt: gre(srv, cli), state: trkEstRpl},
		{name: "GRE elsewhere", pkt: gre(cli, "10.0.0.3"), state: trkNew},
	})
	if _, d := classOf(t, tr, c); d != "47,orig=(src=10.0.0.1,dst=10.0.0.2,sport=0,dport=0),reply=(src=10.0.0.2,dst=10.0.0.1,sport=0,dport=0)" {
		t.Errorf("dump %s", d)
	}
}

// SCTP is told apart by its ports: an association one way does not make
// a new one the other way (or to another port) a reply.
func TestSCTPPorts(t *testing.T) {
	tr, c := newTracker(t, Config{})
	sctp := func(src, dst string, sport, dport uint16) []byte {
		return build(hdr{src: src, dst: dst, proto: ProtoSCTP, sport: sport, dport: dport, payload: 20})
	}
	short := build(hdr{src: cli, dst: srv, proto: 47, payload: 8}) // 8 bytes of SCTP: no room for its tag
	short[9] = ProtoSCTP
	refreshChecksums(short, false)
	run(t, tr, c, []step{
		{name: "INIT out", pkt: sctp(cli, srv, 40000, 80), act: commit, state: trkNew},
		{name: "INIT ACK back", pkt: sctp(srv, cli, 80, 40000), state: trkEstRpl},
		{name: "the server's own INIT to the client", pkt: sctp(srv, cli, 80, 40001), state: trkNew},
		{name: "another port", pkt: sctp(cli, srv, 40000, 81), state: trkNew},
		{name: "port 0", pkt: sctp(cli, srv, 0, 81), act: commit, state: trkInv, reason: ReasonMalformed},
		{name: "short header", pkt: short, act: commit, state: trkInv, reason: ReasonMalformed},
	})
	if _, d := classOf(t, tr, c); d != "sctp,orig=(src=10.0.0.1,dst=10.0.0.2,sport=40000,dport=80),reply=(src=10.0.0.2,dst=10.0.0.1,sport=80,dport=40000)" {
		t.Errorf("dump %s", d)
	}
}

func echo(src, dst string, typ uint8, id uint16, n int) []byte {
	return build(hdr{src: src, dst: dst, proto: ProtoICMP, icmpType: typ, icmpID: id, payload: n})
}

func TestICMPEcho(t *testing.T) {
	tr, c := newTracker(t, Config{})
	badCode := build(hdr{src: cli, dst: srv, proto: ProtoICMP, icmpType: icmpEcho, icmpCode: 1, icmpID: 7})
	unknown := build(hdr{src: cli, dst: srv, proto: ProtoICMP, icmpType: 9, icmpID: 7})
	run(t, tr, c, []step{
		{name: "echo request", pkt: echo(cli, srv, icmpEcho, 7, 56), act: commit, state: trkNew},
		{name: "echo reply", pkt: echo(srv, cli, icmpEchoReply, 7, 56), state: trkEstRpl},
		{name: "next request", pkt: echo(cli, srv, icmpEcho, 7, 56), state: trkEst},
		{name: "reply to another id", pkt: echo(srv, cli, icmpEchoReply, 8, 56), act: commit, state: trkInv, reason: ReasonNotNew},
		{name: "the server pings the client, same id", pkt: echo(srv, cli, icmpEcho, 7, 56), state: trkNew},
		{name: "echo with code 1", pkt: badCode, act: commit, state: trkInv, reason: ReasonMalformed},
		{name: "router advertisement", pkt: unknown, act: commit, state: trkInv, reason: ReasonMalformed},
	})
	_, d := classOf(t, tr, c)
	if d != "icmp,orig=(src=10.0.0.1,dst=10.0.0.2,id=7,type=8,code=0),reply=(src=10.0.0.2,dst=10.0.0.1,id=7,type=0,code=0)" {
		t.Errorf("dump %s", d)
	}
	var m Meta
	tr.Process(c.Now(), echo(srv, cli, icmpEchoReply, 7, 56), 0, &lookup, &m)
	if want := (Tuple{Src: ip4(cli), Dst: ip4(srv), Proto: ProtoICMP, SrcPort: icmpEcho, ID: 7}); m.Orig() != want {
		t.Errorf("orig tuple %+v, want %+v (ct_tp_src is the type)", m.Orig(), want)
	}
}

func icmpErr(src, dst string, typ, code uint8, quoted []byte) []byte {
	return build(hdr{src: src, dst: dst, proto: ProtoICMP, icmpType: typ, icmpCode: code, quote: quoted})
}

func TestICMPRelated(t *testing.T) {
	tr, c := newTracker(t, Config{})
	out := build(hdr{src: cli, dst: srv, proto: ProtoUDP, sport: 5000, dport: 53, payload: 30})
	other := build(hdr{src: cli, dst: srv, proto: ProtoUDP, sport: 5001, dport: 53, payload: 30})
	spoofed := build(hdr{src: "10.9.9.9", dst: srv, proto: ProtoUDP, sport: 5000, dport: 53, payload: 30})
	badSum := icmpErr(srv, cli, icmpUnreach, 3, quote(out, 8))
	badSum[22] ^= 1
	run(t, tr, c, []step{
		{name: "no connection yet", pkt: icmpErr(srv, cli, icmpUnreach, 3, quote(out, 8)), act: commit, state: trkInv, reason: ReasonNoRelated},
		{name: "query", pkt: out, act: commit, state: trkNew},
		{name: "port unreachable from the server", pkt: icmpErr(srv, cli, icmpUnreach, 3, quote(out, 8)), state: trkRelRpl},
		{name: "time exceeded from a router", pkt: icmpErr("10.0.9.1", cli, icmpTimeExceeded, 0, quote(out, 38)), state: trkRelRpl},
		{name: "quotes another flow", pkt: icmpErr(srv, cli, icmpUnreach, 3, quote(other, 8)), state: trkInv, reason: ReasonNoRelated},
		{name: "quoted source is not the error's destination", pkt: icmpErr(srv, cli, icmpUnreach, 3, quote(spoofed, 8)), state: trkInv, reason: ReasonMalformed},
		{name: "quote too short", pkt: icmpErr(srv, cli, icmpUnreach, 3, quote(out, 4)), state: trkInv, reason: ReasonMalformed},
		{name: "bad ICMP checksum", pkt: badSum, state: trkInv, reason: ReasonChecksum},
		{name: "error about a reply, from the client", pkt: icmpErr(cli, srv, icmpUnreach, 3,
			quote(build(hdr{src: srv, dst: cli, proto: ProtoUDP, sport: 53, dport: 5000, payload: 8}), 8)), state: StateTrk | StateRel},
	})
	var m Meta
	tr.Process(c.Now(), icmpErr(srv, cli, icmpUnreach, 3, quote(out, 8)), 0, &lookup, &m)
	if want := (Tuple{Src: ip4(cli), Dst: ip4(srv), Proto: ProtoUDP, SrcPort: 5000, DstPort: 53}); m.Orig() != want {
		t.Errorf("an ICMP error's original tuple is %+v, want the UDP connection's %+v", m.Orig(), want)
	}
	if tr.Len() != 1 {
		t.Errorf("%d entries: ICMP errors must not make connections", tr.Len())
	}
	if cl, _ := classOf(t, tr, c); cl != UDPUnreplied {
		t.Errorf("class %v: an ICMP error is not a reply", cl)
	}
}

func TestMalformed(t *testing.T) {
	tr, c := newTracker(t, Config{})
	good := tcpc(tcpSYN, 1, 0, 0)
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	cases := []step{
		{name: "empty", pkt: nil, reason: ReasonMalformed},
		{name: "IPv6", pkt: mut(func(b []byte) { b[0] = 0x60 }), reason: ReasonMalformed},
		{name: "IHL 4", pkt: mut(func(b []byte) { b[0] = 0x44 }), reason: ReasonMalformed},
		{name: "total length past the buffer", pkt: mut(func(b []byte) { put16(b, 2, 200) }), reason: ReasonMalformed},
		{name: "IP checksum", pkt: mut(func(b []byte) { b[8]-- }), reason: ReasonChecksum},
		{name: "TCP checksum", pkt: mut(func(b []byte) { b[30]++ }), reason: ReasonChecksum},
		{name: "TCP data offset 4", pkt: mut(func(b []byte) { b[32] = 0x40; refreshChecksums(b, false) }), reason: ReasonMalformed},
		{name: "TCP data offset past the end", pkt: mut(func(b []byte) { b[32] = 0xf0; refreshChecksums(b, false) }), reason: ReasonMalformed},
		{name: "truncated TCP", pkt: mut(func(b []byte) { put16(b, 2, 30); ipHeaderSum(b) })[:30], reason: ReasonMalformed},
	}
	for i := range cases {
		cases[i].act = commit
		cases[i].state = trkInv
	}
	run(t, tr, c, cases)
	if st := tr.Stats(); st.Invalid() != uint64(len(cases)) || tr.Len() != 0 {
		t.Errorf("invalid %d, entries %d", st.Invalid(), tr.Len())
	}
	// Trailing bytes beyond the IP total length (Ethernet padding) are fine.
	run(t, tr, c, []step{{name: "padded", pkt: append(append([]byte(nil), good...), 0, 0, 0, 0), act: commit, state: trkNew}})
}
