package conntrack

import "math/rand/v2"

// NAT: choosing a connection's translated reply key when it is committed,
// and rewriting packets to it afterwards.
//
// A translated connection has two keys that are not each other's
// reverse: the forward key, as the first packet arrived, and the reply
// key, as replies will arrive. SNAT puts the new source in the reply
// key's destination, DNAT the new destination in its source. A packet of
// direction d is rewritten to carry the reverse of the other direction's
// key, which is the identity for an untranslated connection.

// Ephemeral port classes OVS picks a source port from when no port range
// is given, by the class of the original port.
const (
	natPortMin = 1024
	natPortMax = 65535
)

// maxPortAttempts bounds a port search's first round (OVS: 128), halved
// for each random restart while at least 16.
const maxPortAttempts = 128

// linkNAT chooses entry idx's reply key for the translation n of a
// connection with forward key fwd, unique in the zone, and links the
// entry (OVS's nat_get_unique_tuple, with the uniqueness enforced under
// the stripe locks as the entry is linked, so that concurrent commits
// cannot pick the same tuple). It returns revTaken when the range is
// exhausted.
func (t *Tracker) linkNAT(idx uint32, fwd key, n *NAT, now Time) (linkResult, uint32) {
	src := n.Kind == NATSrc
	minA, maxA := be32(n.MinAddr), be32(n.MaxAddr)
	if maxA < minA {
		maxA = minA
	}
	h := t.natHash(fwd, n, minA, maxA, n.Persistent) // picks the address
	off := t.natHash(fwd, n, minA, maxA, false)      // picks the first port
	if n.Random {
		off = rand.Uint32()
	}
	// The address: from the range, by hash; all zero keeps the packet's
	// own (nat(src=0.0.0.0): translate the port only if it collides).
	var addr uint32
	switch {
	case minA != 0:
		addr = minA + h%(maxA-minA+1)
	case src:
		addr = fwd.src()
	default:
		addr = fwd.dst()
	}
	rev := fwd.reverse()
	if src {
		rev.setDst(addr)
	} else {
		rev.setSrc(addr)
	}
	proto := fwd.proto()
	pat := proto == ProtoTCP || proto == ProtoUDP || proto == ProtoICMP
	if !pat {
		return t.linkRev(idx, fwd, rev, now)
	}
	ports := n.MinPort != 0
	minP, maxP := n.MinPort, n.MaxPort
	if maxP < minP {
		maxP = minP
	}
	// The source port (the reply's destination): the original one first,
	// then its ephemeral class; or the given range for SNAT with ports.
	var sCur, sMin, sMax uint16
	if src && ports {
		sMin, sMax = minP, maxP
		sCur = sMin + uint16(off%(uint32(sMax-sMin)+1))
	} else {
		sCur = fwd.sport()
		switch {
		case sCur < 512:
			sMin, sMax = 1, 511
		case sCur < 1024:
			sMin, sMax = 600, 1023
		default:
			sMin, sMax = natPortMin, natPortMax
		}
	}
	icmp := proto == ProtoICMP
	// DNAT with ports: the destination port (the reply's source) from the
	// range first; OVS falls back to moving the source port.
	if !src && ports && !icmp {
		dCur := minP + uint16(off%(uint32(maxP-minP)+1))
		rev.setDport(sCur)
		res, g := t.searchPort(idx, fwd, rev, true, dCur, minP, maxP, now)
		if res != revTaken {
			return res, g
		}
		rev.setSport(dCur)
	}
	return t.searchPort(idx, fwd, rev, false, sCur, sMin, sMax, now)
}

// searchPort tries reply keys that differ from rev in one port, from cur
// on through [lo, hi] (cur itself first even outside the range), as
// OVS's nat_get_unique_l4: at most 128 tries, then random restarts with
// half as many while that is at least 16. replySrc picks the reply key's
// source port (DNAT's new destination port), else its destination port
// (the new source port; for ICMP both, the identifier).
func (t *Tracker) searchPort(idx uint32, fwd, rev key, replySrc bool, cur, lo, hi uint16, now Time) (linkResult, uint32) {
	rng := uint32(hi-lo) + 1
	attempts := min(rng, maxPortAttempts)
	for {
		for range attempts {
			c := rev
			switch {
			case replySrc:
				c.setSport(cur)
			case fwd.proto() == ProtoICMP:
				c.setSport(cur)
				c.setDport(cur)
			default:
				c.setDport(cur)
			}
			if _, _, _, ok := t.lookup(c, t.hash(c)); !ok {
				res, g := t.linkRev(idx, fwd, c, now)
				if res != revTaken {
					return res, g
				}
			}
			if cur < lo || cur >= hi {
				cur = lo
			} else {
				cur++
			}
		}
		if attempts >= rng || attempts < 16 {
			return revTaken, 0
		}
		attempts /= 2
		cur = lo + uint16(rand.Uint32()%rng)
	}
}

// natHash hashes what picks a translation: the forward key (with the
// tracker's seed), or for persistent, the source address alone with a
// fixed seed so that the choice survives a restart; then the range and
// the zone (OVS's nat_range_hash).
func (t *Tracker) natHash(k key, n *NAT, minA, maxA uint32, persistent bool) uint32 {
	var h uint64
	if persistent {
		h = mix(uint64(k.src()))
	} else {
		a, b := k.words()
		h = mix(a^t.seed[0]) ^ mix(b^t.seed[1])
	}
	h = mix(h ^ uint64(minA)<<32 ^ uint64(maxA))
	h = mix(h ^ uint64(n.MinPort)<<48 ^ uint64(n.MaxPort)<<32 ^ uint64(k.proto())<<16 ^ uint64(k.zone()))
	return uint32(h ^ h>>32)
}

