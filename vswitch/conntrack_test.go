package vswitch

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// Addresses of the connection-tracking tests: pod A on port 1, pod B on
// port 2, an observer on port 3, and the address A is translated to.
var (
	ctA   = [4]byte{10, 0, 0, 1}
	ctB   = [4]byte{10, 0, 0, 2}
	ctNAT = [4]byte{10, 0, 0, 100}
)

// ipFrame builds an Ethernet/IPv4 frame around l4 (proto), with a correct
// header checksum and, for TCP and UDP, a correct L4 checksum.
func ipFrame(proto uint8, src, dst [4]byte, l4 []byte) []byte {
	f := make([]byte, packet.EthernetLen+20+len(l4))
	copy(f[0:6], []byte{0x0a, 0x58, dst[0], dst[1], dst[2], dst[3]})
	copy(f[6:12], []byte{0x0a, 0x58, src[0], src[1], src[2], src[3]})
	f[12], f[13] = 0x08, 0x00
	ip := f[packet.EthernetLen:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
	ip[8], ip[9] = 64, proto
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], ^packet.Checksum(ip[:20], 0))
	copy(ip[20:], l4)
	seg := ip[20:]
	switch proto {
	case packet.ProtoTCP:
		binary.BigEndian.PutUint16(seg[16:], ^packet.Checksum(seg, packet.PseudoHeaderSum(src[:], dst[:], proto, len(seg))))
	case packet.ProtoUDP:
		binary.BigEndian.PutUint16(seg[6:], ^packet.Checksum(seg, packet.PseudoHeaderSum(src[:], dst[:], proto, len(seg))))
	case packet.ProtoICMP:
		binary.BigEndian.PutUint16(seg[2:], ^packet.Checksum(seg, 0))
	}
	return f
}

func udpCT(src, dst [4]byte, sport, dport uint16, payload string) []byte {
	l4 := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	copy(l4[8:], payload)
	return ipFrame(packet.ProtoUDP, src, dst, l4)
}

func tcpCT(src, dst [4]byte, sport, dport uint16, flags uint8, seq, ack uint32, payload int) []byte {
	l4 := make([]byte, 20+payload)
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	binary.BigEndian.PutUint32(l4[4:], seq)
	binary.BigEndian.PutUint32(l4[8:], ack)
	l4[12] = 5 << 4
	l4[13] = flags
	binary.BigEndian.PutUint16(l4[14:], 65535)
	return ipFrame(packet.ProtoTCP, src, dst, l4)
}

// checksumsValid reports whether frame's IPv4 header checksum and its TCP
// or UDP checksum are correct.
func checksumsValid(frame []byte) bool {
	ip := frame[packet.EthernetLen:]
	if packet.Checksum(ip[:20], 0) != 0xffff {
		return false
	}
	l4 := ip[20:binary.BigEndian.Uint16(ip[2:])]
	if ip[9] == packet.ProtoUDP && binary.BigEndian.Uint16(l4[6:]) == 0 {
		return true
	}
	return packet.Checksum(l4, packet.PseudoHeaderSum(ip[12:16], ip[16:20], ip[9], len(l4))) == 0xffff
}

// ctSwitch is a switch with a tracker (none when noTracker) and the given
// rules, whose ports 1 to 3 are memPorts run by no worker: a test drives a
// port's worker by hand (ctWorker.send) and reads what the others were
// given.
type ctSwitch struct {
	sw    *Switch
	t     *conntrack.Tracker
	ports [4]*memPort
	w     [4]*worker
}

func newCTSwitch(tb testing.TB, rules string, noTracker bool) *ctSwitch {
	tb.Helper()
	tbl := flowtable.New(flowtable.Config{})
	rs, err := flowtable.ParseRules(rules)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tbl.Add(rs...); err != nil {
		tb.Fatal(err)
	}
	c := &ctSwitch{}
	cfg := Config{Table: tbl}
	if !noTracker {
		if c.t, err = conntrack.New(conntrack.Config{MaxEntries: 1024}); err != nil {
			tb.Fatal(err)
		}
		cfg.Conntrack = c.t
	}
	if c.sw, err = New(cfg); err != nil {
		tb.Fatal(err)
	}
	m := portMap{}
	for no := 1; no <= 3; no++ {
		p := newMemPort("p" + string(rune('0'+no)))
		p.caps.Offload = true
		c.ports[no] = p
		m[uint32(no)] = &portEntry{no: uint32(no), q: []Port{p}, caps: p.caps}
	}
	c.sw.ports.Store(&m)
	for no := 1; no <= 3; no++ {
		c.w[no] = c.sw.newWorker(m[uint32(no)], c.ports[no])
	}
	return c
}

