package flowtable

import (
	"encoding/binary"

	"github.com/gvswitch/gvs/packet"
)

// Minimum L4 header lengths Extract needs before it reads ports, as in
// Open vSwitch's flow extraction.
const (
	sctpMinLen = 12
	icmpMinLen = 8
)

// Extract parses the Ethernet, ARP, IPv4 and TCP/UDP/SCTP/ICMP headers of
// frame into f's L2-L4 fields, which it zeroes first. InPort, Regs and the
// tunnel fields are left as they are. It returns false when frame is too
// short for an Ethernet header; a truncated L3 or L4 header leaves those
// fields zero. For ICMP, TpSrc and TpDst hold the type and code. Non-first
// IPv4 fragments get no L4 fields. ARP fills NwSrc/NwDst (SPA/TPA), ArpOp,
// NwProto (the opcode when it fits 8 bits), ArpSha and ArpTha (RFC 826).
//
// Extract does not allocate and does not retain frame.
func Extract(frame []byte, f *Fields) bool {
	f.EthSrc, f.EthDst, f.EthType = [6]byte{}, [6]byte{}, 0
	f.NwSrc, f.NwDst, f.NwProto = [4]byte{}, [4]byte{}, 0
	f.ArpOp, f.ArpSha, f.ArpTha = 0, [6]byte{}, [6]byte{}
	f.TpSrc, f.TpDst = 0, 0
	eth := packet.Ethernet(frame)
	if !eth.Valid() {
		return false
	}
	f.EthDst, f.EthSrc, f.EthType = eth.Dst(), eth.Src(), eth.Type()
	payload := frame[packet.EthernetLen:]
	switch f.EthType {
	case packet.EtherTypeARP:
		a := packet.ARP(payload)
		if a.Valid() {
			f.ArpOp = a.Op()
			if f.ArpOp <= 0xff {
				f.NwProto = uint8(f.ArpOp)
			}
			f.NwSrc, f.NwDst = a.SPA(), a.TPA()
			f.ArpSha, f.ArpTha = a.SHA(), a.THA()
		}
	case packet.EtherTypeIPv4:
		extractIPv4(payload, f)
	}
	return true
}

func extractIPv4(b []byte, f *Fields) {
	if len(b) < packet.IPv4MinLen || b[0]>>4 != 4 {
		return
	}
	ip := packet.IPv4(b)
	hl := ip.HeaderLen()
	if hl < packet.IPv4MinLen || hl > len(b) {
		return
	}
	f.NwSrc, f.NwDst, f.NwProto = ip.Src(), ip.Dst(), ip.Protocol()
	if ip.FragOff() != 0 {
		return
	}
	end := len(b)
	if tl := int(ip.TotalLen()); tl >= hl && tl < end {
		end = tl
	}
	l4 := b[hl:end]
	switch f.NwProto {
	case packet.ProtoTCP:
		if len(l4) >= packet.TCPMinLen {
			f.TpSrc, f.TpDst = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
		}
	case packet.ProtoUDP:
		if len(l4) >= packet.UDPLen {
			f.TpSrc, f.TpDst = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
		}
	case packet.ProtoSCTP:
		if len(l4) >= sctpMinLen {
			f.TpSrc, f.TpDst = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
		}
	case packet.ProtoICMP:
		if len(l4) >= icmpMinLen {
			f.TpSrc, f.TpDst = uint16(l4[0]), uint16(l4[1])
		}
	}
}
