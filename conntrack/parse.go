package conntrack

// pkt is what Process reads from a packet's headers, once.
type pkt struct {
	k       key // the packet's key; for an ICMP error, the quoted packet's key reversed
	l4      int // offset of the L4 header (the IPv4 header length)
	end     int // end of the IPv4 datagram (its total length)
	proto   uint8
	first   bool // a first fragment, more to come
	related bool // an ICMP error quoting a packet of some connection
	inner   int  // related: offset of the quoted IPv4 header
	innerL4 int  // related: offset of the quoted L4 header

	// TCP
	tcpFlags uint8
	tcpHdr   int // TCP header length
	seq, ack uint32
	win      uint16
	payload  uint32 // TCP payload bytes: a whole GSO super-frame's
}

// TCP flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpACK = 0x10
	tcpURG = 0x20
)

// parse reads the IPv4 packet b, a whole datagram or its first fragment,
// into p, checking what OVS's conn_key_extract checks: header lengths,
// the IPv4 and L4 checksums (unless pf says otherwise; never the L4 sum
// of a first fragment, which covers data still to come), non-zero ports,
// ICMP types it can track, and for an ICMP error that the quoted packet
// was sent by the error's destination. It returns the reason when the
// packet is +inv. Later fragments are not for parse.
func parse(b []byte, zone uint16, pf PacketFlags, p *pkt) Reason {
	if len(b) < 20 || b[0]>>4 != 4 {
		return ReasonMalformed
	}
	ihl := int(b[0]&15) * 4
	tot := int(get16(b, 2))
	if ihl < 20 || tot < ihl || tot > len(b) {
		return ReasonMalformed
	}
	if pf&CsumVerified == 0 && fold(sum(b[:ihl], 0)) != 0xffff {
		return ReasonChecksum
	}
	fo := get16(b, 6)
	if fo&0x1fff != 0 {
		return ReasonMalformed
	}
	p.k = key{a: get64(b, 12), b: uint64(zone)<<16 | uint64(b[9])<<8}
	p.l4, p.end, p.proto, p.first = ihl, tot, b[9], fo&0x2000 != 0
	l4 := b[ihl:tot]
	checkL4 := pf&(CsumVerified|CsumPartial) == 0 && !p.first
	switch p.proto {
	case ProtoTCP:
		if len(l4) < 20 {
			return ReasonMalformed
		}
		doff := int(l4[12]>>4) * 4
		if doff < 20 || doff > len(l4) {
			return ReasonMalformed
		}
		if checkL4 && fold(sum(l4, pseudoSum(b, ProtoTCP, len(l4)))) != 0xffff {
			return ReasonChecksum
		}
		if get16(l4, 0) == 0 || get16(l4, 2) == 0 {
			return ReasonMalformed
		}
		p.k.b |= uint64(get32(l4, 0)) << 32
		p.tcpFlags = l4[13]
		p.tcpHdr = doff
		p.seq, p.ack = get32(l4, 4), get32(l4, 8)
		p.win = get16(l4, 14)
		p.payload = uint32(len(l4) - doff)
	case ProtoUDP:
		if len(l4) < 8 {
			return ReasonMalformed
		}
		if ulen := int(get16(l4, 4)); ulen < 8 || ulen > len(l4) && !p.first {
			return ReasonMalformed
		}
		if checkL4 && get16(l4, 6) != 0 && fold(sum(l4, pseudoSum(b, ProtoUDP, len(l4)))) != 0xffff {
			return ReasonChecksum
		}
		if get16(l4, 0) == 0 || get16(l4, 2) == 0 {
			return ReasonMalformed
		}
		p.k.b |= uint64(get32(l4, 0)) << 32
	case ProtoSCTP:
		// The common header: ports, verification tag, CRC32c (not
		// checked here; the receiving stack does).
		if len(l4) < 12 {
			return ReasonMalformed
		}
		if get16(l4, 0) == 0 || get16(l4, 2) == 0 {
			return ReasonMalformed
		}
		p.k.b |= uint64(get32(l4, 0)) << 32
	case ProtoICMP:
		if len(l4) < 8 {
			return ReasonMalformed
		}
		if checkL4 && fold(sum(l4, 0)) != 0xffff {
			return ReasonChecksum
		}
		typ := l4[0]
		switch typ {
		case icmpEcho, icmpEchoReply, icmpTimestamp, icmpTimestampReply, icmpInfo, icmpInfoReply:
			if l4[1] != 0 {
				return ReasonMalformed
			}
			id := uint64(get16(l4, 4))
			p.k.b |= id<<48 | id<<32 | uint64(typ)
		case icmpUnreach, icmpSourceQuench, icmpRedirect, icmpTimeExceeded, icmpParamProblem:
			return parseQuoted(b, p)
		default:
			return ReasonMalformed
		}
	}
	return ReasonNone
}

// parseQuoted reads the packet an ICMP error quotes (RFC 792: its IPv4
// header and at least 8 bytes of its L4 header) and makes p's key the
// reverse of the quoted packet's, the key of the packet the error travels
// with. The quoted header's checksums are not checked (OVS does not
// either); it must not be a later fragment nor another ICMP error.
func parseQuoted(b []byte, p *pkt) Reason {
	in := p.l4 + 8
	q := b[in:p.end]
	if len(q) < 20 || q[0]>>4 != 4 {
		return ReasonMalformed
	}
	ihl := int(q[0]&15) * 4
	if ihl < 20 || ihl > len(q) || get16(q, 6)&0x1fff != 0 {
		return ReasonMalformed
	}
	k := key{a: get64(q, 12), b: uint64(p.k.zone())<<16 | uint64(q[9])<<8}
	if k.src() != p.k.dst() {
		return ReasonMalformed
	}
	l4 := q[ihl:]
	switch k.proto() {
	case ProtoTCP, ProtoUDP, ProtoSCTP:
		if len(l4) < 8 || get16(l4, 0) == 0 || get16(l4, 2) == 0 {
			return ReasonMalformed
		}
		k.b |= uint64(get32(l4, 0)) << 32
	case ProtoICMP:
		if len(l4) < 8 || !icmpQuery(l4[0]) || l4[1] != 0 {
			return ReasonMalformed
		}
		id := uint64(get16(l4, 4))
		k.b |= id<<48 | id<<32 | uint64(l4[0])
	}
	p.k = k.reverse()
	p.related = true
	p.inner = in
	p.innerL4 = in + ihl
	return ReasonNone
}

// tcpWscale returns the window-scale option of a SYN's options (OVS's
// tcp_get_wscale): wsKnown|shift, or 0 without the option.
func tcpWscale(opt []byte) uint8 {
	ws := uint8(0)
	for len(opt) >= 3 {
		switch opt[0] {
		case 0: // end of options
			return ws
		case 1: // no-op
			opt = opt[1:]
			continue
		case 3: // window scale
			ws = min(opt[2], tcpMaxWscale) | wsKnown
		}
		n := int(opt[1])
		if n < 2 {
			n = 2
		}
		if n > len(opt) {
			break
		}
		opt = opt[n:]
	}
	return ws
}
