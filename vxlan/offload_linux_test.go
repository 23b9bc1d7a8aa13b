//go:build linux

package vxlan

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// tcpSuperFrame builds an Ethernet/IPv4/TCP frame with payload bytes of
// payload, its TCP checksum partial (the pseudo-header sum), as a TAP
// with TSO delivers it.
func tcpSuperFrame(payload int) []byte {
	tcp := make([]byte, 20+payload)
	binary.BigEndian.PutUint16(tcp[0:2], 40000)
	binary.BigEndian.PutUint16(tcp[2:4], 5201)
	binary.BigEndian.PutUint32(tcp[4:8], 1000)
	binary.BigEndian.PutUint32(tcp[8:12], 1)
	tcp[12] = 5 << 4
	tcp[13] = packet.TCPFlagACK | packet.TCPFlagPSH
	binary.BigEndian.PutUint16(tcp[14:16], 1000)
	for i := range payload {
		tcp[20+i] = byte(i*13 + i>>8)
	}
	f := ipv4Frame([6]byte{2, 0, 0, 0, 0, 2}, [6]byte{2, 0, 0, 0, 0, 1}, [4]byte{10, 128, 0, 3}, [4]byte{10, 128, 2, 3}, packet.ProtoTCP, tcp)
	ip := f[packet.EthernetLen:]
	ip[6] = 0x40
	binary.BigEndian.PutUint16(ip[10:12], 0)
	binary.BigEndian.PutUint16(ip[10:12], ^packet.Checksum(ip[:20], 0))
	binary.BigEndian.PutUint16(ip[20+16:], packet.PseudoHeaderSum(ip[12:16], ip[16:20], packet.ProtoTCP, len(tcp)))
	return f
}

// TestOffloadRoundTrip sends TCP super-frames through Write (UDP GSO where
// available) and reads them with Read (UDP GRO and coalescing with
// Offload): every payload byte must arrive, in order, with correct
// checksums once the partial one is completed.
func TestOffloadRoundTrip(t *testing.T) {
	requireRoot(t)
	for _, offload := range []bool{true, false} {
		tn := newTestNet(t, false)
		pa, _ := NewPeers(addrB)
		pb, _ := NewPeers(addrA)
		a := listenIn(t, tn.a, Config{Local: addrA, Peers: pa, Offload: offload})
		b := listenIn(t, tn.b, Config{Local: addrB, Peers: pb, Offload: offload})
		gro, gso := a.Offloads()
		t.Logf("offload=%v: udp_gro %v udp_gso %v", offload, gro, gso)
		const mss = 1398
		orig := tcpSuperFrame(40 * mss)
		buf := withFrame(orig)
		ep := port.Endpoint{Addr: addrB.As4(), VNI: 7}
		g := packet.GSO{Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 54, Size: mss, CsumStart: 34, CsumOffset: 16}
		// The neighbor resolution drops all but a few datagrams of a first burst.
		warm := [][]byte{withFrame(tcpSuperFrame(10))}
		if _, err := a.Write(warm, metas(warm, ep), headroom); err != nil {
			t.Fatal(err)
		}
		bb := newBatch(8)
		for i := range bb.bufs {
			bb.bufs[i] = make([]byte, headroom+packet.MaxSuperFrame)
		}
		if err := b.setReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Read(bb.bufs, bb.meta, headroom); err != nil {
			t.Fatal(err)
		}
		if n, err := a.Write([][]byte{buf}, metas([][]byte{buf}, ep, g), headroom); n != 1 || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
		var payload []byte
		want := orig[54:]
		merged := 0
		for len(payload) < len(want) {
			n, err := b.Read(bb.bufs, bb.meta, headroom)
			if err != nil {
				t.Fatalf("after %d bytes: %v", len(payload), err)
			}
			for i := range n {
				f := bb.frame(i)
				g := bb.meta[i].GSO
				if g.IsGSO() {
					merged++
					c := ^packet.Checksum(f[g.CsumStart:], 0)
					binary.BigEndian.PutUint16(f[g.CsumStart+g.CsumOffset:], c)
				}
				if !packet.TCPChecksumValid(f) {
					t.Fatalf("frame %d (%+v): bad TCP checksum", i, g)
				}
				if addrVNI(bb.meta[i].Tunnel) != (port.Endpoint{Addr: addrA.As4(), VNI: 7}) {
					t.Fatalf("endpoint %+v", bb.meta[i].Tunnel)
				}
				payload = append(payload, f[54:]...)
			}
			t.Logf("read %d frames, first %d bytes %+v", n, bb.meta[0].Size, bb.meta[0].GSO)
		}
		if !offload && merged > 0 {
			t.Errorf("offload off: %d super-frames read", merged)
		}
		if !bytes.Equal(payload, want) {
			t.Fatal("payload differs")
		}
		if st := b.Stats(); st.Dropped() != 0 {
			t.Errorf("drops %+v", st)
		}
	}
}

