package conntrack

import "time"

// Process runs one ct action, a, on the IPv4 packet b and updates the
// packet's metadata m. b starts at the IPv4 header (the caller strips the
// link layer), belongs to the caller, and may be a TCP or UDP GSO
// super-frame of up to 64 KiB whose headers are its first segment's; it
// is rewritten in place when the connection is translated. now comes
// from Tracker.Now (read once per batch). Process allocates nothing and
// is safe for concurrent use; it returns ReasonNone, the reason the packet
// is +inv, or the reason a commit was refused (the packet then stays
// +trk+new, as in OVS).
//
// The steps, as OVS's conntrack_execute and process_one take them:
//
//  1. Entering a zone other than the packet's last ct zone clears its
//     ct_state.
//  2. A later IPv4 fragment takes the verdict its first fragment got in
//     this zone, and the same address translation (frag.go); without one
//     it is +inv.
//  3. A packet whose previous ct action (without nat) found a
//     connection in this same zone is not looked up again: it takes that
//     connection's mark and label (and its translation if a asks for nat),
//     and its ct_state stays as it was.
//  4. The headers are parsed and checked (parse.go); a malformed packet or
//     a bad checksum makes it +inv.
//  5. The connection is looked up by the packet's key, from either
//     direction; a packet translated by an earlier ct action in this zone
//     is looked up by its key reversed, which is the connection's other
//     key. An ICMP error is looked up by the packet it quotes.
//  6. force on a connection seen in its reply direction ends it, so that
//     step 8 starts a new one.
//  7. Found: the protocol updates the connection (TCP window checks and
//     state, UDP/ICMP/other replies seen) and its timeout; the packet is
//     +est, +new (no reply yet), +inv (out of window, bad flags) or, for
//     an ICMP error, +rel; +rpl in the reply direction. With nat, the
//     recorded translation is applied (not to +inv packets).
//  8. Not found: an ICMP error is +inv; a packet that cannot open a
//     connection (a SYN+ACK, an ICMP reply) is +inv; any other is +new,
//     and with commit it becomes a connection, within the global and zone
//     limits (evicting an unreplied or closing one if need be), with a
//     translation chosen by nat(src|dst=…) unique in the zone.
//  9. The metadata takes the connection's mark, label and original
//     tuple, then exec's set_field values, which the connection keeps.
func (t *Tracker) Process(now Time, b []byte, pf PacketFlags, a *Action, m *Meta) Reason {
	// The n-th ct action a packet meets (ct_clear starts the count again)
	// keys its fragment records (frag.go); every return below counts this
	// one (stepped).
	step := m.step
	zone := a.Zone
	if m.State != 0 && m.Zone != zone {
		m.State = 0
	}
	if len(b) >= 20 && b[0]>>4 == 4 && get16(b, 6)&0x1fff != 0 {
		return stepped(m, step, t.count1(t.laterFragment(now, b, pf, a, m, step)))
	}
	m.fragPorts = false // only a later fragment has them
	first := len(b) >= 20 && get16(b, 6)&0x2000 != 0
	if m.conn != 0 && !a.Force && !first {
		if r, ok := t.cached(b, pf, a, m); ok {
			return stepped(m, step, r)
		}
	}
	var p pkt
	if r := parse(b, zone, pf, &p); r != ReasonNone {
		return stepped(m, step, t.count1(t.invalid(m, zone, r)))
	}
	src, dst := get32(b, 12), get32(b, 16) // before any translation
	r := t.track(now, b, pf, a, m, &p)
	if p.first {
		t.recordFragment(now, fragKey{src: src, dst: dst, id: get16(b, 4), zone: zone, proto: p.proto, step: step},
			uint32(p.end-p.l4), b, m, r)
	}
	return stepped(m, step, t.count1(r))
}

// stepped records in m that it met one more ct action (after step) and
// returns r.
func stepped(m *Meta, step uint8, r Reason) Reason {
	m.step = step + 1
	return r
}

// count1 counts a reason other than ReasonNone and returns it.
func (t *Tracker) count1(r Reason) Reason {
	if r != ReasonNone {
		t.stats.reasons[r].Add(1)
	}
	return r
}

// invalid makes m +trk+inv with no connection.
func (t *Tracker) invalid(m *Meta, zone uint16, r Reason) Reason {
	*m = Meta{State: StateTrk | StateInv, Zone: zone}
	return r
}