// applyNAT applies the connection's recorded translation to a packet,
// unless an earlier ct action translated it in this zone already (OVS's
// handle_nat). e is locked.
func (t *Tracker) applyNAT(b []byte, pf PacketFlags, p *pkt, e *entry, reply bool, zone uint16, m *Meta) {
	if e.nat == natNone || m.State&(StateSNAT|StateDNAT) != 0 && zone == m.Zone {
		return
	}
	m.State &^= StateSNAT | StateDNAT
	t.translate(b, pf, p, e, reply, m)
}

// translate rewrites the packet for the locked entry e (OVS's
// nat_packet): a packet of direction d gets the reverse of the other
// direction's key; for an ICMP error, the outer address the connection
// translates and the whole quoted packet. It marks m +snat or +dnat by
// the translation this direction undergoes (a reply to SNAT is DNATed).
func (t *Tracker) translate(b []byte, pf PacketFlags, p *pkt, e *entry, reply bool, m *Meta) {
	act, d := e.nat, 0
	if reply {
		act, d = natSrc+natDst-act, 1
	}
	if act == natSrc {
		m.State |= StateSNAT
	} else {
		m.State |= StateDNAT
	}
	other := keyOf(e.k[1-d][0].Load(), e.k[1-d][1].Load())
	to := other.reverse()
	partial := pf&CsumPartial != 0
	if !p.related {
		l4cs := l4Checksum(b, p.proto, p.l4, p.end, partial)
		udp := p.proto == ProtoUDP
		setAddr(b, 0, 12, to.src(), l4cs, partial, udp)
		setAddr(b, 0, 16, to.dst(), l4cs, partial, udp)
		switch p.proto {
		case ProtoTCP, ProtoUDP:
			setPort(b, p.l4, to.sport(), l4cs, partial, udp)
			setPort(b, p.l4+2, to.dport(), l4cs, partial, udp)
		case ProtoICMP:
			setPort(b, p.l4+4, to.sport(), p.l4+2, partial, false)
		}
		return
	}
	// An ICMP error: the outer header's translated address (the ICMP
	// checksum does not cover it), then the quoted packet, which becomes
	// the other direction's packet as it was before translation.
	if act == natSrc {
		setAddr(b, 0, 12, to.src(), -1, false, false)
	} else {
		setAddr(b, 0, 16, to.dst(), -1, false, false)
	}
	in, il4, end := p.inner, p.innerL4, p.end
	iproto := b[in+9]
	cs := -1 // the quoted L4 checksum, when quoted and in use
	switch iproto {
	case ProtoTCP:
		if il4+18 <= end {
			cs = il4 + 16
		}
	case ProtoUDP:
		if get16(b, il4+6) != 0 {
			cs = il4 + 6
		}
	}
	iudp := iproto == ProtoUDP
	setAddr(b, in, 12, other.src(), cs, false, iudp)
	setAddr(b, in, 16, other.dst(), cs, false, iudp)
	switch iproto {
	case ProtoTCP, ProtoUDP:
		setPort(b, il4, other.sport(), cs, false, iudp)
		setPort(b, il4+2, other.dport(), cs, false, iudp)
	case ProtoICMP:
		setPort(b, il4+4, other.sport(), il4+2, false, false)
	}
	if !partial {
		l4 := p.l4
		put16(b, l4+2, 0)
		put16(b, l4+2, ^fold(sum(b[l4:end], 0)))
	}
}

// l4Checksum returns the offset of the TCP or UDP checksum a translation
// must update, or -1 (other protocols; a UDP datagram sent without a
// checksum, unless the sum is partial).
func l4Checksum(b []byte, proto uint8, l4, end int, partial bool) int {
	switch proto {
	case ProtoTCP:
		return l4 + 16
	case ProtoUDP:
		if partial || get16(b, l4+6) != 0 {
			return l4 + 6
		}
	}
	return -1
}

// setAddr writes the IPv4 address at ip+off (12: source, 16:
// destination) and updates the header checksum and, at l4cs (unless -1),
// the L4 checksum whose pseudo-header includes it: incrementally (RFC
// 1624) for a complete sum, as Linux's inet_proto_csum_replace4 with
// pseudohdr for a partial one. A complete UDP sum that comes out 0 is sent
// as 0xffff (0 means none).
func setAddr(b []byte, ip, off int, v uint32, l4cs int, partial, udp bool) {
	old := get32(b, ip+off)
	if old == v {
		return
	}
	put32(b, ip+off, v)
	put16(b, ip+10, csum32(get16(b, ip+10), old, v))
	if l4cs < 0 {
		return
	}
	c := get16(b, l4cs)
	if partial {
		c = partial32(c, old, v)
	} else if c = csum32(c, old, v); udp && c == 0 {
		c = 0xffff
	}
	put16(b, l4cs, c)
}

// setPort writes the 16-bit field at off (a port, an ICMP identifier)
// and updates the checksum at cs (unless -1); a partial sum does not
// cover it and stays.
func setPort(b []byte, off int, v uint16, cs int, partial, udp bool) {
	old := get16(b, off)
	if old == v {
		return
	}
	put16(b, off, v)
	if cs < 0 || partial {
		return
	}
	c := csum16(get16(b, cs), old, v)
	if udp && c == 0 {
		c = 0xffff
	}
	put16(b, cs, c)
}