// TestDropsCountedWhileBlocked: datagrams from an unknown peer are counted
// one by one (also when UDP GRO merged them) while Read keeps waiting for
// an acceptable one.
func TestDropsCountedWhileBlocked(t *testing.T) {
	requireRoot(t)
	tn := newTestNet(t, false)
	peers, _ := NewPeers(addrB)
	p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, Offload: true})
	unknown := udpIn(t, tn.b, "192.0.2.3:0")
	done := make(chan error, 1)
	go func() {
		b := newBatch(8)
		_, err := p.Read(b.bufs, b.meta, headroom)
		done <- err
	}()
	payload := make([]byte, HeaderLen+100)
	PutHeader(payload, 1)
	for range 5 {
		if _, err := unknown.WriteToUDPAddrPort(payload, netip.AddrPortFrom(addrA, UDPPort)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(5*time.Second, func() bool { return p.Stats().Drops[DropUnknownPeer] >= 5 })
	if got := p.Stats().Drops[DropUnknownPeer]; got != 5 {
		t.Errorf("unknown-peer drops %d, want 5", got)
	}
	p.Close()
	if err := <-done; err == nil {
		t.Error("Read returned no error after Close")
	}
}

// linkedPorts opens port a (configured as ca) in one namespace and b (cb)
// in the other, each the other's only peer, and sends a frame from a to b
// to ep, so that the neighbour entry is resolved: its queue would drop
// most of a first burst.
func linkedPorts(t *testing.T, ca, cb Config, ep port.Endpoint) (tn *testNet, a, b *Port) {
	t.Helper()
	requireRoot(t)
	tn = newTestNet(t, false)
	ca.Local, cb.Local = addrA, addrB
	ca.Peers, _ = NewPeers(addrB)
	cb.Peers, _ = NewPeers(addrA)
	a = listenIn(t, tn.a, ca)
	b = listenIn(t, tn.b, cb)
	warm := [][]byte{withFrame(udpFrame(gvsMAC, vx0MAC, overlayA, overlayB, 1, 2, []byte{0}))}
	if _, err := a.Write(warm, metas(warm, ep), headroom); err != nil {
		t.Fatal(err)
	}
	readFrames(t, b, newBatch(1), 1)
	return tn, a, b
}

// TestWriteRunBatches sends bursts of complete frames through Write (one
// UDP GSO train per run of equal sizes where the kernel has it): every
// frame arrives, intact and in order.
func TestWriteRunBatches(t *testing.T) {
	ep := port.Endpoint{Addr: addrB.As4(), VNI: 9}
	_, a, b := linkedPorts(t, Config{Offload: true}, Config{Offload: true}, ep)
	frame := func(i, size int) []byte {
		p := bytes.Repeat([]byte{byte(i)}, size)
		return udpFrame(gvsMAC, vx0MAC, overlayA, overlayB, 1000, 2000, p)
	}
	rb := newBatch(64)
	var want [][]byte
	var bufs [][]byte
	for i := range 40 {
		size := 64
		switch {
		case i == 20:
			size = 200 // a bigger one breaks the run
		case i == 30:
			size = 10 // a smaller one ends the run
		}
		f := frame(i, size)
		want = append(want, f)
		bufs = append(bufs, withFrame(f))
	}
	meta := metas(bufs, ep)
	if n, err := a.Write(bufs, meta, headroom); n != len(bufs) || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	readFrames(t, b, rb, len(want))
	for i, w := range want {
		if !bytes.Equal(rb.frame(i), w) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if st := a.Stats(); st.TxPackets != uint64(len(want)+1) {
		t.Errorf("tx packets %d, want %d", st.TxPackets, len(want)+1)
	}
	if raceEnabled {
		return
	}
	// Neither path allocates: runs of complete frames and a super-frame.
	super := [][]byte{withFrame(tcpSuperFrame(20 * 1398))}
	sm := metas(super, ep, packet.GSO{Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 54, Size: 1398, CsumStart: 34, CsumOffset: 16})
	allocs := testing.AllocsPerRun(10, func() {
		a.Write(bufs, meta, headroom)
		a.Write(super, sm, headroom)
	})
	if allocs != 0 {
		t.Errorf("Write: %v allocs per call", allocs)
	}
}

// TestWriteFlowsInOrder sends frames of many flows and super-frames mixed
// in one call, more than one round of Config.Batch: the send path takes
// them in the order of their send sockets, so frames of different flows
// may overtake each other, but every frame arrives, and the frames of one
// flow in the order they were given.
func TestWriteFlowsInOrder(t *testing.T) {
	ep := port.Endpoint{Addr: addrB.As4(), VNI: 3}
	_, a, b := linkedPorts(t, Config{Offload: true, Batch: 16, SendSockets: 4}, Config{}, ep)
	rb := newBatch(64)
	const flows, perFlow = 8, 5
	var bufs [][]byte
	var meta []port.Meta
	wantSegs := 0
	for i := range perFlow {
		for f := range flows {
			if f == 0 && i == 2 {
				// Flow 0's third frame is a TCP super-frame of 3 segments.
				sf := withFrame(tcpSuperFrame(3 * 500))
				bufs = append(bufs, sf)
				meta = append(meta, port.Meta{Size: len(sf) - headroom, Tunnel: ep, Hash: 0,
					GSO: packet.GSO{Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 54, Size: 500, CsumStart: 34, CsumOffset: 16}})
				wantSegs += 3
				continue
			}
			fr := withFrame(udpFrame(gvsMAC, vx0MAC, overlayA, overlayB, uint16(1000+f), 53, []byte{byte(f), byte(i)}))
			bufs = append(bufs, fr)
			meta = append(meta, port.Meta{Size: len(fr) - headroom, Tunnel: ep, Hash: uint32(f)})
			wantSegs++
		}
	}
	if n, err := a.Write(bufs, meta, headroom); n != len(bufs) || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	readFrames(t, b, rb, wantSegs)
	next := make([]int, flows) // the next frame number expected per UDP flow
	segs := 0
	for k := range wantSegs {
		f := rb.frame(k)
		ip := packet.IPv4(f[packet.EthernetLen:])
		if ip.Protocol() == packet.ProtoTCP {
			// Flow 0's super-frame, between its frames 1 and 3.
			if next[0] != 2 {
				t.Errorf("flow 0's super-frame arrived after its frame %d", next[0]-1)
			}
			if segs++; segs == 3 {
				next[0] = 3
			}
			continue
		}
		fl, i := int(f[len(f)-2]), int(f[len(f)-1])
		if i != next[fl] {
			t.Errorf("flow %d: frame %d arrived where %d was due", fl, i, next[fl])
		}
		next[fl] = i + 1
	}
	if segs != 3 {
		t.Errorf("%d TCP segments arrived, want 3", segs)
	}
	if st := a.Stats(); st.TxPackets != uint64(wantSegs+1) || st.TxErrors != 0 {
		t.Errorf("stats %+v, want %d datagrams", st, wantSegs+1)
	}
}

// TestWriteGSOFallback: a UDP GSO train or super-frame whose datagrams do
// not fit the route's MTU is refused by the kernel (EMSGSIZE; EINVAL on
// older kernels, which also turns UDP GSO off); the port sends its
// datagrams one by one (the kernel fragments them), and every frame still
// arrives.
func TestWriteGSOFallback(t *testing.T) {
	ep := port.Endpoint{Addr: addrB.As4(), VNI: 5}
	tn, a, b := linkedPorts(t, Config{Offload: true}, Config{}, ep)
	if _, gso := a.Offloads(); !gso {
		t.Skip("no UDP GSO on this kernel")
	}
	rb := newBatch(64)
	ip(t, "-n", tn.a, "link", "set", "va", "mtu", "1000")
	var bufs [][]byte
	for i := range 4 {
		bufs = append(bufs, withFrame(udpFrame(gvsMAC, vx0MAC, overlayA, overlayB, 1000, 2000, bytes.Repeat([]byte{byte(i)}, 1200))))
	}
	bufs = append(bufs, withFrame(tcpSuperFrame(2*1300)))
	meta := metas(bufs, ep)
	meta[4].GSO = packet.GSO{Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 54, Size: 1300, CsumStart: 34, CsumOffset: 16}
	if n, err := a.Write(bufs, meta, headroom); n != len(bufs) || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	readFrames(t, b, rb, 6)
	for i := range 4 {
		if f := rb.frame(i); len(f) != 14+20+8+1200 || f[len(f)-1] != byte(i) {
			t.Errorf("frame %d: %d bytes", i, len(f))
		}
	}
	if st := a.Stats(); st.TxPackets != 7 || st.TxErrors != 0 {
		t.Errorf("stats %+v, want 7 datagrams", st)
	}
}

// udpSuperFrame builds an Ethernet/IPv4/UDP frame with payload bytes of
// payload, its UDP checksum partial, as a TAP with USO delivers it.
func udpSuperFrame(payload int) []byte {
	udp := make([]byte, 8+payload)
	binary.BigEndian.PutUint16(udp[0:2], 40000)
	binary.BigEndian.PutUint16(udp[2:4], 9000)
	binary.BigEndian.PutUint16(udp[4:6], uint16(len(udp)))
	for i := range payload {
		udp[8+i] = byte(i*7 + i>>8)
	}
	f := ipv4Frame([6]byte{2, 0, 0, 0, 0, 2}, [6]byte{2, 0, 0, 0, 0, 1}, [4]byte{10, 128, 0, 3}, [4]byte{10, 128, 2, 3}, packet.ProtoUDP, udp)
	ip := f[packet.EthernetLen:]
	binary.BigEndian.PutUint16(ip[20+6:], packet.PseudoHeaderSum(ip[12:16], ip[16:20], packet.ProtoUDP, len(udp)))
	return f
}

// TestOffloadRoundTripUDP sends a UDP super-frame through Write and reads
// it with Read: with CoalesceUDP the datagrams come back
// merged into few super-frames, without it one by one; either way, cut
// back into datagrams, every one has a valid checksum and the payload
// arrives whole and in order.
func TestOffloadRoundTripUDP(t *testing.T) {
	requireRoot(t)
	for _, coalesce := range []bool{true, false} {
		tn := newTestNet(t, false)
		pa, _ := NewPeers(addrB)
		pb, _ := NewPeers(addrA)
		a := listenIn(t, tn.a, Config{Local: addrA, Peers: pa, Offload: true})
		b := listenIn(t, tn.b, Config{Local: addrB, Peers: pb, Offload: true, CoalesceUDP: coalesce})
		const size, count = 1000, 40
		orig := udpSuperFrame(count * size)
		ep := port.Endpoint{Addr: addrB.As4(), VNI: 7}
		g := packet.GSO{Type: packet.GSOUDPL4, NeedsCsum: true, HdrLen: 42, Size: size, CsumStart: 34, CsumOffset: 6}
		bb := newBatch(8)
		for i := range bb.bufs {
			bb.bufs[i] = make([]byte, headroom+packet.MaxSuperFrame)
		}
		// Resolve the neighbour first: its queue drops most of a burst.
		warm := [][]byte{withFrame(udpSuperFrame(10))}
		if _, err := a.Write(warm, metas(warm, ep), headroom); err != nil {
			t.Fatal(err)
		}
		if err := b.setReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Read(bb.bufs, bb.meta, headroom); err != nil {
			t.Fatal(err)
		}
		ob := [][]byte{withFrame(orig)}
		if n, err := a.Write(ob, metas(ob, ep, g), headroom); n != 1 || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
		var payload []byte
		frames, merged := 0, 0
		dst := make([]byte, 2*packet.MaxSuperFrame)
		sizes := make([]int, 128)
		// The datagrams the sender put on the wire (inner frames).
		sentBuf := make([]byte, 2*packet.MaxSuperFrame)
		sn, err := packet.SegmentUDP(sentBuf, orig, g, 0, sizes)
		if err != nil || sn != count {
			t.Fatalf("segment the original: %d, %v", sn, err)
		}
		var sent, want [][]byte
		for j, off := 0, 0; j < sn; j++ {
			sent = append(sent, bytes.Clone(sentBuf[off:off+sizes[j]]))
			off += sizes[j]
		}
		for len(payload) < count*size {
			n, err := b.Read(bb.bufs, bb.meta, headroom)
			if err != nil {
				t.Fatalf("coalesce=%v, after %d bytes: %v", coalesce, len(payload), err)
			}
			for i := range n {
				frames++
				f := bb.frame(i)
				g := bb.meta[i].GSO
				ip := f[packet.EthernetLen:]
				if g.IsGSO() {
					merged++
					if g.Type != packet.GSOUDPL4 || g.Size != size {
						t.Fatalf("frame %d: gso %+v", i, g)
					}
					// The field holds the pseudo-header sum over the whole
					// UDP length, as the kernel's USO expects.
					if got, want := binary.BigEndian.Uint16(ip[26:28]), packet.PseudoHeaderSum(ip[12:16], ip[16:20], packet.ProtoUDP, len(ip)-20); got != want {
						t.Fatalf("frame %d: partial checksum %#x, want %#x", i, got, want)
					}
					c := ^packet.Checksum(f[g.CsumStart:], 0)
					binary.BigEndian.PutUint16(f[g.CsumStart+g.CsumOffset:], c)
				}
				// The frame as delivered (merged frames completed) carries
				// valid IPv4 header and UDP checksums.
				if packet.Checksum(ip[:20], 0) != 0xffff ||
					packet.Checksum(ip[20:], packet.PseudoHeaderSum(ip[12:16], ip[16:20], packet.ProtoUDP, len(ip)-20)) != 0xffff {
					t.Fatalf("frame %d (%+v): bad checksum", i, g)
				}
				// Cut back into datagrams (one for a plain frame): they
				// must be the sender's datagrams byte for byte (a merged
				// frame keeps the first datagram's IP ID, so the rest
				// follow on).
				k, err := packet.SegmentUDP(dst, f, packet.GSO{Type: packet.GSOUDPL4, Size: size}, 0, sizes)
				if err != nil {
					t.Fatal(err)
				}
				off := 0
				for j := range k {
					d := dst[off : off+sizes[j]]
					off += sizes[j]
					if w := len(want); w >= len(sent) || !bytes.Equal(d, sent[w]) {
						t.Fatalf("frame %d datagram %d (datagram %d of the send) differs", i, j, w)
					}
					want = append(want, d)
					payload = append(payload, d[42:]...)
				}
			}
		}
		if !bytes.Equal(payload, orig[42:]) {
			t.Fatalf("coalesce=%v: payload differs", coalesce)
		}
		if coalesce && (merged == 0 || frames > count/2) {
			t.Errorf("coalesce: %d frames (%d merged) for %d datagrams", frames, merged, count)
		}
		if !coalesce && (merged != 0 || frames != count) {
			t.Errorf("no coalesce: %d frames (%d merged) for %d datagrams", frames, merged, count)
		}
	}
}