// cached is step 3: the connection the packet's previous ct action found,
// in the same zone. It reports false when there is none any more.
func (t *Tracker) cached(b []byte, pf PacketFlags, a *Action, m *Meta) (Reason, bool) {
	idx := m.conn - 1
	if int(idx) >= len(t.entries) {
		m.conn = 0
		return ReasonNone, false
	}
	e := &t.entries[idx]
	e.mu.Lock()
	if e.gen.Load() != m.gen || uint16(e.k[0][1].Load()>>16) != a.Zone {
		e.mu.Unlock()
		m.conn = 0
		return ReasonNone, false
	}
	if a.NAT.Kind != NATNone {
		var p pkt
		// The headers passed the checks when the connection was cached.
		if parse(b, a.Zone, pf|CsumVerified, &p) == ReasonNone {
			t.applyNAT(b, pf, &p, e, m.reply, a.Zone, m)
		}
		m.conn = 0
	}
	m.Zone = a.Zone
	m.Mark, m.Label = e.mark, e.label
	t.exec(e, a, m)
	e.mu.Unlock()
	return ReasonNone, true
}

// track is steps 5 to 9 for a parsed packet.
func (t *Tracker) track(now Time, b []byte, pf PacketFlags, a *Action, m *Meta, p *pkt) Reason {
	zone := a.Zone
	natted := m.State&(StateSNAT|StateDNAT) != 0
	// A connection made by another goroutine between our lookup and our
	// commit, or freed between lookup and lock, sends us round again.
	for range 4 {
		k := p.k
		if natted {
			k = k.reverse()
		}
		idx, dir, gen, found := t.lookup(k, t.hash(k))
		if !found && natted && a.NAT.Kind == NATNone && m.orig != [2]uint64{} {
			// OVS's check_orig_tuple: find it by the original tuple the
			// packet recorded.
			ok := t.origKey(m)
			idx, _, gen, found = t.lookup(ok, t.hash(ok))
			dir = 1 // so that the flip below leaves it forward, as OVS does
		}
		if found {
			reply := dir == 1
			if natted {
				reply = !reply
			}
			e := &t.entries[idx]
			e.mu.Lock()
			if e.gen.Load() != gen {
				e.mu.Unlock()
				continue
			}
			if e.expires <= now {
				// Expired: as if absent; link replaces it.
				e.mu.Unlock()
			} else if a.Force && reply {
				e.mu.Unlock()
				t.remove(idx, gen, removeAlways, now)
			} else {
				r, reopen := t.existing(now, b, pf, a, m, p, e, idx, gen, reply)
				if !reopen {
					return r
				}
				// A TCP SYN on a closed connection: replace it.
				t.remove(idx, gen, removeAlways, now)
			}
		}
		r, again := t.notFound(now, b, pf, a, m, p)
		if !again {
			return r
		}
	}
	// Lost the race four times running: report the packet +new without a
	// connection, as OVS does when its creation loses.
	m.State = StateNew
	t.noConn(m, zone, p.k)
	return ReasonNone
}

// boolDir is the direction index of a packet: 1 for the reply direction.
func boolDir(reply bool) int {
	if reply {
		return 1
	}
	return 0
}

// origKey is the key of the original tuple m recorded (OVS's
// check_orig_tuple), in m's zone.
func (t *Tracker) origKey(m *Meta) key {
	k := keyOf(m.orig[0], m.orig[1])
	k.setZone(m.Zone)
	return k
}

// existing is step 7 for the locked entry e; it unlocks it. reopen asks
// the caller to replace the connection.
func (t *Tracker) existing(now Time, b []byte, pf PacketFlags, a *Action, m *Meta, p *pkt,
	e *entry, idx, gen uint32, reply bool) (r Reason, reopen bool) {
	if p.related {
		m.State |= StateRel
		if reply {
			m.State |= StateRpl
		}
	} else {
		d := 0
		if reply {
			d = 1
		}
		var u update
		switch p.proto {
		case ProtoTCP:
			u, r = t.tcpUpdate(e, b, p, d, now)
		case ProtoICMP:
			u = t.icmpUpdate(e, reply, now)
		default:
			u = t.otherUpdate(e, reply, now)
		}
		switch u {
		case updValid:
			m.State = m.State&^StateNew | StateEst
			if reply {
				m.State |= StateRpl
			}
		case updInvalid:
			m.State = StateInv
		case updNew:
			e.mu.Unlock()
			return ReasonNone, true
		case updValidNew:
			m.State |= StateNew
		}
		if reply {
			e.flags |= flagAssured
		}
	}
	if t.acct != nil && m.State&StateInv == 0 {
		t.account(idx, boolDir(reply), p.end, now)
	}
	if a.NAT.Kind != NATNone && m.State&StateInv == 0 {
		t.applyNAT(b, pf, p, e, reply, a.Zone, m)
	}
	t.finish(e, idx, gen, reply, p.related, a, m)
	e.mu.Unlock()
	return r, false
}

