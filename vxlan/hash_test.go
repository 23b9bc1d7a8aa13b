package vxlan

import (
	"bytes"
	"encoding/binary"
	"testing"
)

var (
	macA = [6]byte{2, 0, 0, 0, 0, 1}
	macB = [6]byte{2, 0, 0, 0, 0, 2}
)

func tcpFrame(src, dst [4]byte, sport, dport uint16, payload []byte) []byte {
	l4 := make([]byte, 20+len(payload))
	binary.BigEndian.PutUint16(l4[0:2], sport)
	binary.BigEndian.PutUint16(l4[2:4], dport)
	l4[12] = 5 << 4
	copy(l4[20:], payload)
	return ipv4Frame(macB, macA, src, dst, 6, l4)
}

func TestSourcePortStable(t *testing.T) {
	a, b := [4]byte{10, 128, 0, 5}, [4]byte{10, 129, 2, 7}
	f1 := tcpFrame(a, b, 40000, 443, []byte("first"))
	f2 := tcpFrame(a, b, 40000, 443, []byte("a different, longer payload"))
	f2[14+4] = 0x99 // another IP id, same flow
	if SourcePort(f1) != SourcePort(f2) {
		t.Error("same flow, different source ports")
	}
	if SourcePort(f1) != SourcePort(bytes.Clone(f1)) {
		t.Error("not deterministic")
	}
	// The fixed expected value pins the hash: a change to it moves every
	// flow's underlay path, so it must be deliberate.
	if got, want := SourcePort(f1), uint16(55374); got != want {
		t.Errorf("SourcePort = %d, want %d", got, want)
	}
	for _, other := range [][]byte{
		tcpFrame(a, b, 40001, 443, nil),
		tcpFrame(a, b, 40000, 444, nil),
		tcpFrame(b, a, 443, 40000, nil),
		tcpFrame(a, [4]byte{10, 129, 2, 8}, 40000, 443, nil),
		udpFrame(macB, macA, a, b, 40000, 443, nil),
	} {
		if SourcePort(other) == SourcePort(f1) {
			t.Errorf("flow %x collides with the base flow", other[26:38])
		}
	}
}

func TestSourcePortFragments(t *testing.T) {
	a, b := [4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}
	first := udpFrame(macB, macA, a, b, 5000, 53, make([]byte, 100))
	binary.BigEndian.PutUint16(first[14+6:], 0x2000) // MF
	later := ipv4Frame(macB, macA, a, b, 17, make([]byte, 100))
	binary.BigEndian.PutUint16(later[14+6:], 13) // offset 104, no MF
	if SourcePort(first) != SourcePort(later) {
		t.Error("fragments of one datagram hash differently")
	}
}

func TestSourcePortRangeAndSpread(t *testing.T) {
	const flows, buckets = 64000, 16
	var hist [buckets]int
	seen := map[uint16]bool{}
	for i := range flows {
		f := tcpFrame([4]byte{10, 128, byte(i >> 8), byte(i)}, [4]byte{10, 129, 0, 1}, uint16(30000+i%7), 8080, nil)
		p := SourcePort(f)
		if p < SourcePortMin {
			t.Fatalf("port %d below range", p)
		}
		seen[p] = true
		hist[int(p)%buckets]++ // what Port.socketFor does
	}
	want := flows / buckets
	for i, n := range hist {
		if n < want*9/10 || n > want*11/10 {
			t.Errorf("socket %d got %d flows, want about %d: %v", i, n, want, hist)
		}
	}
	if len(seen) < 16384*9/10 {
		t.Errorf("%d flows used only %d of 16384 ports", flows, len(seen))
	}
}

func TestSourcePortOtherFrames(t *testing.T) {
	arp := unhex(t, outerARP)[50:]
	ipv6 := make([]byte, 14+40+8)
	binary.BigEndian.PutUint16(ipv6[12:], 0x86dd)
	ipv6[14] = 0x60
	ipv6[14+6] = 17
	ipv6[14+8] = 0xfd
	ipv6b := append([]byte(nil), ipv6...)
	ipv6b[14+40] = 1 // another source port
	for _, f := range [][]byte{nil, {1, 2, 3}, arp, ipv6, ipv6b, arp[:14]} {
		if p := SourcePort(f); p < SourcePortMin {
			t.Errorf("SourcePort(%x) = %d", f, p)
		}
	}
	if SourcePort(ipv6) == SourcePort(ipv6b) {
		t.Error("IPv6 ports not hashed")
	}
}

func BenchmarkSourcePort(b *testing.B) {
	f := tcpFrame([4]byte{10, 128, 0, 5}, [4]byte{10, 129, 2, 7}, 40000, 443, make([]byte, 1400))
	b.ReportAllocs()
	for b.Loop() {
		SourcePort(f)
	}
}
