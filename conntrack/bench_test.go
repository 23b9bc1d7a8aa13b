package conntrack

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// flowPkt returns a UDP packet of flow i (source 10.i.i.i:1000 to
// 10.0.0.2:53) and the reply's, for the large-table benchmarks.
func flowPkt(i uint32) (out, back []byte) {
	out = udp4(cli, 1000, srv, 53, 0)
	back = udp4(srv, 53, cli, 1000, 0)
	setFlow(out, back, i)
	return out, back
}

// setFlow makes out and back packets of flow i by rewriting their
// addresses; their checksums go stale, so callers pass CsumVerified.
func setFlow(out, back []byte, i uint32) {
	put32(out, 12, 0x0a000000|i)
	if back != nil {
		put32(back, 16, 0x0a000000|i)
	}
}

// fill commits n established UDP flows.
func fillFlows(tb testing.TB, tr *Tracker, now Time, n uint32) {
	out, back := flowPkt(0)
	var m Meta
	for i := range n {
		setFlow(out, back, i+1)
		m = Meta{}
		if r := tr.Process(now, out, CsumVerified, &commit, &m); r != ReasonNone {
			tb.Fatalf("flow %d: %v", i, r)
		}
		m = Meta{}
		tr.Process(now, back, CsumVerified, &lookup, &m)
	}
	if tr.Len() != int(n) {
		tb.Fatalf("%d entries, want %d", tr.Len(), n)
	}
}

func TestZeroAllocs(t *testing.T) {
	tr, c := established(t)
	now := c.Now()
	data := tcpc(tcpACK|tcpPSH, 1001, 5001, 1400)
	udpOut := udp4(pod, 5000, far, 53, 100)
	udpBack := udp4(far, 53, node, 5000, 100)
	var m Meta
	tr.Process(now, udp4(pod, 5000, far, 53, 100), 0, &snat, &m)
	tr.Process(now, append([]byte(nil), udpBack...), 0, &natBare, &m)
	frags := fragment(udp4(pod, 5000, far, 53, 3000), 1500)
	errPkt := icmpErr(rtr, node, icmpUnreach, 3, quote(udp4(node, 5000, far, 53, 100), 8))
	scratch := make([]byte, 4000)
	newFlows := make([][]byte, 0, 2000)
	for i := range cap(newFlows) {
		out, _ := flowPkt(uint32(i + 1))
		newFlows = append(newFlows, out)
	}
	next := 0
	cases := []struct {
		name string
		f    func()
	}{
		{"TCP established", func() { m = Meta{}; tr.Process(now, data, 0, &lookup, &m) }},
		{"TCP established, checksum verified", func() { m = Meta{}; tr.Process(now, data, CsumVerified, &lookup, &m) }},
		{"second ct on the cached connection", func() { tr.Process(now, data, 0, &lookup, &m) }},
		{"UDP SNAT out", func() { b := scratch[:len(udpOut)]; copy(b, udpOut); m = Meta{}; tr.Process(now, b, 0, &natBare, &m) }},
		{"UDP un-SNAT back", func() { b := scratch[:len(udpBack)]; copy(b, udpBack); m = Meta{}; tr.Process(now, b, 0, &natBare, &m) }},
		{"ICMP error, translated", func() { b := scratch[:len(errPkt)]; copy(b, errPkt); m = Meta{}; tr.Process(now, b, 0, &natBare, &m) }},
		{"fragments", func() {
			for _, f := range frags {
				b := scratch[:len(f)]
				copy(b, f)
				m = Meta{}
				tr.Process(now, b, 0, &natBare, &m)
			}
		}},
		{"new connection committed", func() {
			m = Meta{}
			tr.Process(now, newFlows[next%len(newFlows)], CsumVerified, &commit, &m)
			next++
		}},
		{"invalid", func() { m = Meta{}; tr.Process(now, data[:30], 0, &commit, &m) }},
		{"sweep", func() { tr.Sweep(now, 64) }},
		{"prefetch", func() { tr.Prefetch(data); tr.Prefetch(errPkt); tr.Prefetch(frags[1]) }},
	}
	for _, tc := range cases {
		if n := testing.AllocsPerRun(200, tc.f); n != 0 {
			t.Errorf("%s: %v allocations", tc.name, n)
		}
	}
}