// send runs frames through port no's worker as one batch.
func (c *ctSwitch) send(no int, frames ...[]byte) { c.sendMeta(no, port.Meta{}, frames...) }

func (c *ctSwitch) sendMeta(no int, m port.Meta, frames ...[]byte) {
	w := c.w[no]
	for i, f := range frames {
		w.meta[i] = m
		w.meta[i].Size = copy(w.bufs[i][Headroom:], f)
	}
	w.process(len(frames))
}

// take returns and forgets what port no was given.
func (c *ctSwitch) take(no int) [][]byte { return c.ports[no].take() }

const firewallRules = `
table=0, priority=100, ip, ct_state=-trk, actions=ct(table=1)
table=0, priority=0, actions=drop
table=1, priority=100, in_port=1, ip, ct_state=+trk+new, actions=ct(commit),output:2
table=1, priority=100, in_port=1, ip, ct_state=+trk+est, actions=output:2
table=1, priority=100, in_port=2, ip, ct_state=+trk+est, actions=output:1
table=1, priority=0, actions=drop
`

// TestConntrackFirewall: a stateful firewall lets A open connections to B
// and B's replies back, and nothing B starts; the drop is counted in the
// table that made it; the cache answers the second packet of each pass
// without keeping the tracker from seeing it.
func TestConntrackFirewall(t *testing.T) {
	c := newCTSwitch(t, firewallRules, false)
	c.send(2, udpCT(ctB, ctA, 53, 4000, "unasked"))
	if got := c.take(1); len(got) != 0 {
		t.Fatalf("B's new connection reached A: %d frames", len(got))
	}
	st := c.sw.Stats()
	if st.Drops[DropAction] != 1 || st.TableDrops[1] != 1 {
		t.Fatalf("B's packet: drops %v, table 1 drops %d; want one action drop in table 1", st.Drops, st.TableDrops[1])
	}
	for range 2 {
		c.send(1, udpCT(ctA, ctB, 4000, 53, "query"))
		if got := c.take(2); len(got) != 1 || string(got[0][42:]) != "query" {
			t.Fatalf("A's query: B got %d frames", len(got))
		}
	}
	for range 2 {
		c.send(2, udpCT(ctB, ctA, 53, 4000, "answer"))
		if got := c.take(1); len(got) != 1 || string(got[0][42:]) != "answer" {
			t.Fatalf("B's answer: A got %d frames", len(got))
		}
	}
	var e conntrack.Entry
	n := 0
	for x := range c.t.All(c.t.Now()) {
		e, n = x, n+1
	}
	if n != 1 || e.Class != conntrack.UDPReplied {
		t.Fatalf("tracker: %d entries, last %v; want one replied UDP connection", n, e.String())
	}
	st = c.sw.Stats()
	// 5 frames: 5 first passes and 5 recirculations; the second frame of
	// each direction hits the cache in both passes.
	if st.Recirculations != 5 || st.Lookups != 10 || st.CacheHits < 4 {
		t.Fatalf("stats: %d recirculations, %d lookups, %d cache hits", st.Recirculations, st.Lookups, st.CacheHits)
	}
}