// notFound is step 8. again asks the caller to look up once more (the
// connection appeared, or an expired holder of its key was removed).
func (t *Tracker) notFound(now Time, b []byte, pf PacketFlags, a *Action, m *Meta, p *pkt) (r Reason, again bool) {
	zone := a.Zone
	if p.related {
		m.State = StateInv
		t.noConn(m, zone, p.k)
		return ReasonNoRelated, false
	}
	var valid bool
	switch p.proto {
	case ProtoTCP:
		valid = tcpValidNew(p.tcpFlags)
	case ProtoICMP:
		typ := p.k.icmpType()
		valid = typ == icmpEcho || typ == icmpTimestamp || typ == icmpInfo
	default:
		valid = true
	}
	if !valid {
		m.State = StateInv
		t.noConn(m, zone, p.k)
		if p.proto == ProtoTCP && tcpInvalidFlags(p.tcpFlags) {
			return ReasonTCPFlags, false
		}
		return ReasonNotNew, false
	}
	m.State = StateNew
	if !a.Commit && !a.Force {
		t.noConn(m, zone, p.k)
		return ReasonNone, false
	}
	idx, gen, r, taken := t.create(now, b, p, a)
	if taken {
		return ReasonNone, true
	}
	if r != ReasonNone {
		t.noConn(m, zone, p.k)
		return r, false
	}
	e := &t.entries[idx]
	e.mu.Lock()
	if e.gen.Load() != gen {
		// Evicted or flushed the moment it was made.
		e.mu.Unlock()
		t.noConn(m, zone, p.k)
		return ReasonNone, false
	}
	if e.nat != natNone {
		t.translate(b, pf, p, e, false, m)
	}
	t.finish(e, idx, gen, false, false, a, m)
	e.mu.Unlock()
	return ReasonNone, false
}

// noConn fills m for a packet without a connection (OVS's write_ct_md
// with no conn): tracked, zero mark and label, its own key as the
// original tuple.
func (t *Tracker) noConn(m *Meta, zone uint16, k key) {
	m.State |= StateTrk
	m.Zone = zone
	m.Mark, m.Label = 0, Label{}
	m.orig[0], m.orig[1] = k.words()
	m.conn = 0
}

// finish is step 9 for the locked entry e (OVS's write_ct_md, set_mark,
// set_label and set_cached_conn).
func (t *Tracker) finish(e *entry, idx, gen uint32, reply, related bool, a *Action, m *Meta) {
	m.State |= StateTrk
	m.Zone = a.Zone
	m.Mark, m.Label = e.mark, e.label
	m.orig[0], m.orig[1] = e.k[0][0].Load(), e.k[0][1].Load()
	t.exec(e, a, m)
	if a.NAT.Kind == NATNone {
		m.conn, m.gen, m.reply, m.related = idx+1, gen, reply, related
	} else {
		m.conn = 0
	}
}

// exec applies the action's set_field to ct_mark and ct_label to the
// packet and the locked connection.
func (t *Tracker) exec(e *entry, a *Action, m *Meta) {
	if a.SetMark {
		m.Mark = a.Mark | m.Mark&^a.MarkMask
		e.mark = m.Mark
	}
	if a.SetLabel {
		m.Label = m.Label.set(a.Label, a.LabelMask)
		e.label = m.Label
	}
}

// icmpUpdate updates an ICMP query connection (OVS's icmp_conn_update).
func (t *Tracker) icmpUpdate(e *entry, reply bool, now Time) update {
	u := updValid
	if reply && e.pstate == pFirst {
		e.pstate = pBidir
	} else if e.pstate == pFirst {
		u = updValidNew
	}
	c := ICMPUnreplied
	if e.pstate == pBidir {
		c = ICMPReplied
	}
	t.setClass(e, c, now)
	return u
}

