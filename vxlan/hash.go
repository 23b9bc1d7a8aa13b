package vxlan

import (
	"encoding/binary"

	"github.com/gvswitch/gvs/packet"
)

// The range SourcePort maps flow hashes into: the IANA dynamic/private port
// range (RFC 6335 §6), 49152–65535, which RFC 7348 §5 recommends for the
// outer source port. Linux's vxlan driver uses the host's
// net.ipv4.ip_local_port_range instead (by default 32768–60999); gvs uses a
// fixed range so the hash does not depend on host settings.
const (
	SourcePortMin = 49152
	SourcePortMax = 65535
)

// FlowHash returns a deterministic, non-cryptographic 32-bit hash of the
// inner frame's flow, computed from:
//
//  1. IPv4: source and destination address, protocol, and for TCP, UDP and
//     SCTP the source and destination ports. Fragments (offset > 0 or MF set)
//     hash without ports, so every fragment of a datagram hashes alike.
//  2. IPv6: source and destination address and the next-header byte, plus
//     ports when the next header is TCP, UDP or SCTP (extension headers are
//     not walked).
//  3. Anything else (ARP, short or malformed frames): the Ethernet
//     destination, source and EtherType — whatever of them is present.
//
// It reads the frame through packet views and allocates nothing.
func FlowHash(frame []byte) uint32 {
	eth := packet.Ethernet(frame)
	if !eth.Valid() {
		return hashBytes(frame)
	}
	switch eth.Type() {
	case packet.EtherTypeIPv4:
		ip := packet.IPv4(eth.Payload())
		if !ip.Valid() {
			break
		}
		src := binary.BigEndian.Uint32(ip[12:16])
		dst := binary.BigEndian.Uint32(ip[16:20])
		proto := ip.Protocol()
		var ports uint32
		if ip.FragOff() == 0 && !ip.MoreFragments() && hasPorts(proto) {
			l4 := ip[ip.HeaderLen():]
			if len(l4) >= 4 {
				ports = binary.BigEndian.Uint32(l4[0:4])
			}
		}
		return mix(uint64(src)<<32|uint64(dst), uint64(proto)<<32|uint64(ports))
	case packet.EtherTypeIPv6:
		ip := eth.Payload()
		if len(ip) < 40 || ip[0]>>4 != 6 {
			break
		}
		next := ip[6]
		var ports uint32
		if hasPorts(next) && len(ip) >= 44 {
			ports = binary.BigEndian.Uint32(ip[40:44])
		}
		a := binary.BigEndian.Uint64(ip[8:16]) ^ binary.BigEndian.Uint64(ip[24:32])
		b := binary.BigEndian.Uint64(ip[16:24]) ^ binary.BigEndian.Uint64(ip[32:40])
		return mix(a, mix64(b)^(uint64(next)<<32|uint64(ports)))
	}
	return hashBytes(frame[:packet.EthernetLen])
}

// SourcePort returns the outer UDP source port for an inner frame:
// FlowHash mapped onto SourcePortMin–SourcePortMax. One flow always gets the
// same port; different flows spread over the range (entropy for ECMP in the
// underlay, RFC 7348 §5). It allocates nothing.
func SourcePort(frame []byte) uint16 {
	// The top 14 bits of the hash index the 16384 ports of the range.
	return SourcePortMin + uint16(FlowHash(frame)>>18)
}

func hasPorts(proto uint8) bool {
	return proto == packet.ProtoTCP || proto == packet.ProtoUDP || proto == packet.ProtoSCTP
}

// hashBytes is FNV-1a over at most the first 14 bytes of b (the fallback
// for frames without an IP header).
func hashBytes(b []byte) uint32 {
	if len(b) > packet.EthernetLen {
		b = b[:packet.EthernetLen]
	}
	h := uint32(2166136261)
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	return uint32(mix64(uint64(h)) >> 32)
}

// mix combines two 64-bit keys into a 32-bit hash.
func mix(a, b uint64) uint32 {
	return uint32(mix64(a^mix64(b+0x9e3779b97f4a7c15)) >> 32)
}

// mix64 is the SplitMix64 finalizer: a cheap bijective mixer whose output
// bits each depend on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
