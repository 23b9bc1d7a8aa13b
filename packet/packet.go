// Package packet holds allocation-free views of the headers the switch reads:
// Ethernet II, ARP (RFC 826), IPv4 (RFC 791), UDP (RFC 768) and TCP (RFC 793).
//
// Each header type is a []byte view. Call the Valid method (or the package's
// Parse functions) first; the accessors after it are unchecked and panic on a
// slice that is too short, as slicing does.
package packet

import "encoding/binary"

// Header lengths and EtherTypes used across gvs.
const (
	EthernetLen = 14
	ARPLen      = 28
	IPv4MinLen  = 20
	UDPLen      = 8
	TCPMinLen   = 20

	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeIPv6 = 0x86dd

	ProtoICMP = 1
	ProtoTCP  = 6
	ProtoUDP  = 17
	ProtoSCTP = 132
)

// Ethernet is a view of an Ethernet II header (no 802.1Q tag).
type Ethernet []byte

// Valid reports whether e holds a whole Ethernet header.
func (e Ethernet) Valid() bool { return len(e) >= EthernetLen }

// Dst returns the destination MAC address.
func (e Ethernet) Dst() (a [6]byte) { copy(a[:], e[0:6]); return }

// Src returns the source MAC address.
func (e Ethernet) Src() (a [6]byte) { copy(a[:], e[6:12]); return }

// Type returns the EtherType.
func (e Ethernet) Type() uint16 { return binary.BigEndian.Uint16(e[12:14]) }

// SetDst overwrites the destination MAC address.
func (e Ethernet) SetDst(a [6]byte) { copy(e[0:6], a[:]) }

// SetSrc overwrites the source MAC address.
func (e Ethernet) SetSrc(a [6]byte) { copy(e[6:12], a[:]) }

// SetType overwrites the EtherType.
func (e Ethernet) SetType(t uint16) { binary.BigEndian.PutUint16(e[12:14], t) }

// Payload returns what follows the Ethernet header.
func (e Ethernet) Payload() []byte { return e[EthernetLen:] }

// ARP is a view of an ARP packet for Ethernet/IPv4 (RFC 826).
type ARP []byte

// Valid reports whether a is a whole Ethernet/IPv4 ARP packet.
func (a ARP) Valid() bool {
	return len(a) >= ARPLen &&
		binary.BigEndian.Uint16(a[0:2]) == 1 && // hardware type Ethernet
		binary.BigEndian.Uint16(a[2:4]) == EtherTypeIPv4 &&
		a[4] == 6 && a[5] == 4
}

// Op returns the ARP operation (1 request, 2 reply).
func (a ARP) Op() uint16 { return binary.BigEndian.Uint16(a[6:8]) }

// SHA returns the sender hardware address.
func (a ARP) SHA() (m [6]byte) { copy(m[:], a[8:14]); return }

// SPA returns the sender protocol address.
func (a ARP) SPA() (ip [4]byte) { copy(ip[:], a[14:18]); return }

// THA returns the target hardware address.
func (a ARP) THA() (m [6]byte) { copy(m[:], a[18:24]); return }

// TPA returns the target protocol address.
func (a ARP) TPA() (ip [4]byte) { copy(ip[:], a[24:28]); return }

// IPv4 is a view of an IPv4 header and what follows it (RFC 791).
type IPv4 []byte

// Valid reports whether v starts with a well-formed IPv4 header: version 4,
// header length at least 20 and within v, total length within v.
func (v IPv4) Valid() bool {
	if len(v) < IPv4MinLen || v[0]>>4 != 4 {
		return false
	}
	hl := v.HeaderLen()
	tl := int(v.TotalLen())
	return hl >= IPv4MinLen && hl <= len(v) && tl >= hl && tl <= len(v)
}

// HeaderLen returns the header length in bytes (IHL × 4).
func (v IPv4) HeaderLen() int { return int(v[0]&0x0f) * 4 }

// TotalLen returns the total length field.
func (v IPv4) TotalLen() uint16 { return binary.BigEndian.Uint16(v[2:4]) }

// ID returns the identification field.
func (v IPv4) ID() uint16 { return binary.BigEndian.Uint16(v[4:6]) }

// FragOff returns the fragment offset in 8-byte units.
func (v IPv4) FragOff() uint16 { return binary.BigEndian.Uint16(v[6:8]) & 0x1fff }

// MoreFragments reports whether the MF flag is set.
func (v IPv4) MoreFragments() bool { return v[6]&0x20 != 0 }

// TTL returns the time-to-live.
func (v IPv4) TTL() uint8 { return v[8] }

// Protocol returns the protocol number of the payload.
func (v IPv4) Protocol() uint8 { return v[9] }

// Src returns the source address.
func (v IPv4) Src() (ip [4]byte) { copy(ip[:], v[12:16]); return }

// Dst returns the destination address.
func (v IPv4) Dst() (ip [4]byte) { copy(ip[:], v[16:20]); return }

// Payload returns the bytes after the header up to the total length.
func (v IPv4) Payload() []byte { return v[v.HeaderLen():v.TotalLen()] }

// UDP is a view of a UDP header (RFC 768).
type UDP []byte

// Valid reports whether u holds a whole UDP header.
func (u UDP) Valid() bool { return len(u) >= UDPLen }

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u[0:2]) }

// DstPort returns the destination port.
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[2:4]) }

// Length returns the UDP length field.
func (u UDP) Length() uint16 { return binary.BigEndian.Uint16(u[4:6]) }

// Checksum returns the checksum field.
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[6:8]) }

// TCP is a view of a TCP header (RFC 793).
type TCP []byte

// Valid reports whether t holds a whole TCP header, options included.
func (t TCP) Valid() bool {
	return len(t) >= TCPMinLen && int(t[12]>>4)*4 >= TCPMinLen && int(t[12]>>4)*4 <= len(t)
}

// SrcPort returns the source port.
func (t TCP) SrcPort() uint16 { return binary.BigEndian.Uint16(t[0:2]) }

// DstPort returns the destination port.
func (t TCP) DstPort() uint16 { return binary.BigEndian.Uint16(t[2:4]) }

// Seq returns the sequence number.
func (t TCP) Seq() uint32 { return binary.BigEndian.Uint32(t[4:8]) }

// HeaderLen returns the data offset in bytes.
func (t TCP) HeaderLen() int { return int(t[12]>>4) * 4 }

// Flags returns the flag bits (FIN 0x01 … CWR 0x80).
func (t TCP) Flags() uint8 { return t[13] }