func TestEntrySize(t *testing.T) {
	if entrySize != 128 {
		t.Errorf("entry is %d bytes, want 128 (two cache lines)", entrySize)
	}
}

// loop runs pkt through ct action a once per b.Loop iteration, each time
// as a new packet (a zero Meta), after next (if not nil) has prepared it,
// and checks the last ct_state.
func loop(b *testing.B, tr *Tracker, c *clock, pkt []byte, pf PacketFlags, a *Action, want State, next func(i uint32)) {
	var m Meta
	i := uint32(0)
	b.ReportAllocs()
	for b.Loop() {
		if next != nil {
			next(i)
			i++
		}
		m = Meta{}
		tr.Process(c.Now(), pkt, pf, a, &m)
	}
	if m.State != want {
		b.Fatalf("state %v, want %v", m.State, want)
	}
}

// BenchmarkEstablishedHot is one established UDP flow's packets through
// ct(): a lookup, the entry lock, the protocol update, the metadata.
func BenchmarkEstablishedHot(b *testing.B) {
	tr, c := newTracker(b, Config{})
	fillFlows(b, tr, c.Now(), 1)
	out, _ := flowPkt(1)
	loop(b, tr, c, out, CsumVerified, &lookup, trkEst, nil)
}

// BenchmarkEstablishedHotTCP is an established TCP connection's data
// segment (window checks included), checksum partial as from a TAP.
func BenchmarkEstablishedHotTCP(b *testing.B) {
	tr, c := newTracker(b, Config{})
	for _, p := range [][]byte{tcpc(tcpSYN, 1000, 0, 0), tcps(tcpSYN|tcpACK, 5000, 1001, 0), tcpc(tcpACK, 1001, 5001, 0)} {
		var m Meta
		tr.Process(c.Now(), p, 0, &commit, &m)
	}
	loop(b, tr, c, tcpc(tcpACK|tcpPSH, 1001, 5001, 1400), CsumPartial, &lookup, trkEst, nil)
}

// BenchmarkEstablishedSNAT is an established SNATed TCP connection's
// packet through ct(nat): lookup, update and the rewrite with
// incremental checksums (the copy restoring the packet included).
func BenchmarkEstablishedSNAT(b *testing.B) {
	tr, c := newTracker(b, Config{})
	var m Meta
	tr.Process(c.Now(), tcp4(pod, 40000, far, 80, tcpSYN, 1, 0, 0), 0, &snat, &m)
	m = Meta{}
	tr.Process(c.Now(), tcp4(far, 80, node, 40000, tcpSYN|tcpACK, 9, 2, 0), 0, &natBare, &m)
	tmpl := tcp4(pod, 40000, far, 80, tcpACK, 2, 10, 1400)
	pkt := make([]byte, len(tmpl))
	loop(b, tr, c, pkt, CsumPartial, &natBare, trkEst|StateSNAT, func(uint32) { copy(pkt[:40], tmpl[:40]) })
}

const bigTable = 1 << 20

// BenchmarkEstablishedRandom1M looks up established flows at random in a
// table of 1,048,576 (cache and TLB misses dominate).
func BenchmarkEstablishedRandom1M(b *testing.B) {
	tr, c := newTracker(b, Config{MaxEntries: bigTable})
	fillFlows(b, tr, c.Now(), bigTable)
	order := rand.Perm(bigTable)
	out, _ := flowPkt(1)
	loop(b, tr, c, out, CsumVerified, &lookup, trkEst, func(i uint32) {
		setFlow(out, nil, uint32(order[i&(bigTable-1)])+1)
	})
}

