//go:build linux

package vxlan

import (
	"bytes"
	"testing"
	"time"

	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// benchSender opens a tunnel port in a namespace of its own, sending to a
// peer namespace where a UDP socket that nobody reads holds the VXLAN port
// (the kernel drops what overflows its small buffer). It returns once a
// datagram has made it across, so the neighbour entry is resolved.
func benchSender(b *testing.B) (*Port, port.Endpoint) {
	b.Helper()
	requireRoot(b)
	tn := newTestNet(b, false)
	peers, _ := NewPeers(addrB)
	p := listenIn(b, tn.a, Config{Local: addrA, Peers: peers, Offload: true})
	sink := udpIn(b, tn.b, "192.0.2.2:4789")
	_ = sink.SetReadBuffer(64 << 10)
	ep := port.Endpoint{Addr: addrB.As4(), VNI: 7}
	warm := [][]byte{withFrame(udpFrame(vx0MAC, gvsMAC, overlayA, overlayB, 1, 2, []byte{1}))}
	wm := metas(warm, ep)
	buf := make([]byte, 2048)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := p.Write(warm, wm, headroom); err != nil {
			b.Fatal(err)
		}
		_ = sink.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, _, err := sink.ReadFromUDPAddrPort(buf); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no datagram reached the peer namespace")
		}
	}
	return p, ep
}

// benchFrames returns n buffers with 1400-byte UDP frames of flows flows.
func benchFrames(n, flows int) [][]byte {
	bufs := make([][]byte, n)
	payload := bytes.Repeat([]byte{0xa5}, 1400-14-20-8)
	for i := range bufs {
		bufs[i] = withFrame(udpFrame(vx0MAC, gvsMAC, overlayA, overlayB, uint16(40000+i%flows), 53, payload))
	}
	return bufs
}

// benchWrite writes 64 frames of 1400 bytes of the given number of flows
// per call; ns/frame is per frame.
func benchWrite(b *testing.B, flows int) {
	p, ep := benchSender(b)
	bufs := benchFrames(64, flows)
	meta := metas(bufs, ep)
	b.ReportAllocs()
	b.SetBytes(int64(len(bufs) * 1400))
	for b.Loop() {
		if _, err := p.Write(bufs, meta, headroom); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(bufs)), "ns/frame")
}

// BenchmarkWriteFlows is the switch's batch toward vxlan0 under many
// flows: 64 frames of 1400 bytes, each of its own flow, per call.
func BenchmarkWriteFlows(b *testing.B) { benchWrite(b, 64) }

// BenchmarkWriteTrain is a burst of one flow: 64 frames of 1400 bytes of
// one flow per call, which go out as UDP GSO trains where the kernel has
// UDP_SEGMENT.
func BenchmarkWriteTrain(b *testing.B) { benchWrite(b, 1) }

// BenchmarkWriteSuper is a TCP super-frame from a pod with TSO: 44
// segments of 1398 bytes per call, cut by packet.SegmentTCP.
func BenchmarkWriteSuper(b *testing.B) {
	p, ep := benchSender(b)
	const mss = 1398
	frame := tcpSuperFrame(44 * mss)
	bufs := [][]byte{withFrame(frame)}
	meta := metas(bufs, ep, packet.GSO{Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 54, Size: mss, CsumStart: 34, CsumOffset: 16})
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := p.Write(bufs, meta, headroom); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteSuper4 is four such super-frames of four flows per call.
func BenchmarkWriteSuper4(b *testing.B) {
	p, ep := benchSender(b)
	const mss = 1398
	var bufs [][]byte
	for i := range 4 {
		f := tcpSuperFrame(44 * mss)
		f[packet.EthernetLen+20+1] = byte(i) // the source port: four flows
		bufs = append(bufs, withFrame(f))
	}
	g := packet.GSO{Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 54, Size: mss, CsumStart: 34, CsumOffset: 16}
	meta := metas(bufs, ep, g, g, g, g)
	b.ReportAllocs()
	b.SetBytes(int64(4 * len(bufs[0])))
	for b.Loop() {
		if _, err := p.Write(bufs, meta, headroom); err != nil {
			b.Fatal(err)
		}
	}
}
