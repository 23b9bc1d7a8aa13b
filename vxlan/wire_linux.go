package vxlan

import (
	"encoding/binary"

	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// wireHeaderLen is the outer Ethernet, IPv4, UDP and VXLAN headers.
const wireHeaderLen = packet.EthernetLen + 20 + 8 + HeaderLen

// WireHeaderLen returns the length of the outer headers of a frame on the
// wire: Ethernet, IPv4, UDP and VXLAN, 50 bytes (vswitch.Framer).
func (p *Port) WireHeaderLen() int { return wireHeaderLen }

// PutWireHeader writes into b[:WireHeaderLen()] the outer headers the frame
// with metadata m has on the wire (vswitch.Framer, for captures): IPv4
// between the node (Config.Local) and the remote one, m.Tunnel.Addr; UDP
// from the remote's port m.Tunnel.Port to the port's own (received), or
// from the send socket's port, SourcePortFor(m.Hash), to the tunnel's UDP
// port (sent); VXLAN with m.Tunnel.VNI. The MACs (zero here), the IP ID
// (0), TTL (64) and the UDP checksum (none here) are the kernel's business
// and may differ on the wire; the lengths of a super-frame, which leaves
// as several datagrams, are capped at 65535. It does not allocate.
func (p *Port) PutWireHeader(b []byte, m *port.Meta, received bool) {
	_ = b[wireHeaderLen-1]
	src, dst := p.local, m.Tunnel.Addr
	sport, dport := p.SourcePortFor(m.Hash), uint16(p.dstPort)
	if received {
		src, dst = dst, src
		sport = m.Tunnel.Port
	}
	clear(b[:12]) // MACs
	binary.BigEndian.PutUint16(b[12:14], packet.EtherTypeIPv4)
	ip := b[packet.EthernetLen : packet.EthernetLen+20]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:4], uint16(min(20+8+HeaderLen+m.Size, 0xffff)))
	binary.BigEndian.PutUint32(ip[4:8], 0x4000) // ID 0, DF
	ip[8], ip[9] = 64, packet.ProtoUDP
	ip[10], ip[11] = 0, 0
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:12], ^packet.Checksum(ip, 0))
	udp := b[packet.EthernetLen+20 : packet.EthernetLen+28]
	binary.BigEndian.PutUint16(udp[0:2], sport)
	binary.BigEndian.PutUint16(udp[2:4], dport)
	binary.BigEndian.PutUint16(udp[4:6], uint16(min(8+HeaderLen+m.Size, 0xffff)))
	binary.BigEndian.PutUint16(udp[6:8], 0)
	PutHeader(b[packet.EthernetLen+28:wireHeaderLen], m.Tunnel.VNI)
}