// TestConntrackSNAT: A's connection to B leaves translated to ctNAT with
// correct checksums; B's replies to ctNAT come back to A untranslated.
func TestConntrackSNAT(t *testing.T) {
	c := newCTSwitch(t, `
table=0, priority=100, ip, actions=ct(nat,table=1)
table=1, priority=100, in_port=1, ip, ct_state=+trk+new, actions=ct(commit,nat(src=10.0.0.100)),output:2
table=1, priority=100, in_port=1, ip, ct_state=+trk+est, actions=output:2
table=1, priority=100, in_port=2, ip, ct_state=+trk+est, actions=output:1
`, false)
	for i, flags := range []uint8{packet.TCPFlagSYN, packet.TCPFlagACK} {
		c.send(1, tcpCT(ctA, ctB, 40000, 80, flags, 1000+uint32(i), 5001*uint32(i), 0))
		got := c.take(2)
		if len(got) != 1 {
			t.Fatalf("segment %d: B got %d frames", i, len(got))
		}
		ip := got[0][packet.EthernetLen:]
		if [4]byte(ip[12:16]) != ctNAT || [4]byte(ip[16:20]) != ctB || !checksumsValid(got[0]) {
			t.Fatalf("segment %d leaves as %v -> %v (checksums valid: %v)", i, ip[12:16], ip[16:20], checksumsValid(got[0]))
		}
		if i == 0 {
			c.send(2, tcpCT(ctB, ctNAT, 80, binary.BigEndian.Uint16(ip[20:]), packet.TCPFlagSYN|packet.TCPFlagACK, 5000, 1001, 0))
			back := c.take(1)
			if len(back) != 1 {
				t.Fatalf("SYN+ACK: A got %d frames", len(back))
			}
			bip := back[0][packet.EthernetLen:]
			if [4]byte(bip[16:20]) != ctA || binary.BigEndian.Uint16(bip[22:]) != 40000 || !checksumsValid(back[0]) {
				t.Fatalf("reply reaches A as %v:%d (checksums valid: %v)", bip[16:20], binary.BigEndian.Uint16(bip[22:]), checksumsValid(back[0]))
			}
		}
	}
}

// TestConntrackForkAndOrder: ct(table=N) forks: the pass goes on
// untracked (output:3 gets the frame as it arrived) while the
// recirculation translates its own copy; an output before a translating
// ct gets the frame untranslated, one after it translated.
func TestConntrackForkAndOrder(t *testing.T) {
	c := newCTSwitch(t, `
table=0, priority=100, in_port=1, ip, actions=ct(table=1),output:3
table=1, priority=100, in_port=1, ip, ct_state=+trk+new, actions=output:3,ct(commit,nat(src=10.0.0.100)),output:2
`, false)
	c.send(1, udpCT(ctA, ctB, 4000, 53, "x"))
	obs, b := c.take(3), c.take(2)
	if len(obs) != 2 || len(b) != 1 {
		t.Fatalf("observer got %d frames, B %d; want 2 and 1", len(obs), len(b))
	}
	for i, f := range obs {
		if [4]byte(f[26:30]) != ctA {
			t.Errorf("observer's frame %d was translated: source %v", i, f[26:30])
		}
	}
	if [4]byte(b[0][26:30]) != ctNAT || !checksumsValid(b[0]) {
		t.Errorf("B's frame: source %v, checksums valid %v", b[0][26:30], checksumsValid(b[0]))
	}
}

// TestConntrackFailClosed: without a tracker a ct action drops the frame
// (no_conntrack); a recirculation loop stops at flowtable.MaxRecirc
// (recirc_depth); more ct actions than flowtable.MaxCT in one run drop it
// (too_many_ct).
func TestConntrackFailClosed(t *testing.T) {
	c := newCTSwitch(t, "table=0, priority=1, ip, actions=ct(commit),output:2", true)
	c.send(1, udpCT(ctA, ctB, 1, 2, ""))
	if got, st := c.take(2), c.sw.Stats(); len(got) != 0 || st.Drops[DropNoConntrack] != 1 {
		t.Fatalf("without a tracker: %d frames out, no_conntrack drops %d", len(got), st.Drops[DropNoConntrack])
	}
	c = newCTSwitch(t, "table=0, priority=1, ip, actions=ct_clear,output:2", true)
	c.send(1, udpCT(ctA, ctB, 1, 2, ""))
	if got := c.take(2); len(got) != 1 {
		t.Fatalf("ct_clear without a tracker: %d frames out, want 1", len(got))
	}
	c = newCTSwitch(t, "table=0, priority=1, ip, actions=ct(table=0)", false)
	c.send(1, udpCT(ctA, ctB, 1, 2, ""))
	if st := c.sw.Stats(); st.Drops[DropRecirc] != 1 || st.Recirculations != flowtable.MaxRecirc {
		t.Fatalf("recirculation loop: recirc_depth drops %d, %d recirculations", st.Drops[DropRecirc], st.Recirculations)
	}
	c = newCTSwitch(t, "table=0, priority=1, ip, actions=ct(),ct(),ct(),ct(),ct(),output:2", false)
	c.send(1, udpCT(ctA, ctB, 1, 2, ""))
	if got, st := c.take(2), c.sw.Stats(); len(got) != 0 || st.Drops[DropTooManyCT] != 1 {
		t.Fatalf("five ct actions: %d frames out, too_many_ct drops %d", len(got), st.Drops[DropTooManyCT])
	}
}

