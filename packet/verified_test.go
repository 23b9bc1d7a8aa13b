package packet

import (
	"encoding/binary"
	"testing"
)

// TestCoalescerVerified: Verified is true exactly for frames whose IPv4
// header and L4 checksums the coalescer checked and found valid, so that
// a caller may skip checking them again (port.Meta.CsumVerified); a frame
// with a bad or absent checksum, an IPv6 one, a fragment or one of another
// protocol must report false, or the connection tracker would take a bad
// checksum for a good one.
func TestCoalescerVerified(t *testing.T) {
	udp := func() []byte { return udpSuperFrame(4, 100, false) }
	tcp := func() []byte { return superFrame(100, TCPFlagACK) }
	badL4 := func(f []byte) []byte { f[len(f)-1] ^= 0xff; return f }
	badIP := func(f []byte) []byte { f[EthernetLen+8]--; return f } // TTL, header sum not fixed
	for _, tc := range []struct {
		name  string
		frame []byte
		want  bool
	}{
		{"udp", udp(), true},
		{"udp bad checksum", badL4(udp()), false},
		{"udp bad ip header checksum", badIP(udp()), false},
		{"udp no checksum", func() []byte {
			f := udp()
			binary.BigEndian.PutUint16(f[EthernetLen+26:], 0)
			return f
		}(), false},
		{"udp fragment", func() []byte {
			f := udp()
			f[EthernetLen+6] |= 0x20 // MF
			ipv4HeaderChecksum(f[EthernetLen:], 20)
			return f
		}(), false},
		{"udp ipv6", udpSuperFrame(6, 100, false), false},
		{"tcp", tcp(), true},
		{"tcp bad checksum", badL4(tcp()), false},
		{"tcp bad ip header checksum", badIP(tcp()), false},
		{"tcp fragment", func() []byte {
			f := tcp()
			f[EthernetLen+6] |= 0x20
			ipv4HeaderChecksum(f[EthernetLen:], 20)
			return f
		}(), false},
		{"icmp", func() []byte {
			f := udp()
			f[EthernetLen+9] = 1
			ipv4HeaderChecksum(f[EthernetLen:], 20)
			return f
		}(), false},
	} {
		for _, withUDP := range []bool{true, false} {
			var c Coalescer
			c.UDP = withUDP
			c.Start(make([]byte, MaxSuperFrame), tc.frame)
			c.Finish()
			want := tc.want
			if tc.name == "udp" && !withUDP {
				want = false // not UDP-coalescing: copied as it is, unchecked
			}
			if got := c.Verified(); got != want {
				t.Errorf("%s (UDP coalescing %v): Verified %v, want %v", tc.name, withUDP, got, want)
			}
		}
	}
}

// TestCoalescerVerifiedMerged: a merged frame is verified, and a datagram
// with a bad checksum is not merged into it (it starts a frame of its own,
// unverified).
func TestCoalescerVerifiedMerged(t *testing.T) {
	dgrams := splitUDP(t, udpSuperFrame(4, 3000, false), 1000)
	var c Coalescer
	c.UDP = true
	c.Start(make([]byte, MaxSuperFrame), dgrams[0])
	if !c.Append(dgrams[1]) {
		t.Fatal("second datagram not merged")
	}
	bad := append([]byte(nil), dgrams[2]...)
	bad[len(bad)-1] ^= 0xff
	if c.Append(bad) {
		t.Fatal("a datagram with a bad checksum was merged")
	}
	if _, g := c.Finish(); !g.NeedsCsum || !c.Verified() {
		t.Fatalf("merged frame: gso %+v, Verified %v; want a partial checksum, verified", g, c.Verified())
	}
	c.Start(make([]byte, MaxSuperFrame), bad)
	c.Finish()
	if c.Verified() {
		t.Fatal("the bad datagram's own frame is Verified")
	}
}
