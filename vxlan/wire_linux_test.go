package vxlan

import (
	"encoding/binary"
	"testing"

	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// TestPutWireHeader checks the outer headers of a sent and of a received
// frame field by field, and that writing them allocates nothing.
func TestPutWireHeader(t *testing.T) {
	p := &Port{local: [4]byte{192, 0, 2, 1}, dstPort: 4790, tx: []txSocket{{port: 50001}, {port: 50002}}}
	m := &port.Meta{Size: 100, Hash: 3, Tunnel: port.Endpoint{Addr: [4]byte{192, 0, 2, 9}, Port: 40000, VNI: 0xabcdef}}
	b := make([]byte, p.WireHeaderLen())
	for _, tc := range []struct {
		received     bool
		src, dst     [4]byte
		sport, dport uint16
	}{
		{false, p.local, m.Tunnel.Addr, 50002, 4790},
		{true, m.Tunnel.Addr, p.local, 40000, 4790},
	} {
		p.PutWireHeader(b, m, tc.received)
		if packet.Ethernet(b).Type() != packet.EtherTypeIPv4 {
			t.Fatalf("received=%v: EtherType %#x", tc.received, packet.Ethernet(b).Type())
		}
		ip := packet.IPv4(b[packet.EthernetLen:])
		if ip[0] != 0x45 || ip.Src() != tc.src || ip.Dst() != tc.dst || ip.Protocol() != packet.ProtoUDP ||
			int(ip.TotalLen()) != 20+8+HeaderLen+m.Size || packet.Checksum(ip[:20], 0) != 0xffff {
			t.Errorf("received=%v: IPv4 header %x", tc.received, []byte(ip[:20]))
		}
		udp := b[packet.EthernetLen+20:]
		if sp, dp, l := binary.BigEndian.Uint16(udp), binary.BigEndian.Uint16(udp[2:]), binary.BigEndian.Uint16(udp[4:]); sp != tc.sport || dp != tc.dport || int(l) != 8+HeaderLen+m.Size {
			t.Errorf("received=%v: UDP %d → %d length %d, want %d → %d", tc.received, sp, dp, l, tc.sport, tc.dport)
		}
		if h := Header(udp[8:]); !h.Valid() || h.VNI() != m.Tunnel.VNI {
			t.Errorf("received=%v: VXLAN header %x", tc.received, []byte(h))
		}
	}
	// A super-frame's lengths are capped.
	big := *m
	big.Size = packet.MaxSuperFrame
	p.PutWireHeader(b, &big, false)
	if l := packet.IPv4(b[packet.EthernetLen:]).TotalLen(); l != 0xffff {
		t.Errorf("super-frame: IP length %d, want 65535", l)
	}
	if n := testing.AllocsPerRun(100, func() { p.PutWireHeader(b, m, false) }); n != 0 {
		t.Errorf("PutWireHeader allocates %v times", n)
	}
}