// TestConntrackZoneFromRegister: zone=NXM_NX_REG0[0..15] tracks in the
// zone the register holds when the action runs.
func TestConntrackZoneFromRegister(t *testing.T) {
	c := newCTSwitch(t, `
table=0, priority=1, ip, actions=load:0x7->NXM_NX_REG0[0..15],ct(commit,zone=NXM_NX_REG0[0..15],table=1)
table=1, priority=1, ip, ct_zone=7, ct_state=+trk+new, actions=output:2
`, false)
	c.send(1, udpCT(ctA, ctB, 1, 2, ""))
	if got := c.take(2); len(got) != 1 {
		t.Fatalf("%d frames out, want 1", len(got))
	}
	for e := range c.t.All(c.t.Now()) {
		if e.Zone != 7 {
			t.Fatalf("connection in zone %d, want 7", e.Zone)
		}
	}
	if c.t.Len() != 1 {
		t.Fatalf("%d connections, want 1", c.t.Len())
	}
}

// TestConntrackPartialChecksum: a TCP super-frame with a partial
// checksum is tracked whole and translated with its pseudo-header sum
// updated, and keeps its offload metadata.
func TestConntrackPartialChecksum(t *testing.T) {
	c := newCTSwitch(t, `
table=0, priority=100, ip, actions=ct(nat,table=1)
table=1, priority=100, in_port=1, ip, ct_state=+trk+new, actions=ct(commit,nat(src=10.0.0.100)),output:2
table=1, priority=100, in_port=1, ip, ct_state=+trk+est, actions=output:2
`, false)
	partial := func(f []byte) []byte {
		ip := f[packet.EthernetLen:]
		tcp := ip[20:]
		binary.BigEndian.PutUint16(tcp[16:], packet.PseudoHeaderSum(ip[12:16], ip[16:20], packet.ProtoTCP, len(tcp)))
		return f
	}
	c.send(1, tcpCT(ctA, ctB, 40000, 80, packet.TCPFlagSYN, 1000, 0, 0))
	c.take(2)
	c.send(2, tcpCT(ctB, ctNAT, 80, 40000, packet.TCPFlagSYN|packet.TCPFlagACK, 5000, 1001, 0))
	seg := partial(tcpCT(ctA, ctB, 40000, 80, packet.TCPFlagACK, 1001, 5001, 8000))
	g := packet.GSO{Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 54, Size: 1400, CsumStart: 34, CsumOffset: 16}
	c.sendMeta(1, port.Meta{GSO: g}, seg)
	got := c.ports[2].writtenMeta()
	frames := c.take(2)
	if len(frames) != 1 || got[0].GSO != g {
		t.Fatalf("B got %d frames, GSO %+v", len(frames), got)
	}
	ip := frames[0][packet.EthernetLen:]
	want := packet.PseudoHeaderSum(ctNAT[:], ctB[:], packet.ProtoTCP, len(ip)-20)
	if [4]byte(ip[12:16]) != ctNAT || binary.BigEndian.Uint16(ip[36:]) != want || packet.Checksum(ip[:20], 0) != 0xffff {
		t.Fatalf("super-frame leaves from %v with partial sum %#x (want %#x)", ip[12:16], binary.BigEndian.Uint16(ip[36:]), want)
	}
}

