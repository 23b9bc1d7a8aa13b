package conntrack

import (
	"sync"
	"time"
)

// IPv4 fragments are tracked with their first fragment, not reassembled:
// the first fragment carries the L4 header and goes through the tracker
// like any packet (its L4 checksum, which covers the whole datagram, is
// not checked); its verdict — ct_state, mark, label, original tuple, the
// reason — and the addresses it left with are recorded under (source,
// destination, protocol, IP ID, zone) as it arrived, and the number of
// ct actions the packet met before this one (Meta.step; ct_clear starts
// again from 0). Later fragments of the datagram look that record up and
// take the same verdict, and the same address translation (ports live in
// the first fragment only; its L4 checksum covers the whole datagram, so
// the first fragment's incremental update is all the datagram needs).
// The step matters when a packet meets several ct actions in one zone,
// as a NAT rule set has it (ct(nat,table=1), then ct(commit,nat(dst=…))):
// a later fragment gets at its first ct what the first fragment got at
// its first, not what the commit made of it, and follows the first
// fragment through the rules (OVS reassembles the datagram instead and
// runs it through them once).
//
// A later fragment that arrives before its first fragment, or after the
// record expired (Timeouts.Fragment) or was pushed out of the bounded
// table, is +inv (ReasonFragment): the tracker does not hold packets
// back. Linux and the kernel's TAP queue selection deliver a datagram's
// fragments in order to one queue (the flow hash of any fragment leaves
// the ports out), so in practice only a reordering network shows it. A
// record ends a second after the fragments seen add up to the datagram's
// length, or when its timeout passes.

const (
	fragGrace  = Time(time.Second) // how long a completed record stays
	fragShards = 8
	fragProbe  = 8 // slots a key may occupy: its home slot and the next 7
)

type fragKey struct {
	src, dst uint32
	id       uint16
	zone     uint16
	proto    uint8
	step     uint8 // the ct actions the packet met before this one
}

type fragSlot struct {
	key      fragKey
	used     bool
	reason   Reason
	expires  Time
	got      uint32 // payload bytes seen
	total    uint32 // the datagram's payload bytes, known from its last fragment
	state    State
	mark     uint32
	label    Label
	orig     [2]uint64
	src, dst uint32 // the addresses the first fragment left with
	// its ports as it left, for TCP, UDP and SCTP (ports)
	ports        bool
	sport, dport uint16
}

type fragShard struct {
	mu    sync.Mutex
	slots []fragSlot
	_     [64 - 32]byte
}

// fragTable is a fixed-size, open-addressed table of fragment records in
// a few locked shards (fragments are rare; their lock is not on the path
// of unfragmented packets).
type fragTable struct {
	shards [fragShards]fragShard
}

func (f *fragTable) init(n int) {
	per := max((n+fragShards-1)/fragShards, 1)
	for i := range f.shards {
		f.shards[i].slots = make([]fragSlot, per)
	}
}

func (t *Tracker) fragHome(k fragKey) (*fragShard, int) {
	h := mix(uint64(k.src)<<32 ^ uint64(k.dst) ^ t.seed[0])
	h = mix(h ^ uint64(k.step)<<48 ^ uint64(k.id)<<24 ^ uint64(k.zone)<<8 ^ uint64(k.proto) ^ t.seed[1])
	sh := &t.frags.shards[h%fragShards]
	return sh, int(h / fragShards % uint64(len(sh.slots)))
}

// recordFragment stores the verdict m and reason r a first fragment got
// in the ct action that just ran, under the key it arrived with; b is the
// fragment as it leaves (after translation) and plen its payload length.
// A full probe window loses its record that expires first.
func (t *Tracker) recordFragment(now Time, k fragKey, plen uint32, b []byte, m *Meta, r Reason) {
	sh, home := t.fragHome(k)
	sh.mu.Lock()
	n := len(sh.slots)
	victim, oldest := -1, -1
	for i := range min(fragProbe, n) {
		j := (home + i) % n
		s := &sh.slots[j]
		if s.used && s.key == k {
			victim = j // the same datagram again: overwrite
			break
		}
		if victim < 0 && (!s.used || s.expires <= now) {
			victim = j
		}
		if oldest < 0 || s.expires < sh.slots[oldest].expires {
			oldest = j
		}
	}
	if victim < 0 {
		victim = oldest
	}
	sh.slots[victim] = fragSlot{
		key: k, used: true, reason: r, expires: now + Time(t.fragTimeout), got: plen,
		state: m.State, mark: m.Mark, label: m.Label, orig: m.orig,
		src: get32(b, 12), dst: get32(b, 16),
	}
	switch k.proto {
	case ProtoTCP, ProtoUDP, ProtoSCTP:
		// parse saw the first fragment's header hold the ports.
		if ihl := int(b[0]&15) * 4; len(b) >= ihl+4 {
			s := &sh.slots[victim]
			s.ports, s.sport, s.dport = true, get16(b, ihl), get16(b, ihl+2)
		}
	}
	sh.mu.Unlock()
}

// laterFragment is step 2 of Process: a fragment with a non-zero offset.
func (t *Tracker) laterFragment(now Time, b []byte, pf PacketFlags, a *Action, m *Meta, step uint8) Reason {
	zone := a.Zone
	ihl, tot := int(b[0]&15)*4, int(get16(b, 2))
	if ihl < 20 || tot < ihl || tot > len(b) {
		return t.invalid(m, zone, ReasonMalformed)
	}
	if pf&CsumVerified == 0 && fold(sum(b[:ihl], 0)) != 0xffff {
		return t.invalid(m, zone, ReasonChecksum)
	}
	fo := get16(b, 6)
	k := fragKey{src: get32(b, 12), dst: get32(b, 16), id: get16(b, 4), zone: zone, proto: b[9], step: step}
	off, plen, last := uint32(fo&0x1fff)*8, uint32(tot-ihl), fo&0x2000 == 0
	sh, home := t.fragHome(k)
	sh.mu.Lock()
	var s fragSlot
	for i := range min(fragProbe, len(sh.slots)) {
		c := &sh.slots[(home+i)%len(sh.slots)]
		if c.used && c.key == k && c.expires > now {
			c.got += plen
			if last {
				c.total = off + plen
			}
			s = *c
			if c.total != 0 && c.got >= c.total && c.expires > now+fragGrace {
				// Every byte has been seen (at least once: a fragment
				// meeting several ct actions counts several times).
				// Keep the record a moment for the rest of this
				// fragment's actions and late duplicates, then let
				// it go.
				c.expires = now + fragGrace
			}
			break
		}
	}
	sh.mu.Unlock()
	if !s.used {
		return t.invalid(m, zone, ReasonFragment)
	}
	*m = Meta{State: s.state, Zone: zone, Mark: s.mark, Label: s.label, orig: s.orig,
		fragPorts: s.ports, sport: s.sport, dport: s.dport}
	setAddr(b, 0, 12, s.src, -1, false, false)
	setAddr(b, 0, 16, s.dst, -1, false, false)
	t.stats.fragments.Add(1)
	return s.reason
}

// sweepFragments frees expired records and returns how many remain.
func (t *Tracker) sweepFragments(now Time) int {
	live := 0
	for i := range t.frags.shards {
		sh := &t.frags.shards[i]
		sh.mu.Lock()
		for j := range sh.slots {
			s := &sh.slots[j]
			if s.used && s.expires <= now {
				s.used = false
			}
			if s.used {
				live++
			}
		}
		sh.mu.Unlock()
	}
	return live
}