// otherUpdate updates a UDP or other-protocol connection (OVS's
// other_conn_update).
func (t *Tracker) otherUpdate(e *entry, reply bool, now Time) update {
	if reply && e.pstate != pBidir {
		e.pstate = pBidir
	} else if e.pstate == pFirst {
		e.pstate = pMultiple
	}
	udp := uint8(e.k[0][1].Load()>>8) == ProtoUDP
	c := OtherUnreplied
	switch {
	case udp && e.pstate == pBidir:
		c = UDPReplied
	case udp:
		c = UDPUnreplied
	case e.pstate == pBidir:
		c = OtherReplied
	}
	t.setClass(e, c, now)
	if e.pstate == pBidir {
		return updValid
	}
	return updValidNew
}

// create makes the connection of p's key: a place within the limits, a
// slot, its protocol state, then its reply key (translated, with nat) and
// the link into the table. taken reports that another goroutine made the
// same connection meanwhile.
func (t *Tracker) create(now Time, b []byte, p *pkt, a *Action) (idx, gen uint32, r Reason, taken bool) {
	fwd := p.k
	if r := t.reserve(fwd.zone(), now, true); r != ReasonNone {
		return 0, 0, r, false
	}
	idx, ok := t.alloc()
	if !ok {
		t.unreserve(fwd.zone())
		return 0, 0, ReasonTableFull, false
	}
	e := &t.entries[idx]
	var c Class
	e.mu.Lock()
	e.mark, e.label, e.nat, e.flags, e.pstate = 0, Label{}, natNone, 0, pFirst
	e.tcp = [2]tcpPeer{}
	switch p.proto {
	case ProtoTCP:
		tcpNew(e, b, p)
		c = TCPSynSent
	case ProtoUDP:
		c = UDPUnreplied
	case ProtoICMP:
		c = ICMPUnreplied
	default:
		c = OtherUnreplied
	}
	e.class = c
	e.expires = now + Time(t.timeouts[c])
	if t.acct != nil {
		t.acct[idx] = acct{pkts: [2]uint64{1}, bytes: [2]uint64{uint64(p.end)}, start: now, last: now, sentAt: now}
	}
	if a.NAT.Kind == NATSrc {
		e.nat = natSrc
	} else if a.NAT.Kind == NATDst {
		e.nat = natDst
	}
	e.mu.Unlock()
	fa, fb := fwd.words()
	e.k[0][0].Store(fa)
	e.k[0][1].Store(fb)
	t.stats.byClass[c].Add(1)
	var res linkResult
	if e.nat != natNone {
		res, gen = t.linkNAT(idx, fwd, &a.NAT, now)
	} else {
		res, gen = t.linkRev(idx, fwd, fwd.reverse(), now)
	}
	if res != linked {
		t.stats.byClass[c].Add(-1)
		t.release(idx, fwd.zone())
		switch res {
		case fwdTaken:
			return 0, 0, ReasonNone, true
		case revTaken:
			if t.rateLimit(now) {
				t.log.Warn("conntrack: no free tuple in the nat range (a misconfigured range, or a flood: limit the zone)",
					"zone", fwd.zone(), "proto", fwd.proto(), "src", addr4(fwd.src()), "dst", addr4(fwd.dst()),
					"refused", t.stats.reasons[ReasonNATExhausted].Load()+1)
			}
			return 0, 0, ReasonNATExhausted, false
		}
		return 0, 0, ReasonTableFull, false
	}
	t.stats.created.Add(1)
	return idx, gen, ReasonNone, false
}

// linkRev stores rev as entry idx's reply key and links the entry,
// removing an expired holder of either key first. It returns the
// generation the entry was linked with.
func (t *Tracker) linkRev(idx uint32, fwd, rev key, now Time) (linkResult, uint32) {
	e := &t.entries[idx]
	ra, rb := rev.words()
	e.k[1][0].Store(ra)
	e.k[1][1].Store(rb)
	revNode := rev != fwd.reverse()
	e.mu.Lock()
	e.flags = e.flags&^flagRevNode | boolFlag(revNode, flagRevNode)
	e.mu.Unlock()
	for range 8 {
		res, i, g := t.link(idx, fwd, rev, revNode, now)
		if res != staleTaken {
			return res, i
		}
		if t.remove(i, g, removeExpired, now) {
			t.stats.expired.Add(1)
		}
	}
	return fwdTaken, 0
}

func boolFlag(b bool, f uint8) uint8 {
	if b {
		return f
	}
	return 0
}

// rateLimit reports whether a warning may be logged now: at most one a
// second, so that a flood of refusals does not flood the log (OVS
// rate-limits the same warning).
func (t *Tracker) rateLimit(now Time) bool {
	last := t.lastWarn.Load()
	return now-Time(last) >= Time(time.Second) && t.lastWarn.CompareAndSwap(last, int64(now))
}