// TestConntrackAllocs: the established path — first pass, tracker,
// recirculation, output, both directions, through the cache — allocates
// nothing.
func TestConntrackAllocs(t *testing.T) {
	c := newCTSwitch(t, firewallRules, false)
	c.send(1, udpCT(ctA, ctB, 4000, 53, "query"))
	c.send(2, udpCT(ctB, ctA, 53, 4000, "answer"))
	fwd, rev := udpCT(ctA, ctB, 4000, 53, "query"), udpCT(ctB, ctA, 53, 4000, "answer")
	batch := func(w *worker, f []byte) {
		for i := range w.bufs {
			w.meta[i] = port.Meta{Size: copy(w.bufs[i][Headroom:], f)}
		}
	}
	batch(c.w[1], fwd)
	batch(c.w[2], rev)
	c.w[1].process(len(c.w[1].bufs))
	c.w[2].process(len(c.w[2].bufs))
	if n1, n2 := len(c.take(1)), len(c.take(2)); n1 != len(c.w[2].bufs)+1 || n2 != len(c.w[1].bufs)+1 {
		t.Fatalf("the established flow does not pass: %d and %d frames, stats %+v", n1, n2, c.sw.Stats().Drops)
	}
	// Measure with ports that keep nothing (memPort copies what it is given).
	sinks := [3]*discardPort{{}, {}, {}}
	m := *c.sw.ports.Load()
	for no := 1; no <= 2; no++ {
		m[uint32(no)].q[0] = sinks[no]
	}
	if n := testing.AllocsPerRun(50, func() {
		c.w[1].process(len(c.w[1].bufs))
		c.w[2].process(len(c.w[2].bufs))
	}); n != 0 {
		t.Errorf("an established batch allocates %.1f times", n)
	}
	if sinks[1].n == 0 || sinks[2].n == 0 {
		t.Fatal("nothing was written")
	}
	if c.t.Len() != 1 {
		t.Fatalf("%d connections, want 1", c.t.Len())
	}
}

// TestConntrackSweeper: Config.SweepInterval makes the switch sweep the
// tracker until Close.
func TestConntrackSweeper(t *testing.T) {
	var now conntrack.Time
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	clock := func() conntrack.Time { <-mu; defer func() { mu <- struct{}{} }(); return now }
	tr, err := conntrack.New(conntrack.Config{MaxEntries: 64, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var m conntrack.Meta
	a := conntrack.Action{Commit: true}
	tr.Process(tr.Now(), udpCT(ctA, ctB, 1, 2, "")[packet.EthernetLen:], 0, &a, &m)
	if tr.Len() != 1 {
		t.Fatalf("%d connections, want 1", tr.Len())
	}
	<-mu
	now += conntrack.Time(time.Hour)
	mu <- struct{}{}
	sw, err := New(Config{Table: flowtable.New(flowtable.Config{}), Conntrack: tr, SweepInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the sweeper to free the expired connection", func() (bool, error) { return tr.Len() == 0, nil })
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
}

// benchFirewall builds a switch with the stateful firewall, a tracker
// holding flows established UDP connections from A (port 1) to B (port
// 2), and port 1's worker with a batch of 64 frames of those flows (port
// 2's worker, with their replies, in the second result). The output ports
// keep nothing.
func benchFirewall(tb testing.TB, flows int) (fwd, rev *worker) {
	tb.Helper()
	c := newCTSwitch(tb, firewallRules, false)
	m := *c.sw.ports.Load()
	sinks := [3]*discardPort{{}, {}, {}}
	for no := 1; no <= 2; no++ {
		m[uint32(no)].q[0] = sinks[no]
	}
	fwd = c.sw.newWorker(m[1], sinks[1])
	rev = c.sw.newWorker(m[2], sinks[2])
	for i := range fwd.bufs {
		sport := uint16(10000 + i%flows)
		fwd.meta[i] = port.Meta{Size: copy(fwd.bufs[i][Headroom:], udpCT(ctA, ctB, sport, 53, "0123456789abcdef"))}
		rev.meta[i] = port.Meta{Size: copy(rev.bufs[i][Headroom:], udpCT(ctB, ctA, 53, sport, "0123456789abcdef"))}
	}
	fwd.process(len(fwd.bufs))
	rev.process(len(rev.bufs))
	fwd.process(len(fwd.bufs))
	if sinks[1].n == 0 || sinks[2].n < 2*len(fwd.bufs) || c.t.Len() != flows {
		tb.Fatalf("the firewall passes %d and %d frames, %d connections", sinks[2].n, sinks[1].n, c.t.Len())
	}
	return fwd, rev
}

// BenchmarkProcessBatchFirewall: a batch of 64 frames of 64 established
// UDP connections through the stateful firewall (table 0: ct(table=1);
// table 1: +est output): two pipeline runs (cache hits) and one tracker
// lookup per frame. Compare with BenchmarkProcessBatch (no ct rule).
func BenchmarkProcessBatchFirewall(b *testing.B) {
	w, _ := benchFirewall(b, 64)
	benchBatch(b, w)
}