// BenchmarkEstablishedRandom1MBatch is BenchmarkEstablishedRandom1M as a
// switch worker would run it: a batch of 32 packets arrives, Prefetch
// over the batch, then ct for each. It reports the time per packet.
func BenchmarkEstablishedRandom1MBatch(b *testing.B) {
	const batch = 32
	tr, c := newTracker(b, Config{MaxEntries: bigTable})
	fillFlows(b, tr, c.Now(), bigTable)
	order := rand.Perm(bigTable)
	var pkts [batch][]byte
	for j := range pkts {
		pkts[j], _ = flowPkt(1)
	}
	var m Meta
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range pkts { // a batch arrives
			setFlow(p, nil, uint32(order[i&(bigTable-1)])+1)
			i++
		}
		tr.Prefetch(pkts[:]...)
		for _, p := range pkts {
			m = Meta{}
			tr.Process(c.Now(), p, CsumVerified, &lookup, &m)
		}
	}
	if m.State != trkEst {
		b.Fatal(m.State)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/pkt")
}

// BenchmarkEstablishedHot1M is BenchmarkEstablishedHot in a full table of
// 1,048,576 entries.
func BenchmarkEstablishedHot1M(b *testing.B) {
	tr, c := newTracker(b, Config{MaxEntries: bigTable})
	fillFlows(b, tr, c.Now(), bigTable)
	out, _ := flowPkt(12345)
	loop(b, tr, c, out, CsumVerified, &lookup, trkEst, nil)
}

// benchCommit commits a new UDP connection per iteration with action a
// (lookup miss, limits, slot, link; with nat, the tuple choice), each to
// a server of its own, flushing the table, untimed, when it fills.
func benchCommit(b *testing.B, a *Action, want State) {
	const n = 1 << 18
	tr, c := newTracker(b, Config{MaxEntries: n})
	tmpl, _ := flowPkt(1)
	out := make([]byte, len(tmpl))
	loop(b, tr, c, out, CsumVerified, a, want, func(i uint32) {
		if i%n == n-1 {
			b.StopTimer()
			tr.Flush()
			b.StartTimer()
		}
		copy(out, tmpl)
		setFlow(out, nil, i%n+1)
		put32(out, 16, 0x0b000000|i%n)
	})
}

// BenchmarkCommitNew commits a new connection per iteration.
func BenchmarkCommitNew(b *testing.B) { benchCommit(b, &commit, trkNew) }

// BenchmarkCommitNewSNAT commits a new connection per iteration with
// nat(src=…), which keeps the source port (no collision).
func BenchmarkCommitNewSNAT(b *testing.B) { benchCommit(b, &snat, trkNew|StateSNAT) }

// BenchmarkMemoryPerEntry reports the heap a tracker of 1,048,576 entries
// takes, full, per entry.
func BenchmarkMemoryPerEntry(b *testing.B) {
	for b.Loop() {
		b.ReportMetric(memoryPerEntry(b, bigTable), "B/entry")
	}
}

// memoryPerEntry measures what a full table of n entries takes: the Go
// heap in use before New and after filling it, plus what New mapped
// outside the heap (slab_linux.go), divided by the entries.
func memoryPerEntry(tb testing.TB, n uint32) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr, c := newTracker(tb, Config{MaxEntries: int(n)})
	fillFlows(tb, tr, c.Now(), n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(tr)
	return float64(after.HeapInuse-before.HeapInuse+uint64(tr.mapped)) / float64(n)
}

func TestMemoryPerEntry(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("fills a table of 1 M entries")
	}
	start := time.Now()
	per := memoryPerEntry(t, bigTable)
	t.Logf("%.1f bytes per entry (1 M entries, filled in %v)", per, time.Since(start))
	if per > 256 {
		t.Errorf("%.1f bytes per entry, want at most 256", per)
	}
}

// BenchmarkMemoryLatency1M is the floor under BenchmarkEstablishedRandom1M
// on the machine at hand: one dependent cache miss, a pointer chase
// through a random cycle across a slab of 1,048,576 entries allocated as
// New allocates the table's. A single random lookup needs two in a row
// (the bucket, then the entry).
func BenchmarkMemoryLatency1M(b *testing.B) {
	tr, _ := newTracker(b, Config{MaxEntries: bigTable})
	perm := rand.Perm(bigTable)
	for i := range perm {
		tr.entries[perm[i]].expires = Time(perm[(i+1)%bigTable])
	}
	j := Time(perm[0])
	for b.Loop() {
		j = tr.entries[j].expires
	}
	if j < 0 {
		b.Fatal(j)
	}
}
