package conntrack

import (
	"errors"
	"iter"
	"strconv"
	"sync/atomic"
	"time"
)

// counters are the tracker's event counters. They are touched on
// connection events (made, class changed, expired, evicted) and on
// refused or invalid packets, never by a packet of an established
// connection.
type counters struct {
	byClass   [NumClasses]atomic.Int64
	created   atomic.Uint64
	expired   atomic.Uint64
	evicted   atomic.Uint64
	flushed   atomic.Uint64
	fragments atomic.Uint64
	reasons   [NumReasons]atomic.Uint64
}

// Stats is a snapshot of the tracker's counters, plain numbers for the
// embedder to export (gvs-switchd turns them into Prometheus metrics).
type Stats struct {
	Entries  int                // entries in use
	Max      int                // the global entry limit
	ByClass  [NumClasses]int64  // entries per protocol and state (Class)
	Created  uint64             // connections committed
	Expired  uint64             // entries removed because they timed out
	Evicted  uint64             // entries dropped early to make room
	Flushed  uint64             // entries removed by Flush, FlushZone, FlushTuple
	Reasons  [NumReasons]uint64 // packets per Reason (invalid ones and refused commits)
	Fragment uint64             // later fragments that took their first fragment's verdict
	Pending  int                // fragment records waiting for later fragments
}

// Invalid returns how many packets were +inv, all reasons together.
func (s *Stats) Invalid() uint64 {
	var n uint64
	for r := ReasonNone + 1; r < NumReasons; r++ {
		if r.Invalid() {
			n += s.Reasons[r]
		}
	}
	return n
}

// Stats returns the counters. It walks the fragment table (a few
// thousand slots), not the connections.
func (t *Tracker) Stats() Stats {
	s := Stats{
		Entries:  t.Len(),
		Max:      t.Cap(),
		Created:  t.stats.created.Load(),
		Expired:  t.stats.expired.Load(),
		Evicted:  t.stats.evicted.Load(),
		Flushed:  t.stats.flushed.Load(),
		Fragment: t.stats.fragments.Load(),
		Pending:  t.pendingFragments(),
	}
	for c := range s.ByClass {
		s.ByClass[c] = t.stats.byClass[c].Load()
	}
	for r := range s.Reasons {
		s.Reasons[r] = t.stats.reasons[r].Load()
	}
	return s
}

func (t *Tracker) pendingFragments() int {
	n := 0
	for i := range t.frags.shards {
		sh := &t.frags.shards[i]
		sh.mu.Lock()
		for j := range sh.slots {
			if sh.slots[j].used {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Sweep removes expired entries, examining at most budget slots of the
// table from where the previous call stopped (budget <= 0: the whole
// table), and expired fragment records. It returns how many entries it
// removed. The tracker starts no goroutine: the embedder calls Sweep from
// a maintenance goroutine of its own, e.g. every second with a budget of
// Cap()/64, which walks the table once a minute; entries are also
// replaced when a packet finds them expired, so Sweep only bounds how
// long an idle entry holds its place. Concurrent Sweeps take turns.
func (t *Tracker) Sweep(now Time, budget int) int {
	t.sweepMu.Lock()
	defer t.sweepMu.Unlock()
	t.sweepFragments(now)
	n := t.bump.Load()
	if n == 0 {
		return 0
	}
	if budget <= 0 || budget > int(n) {
		budget = int(n)
	}
	pos := t.sweepPos % n
	removed := 0
	for range budget {
		idx := pos
		if pos++; pos == n {
			pos = 0
		}
		e := &t.entries[idx]
		g := e.gen.Load()
		if g&1 == 0 {
			continue
		}
		e.mu.Lock()
		due := e.gen.Load() == g && e.expires <= now
		e.mu.Unlock()
		if due && t.remove(idx, g, removeExpired, now) {
			removed++
		}
	}
	t.sweepPos = pos
	t.stats.expired.Add(uint64(removed))
	return removed
}

// Entry is a snapshot of one connection, for dumps.
type Entry struct {
	Orig, Reply Tuple         // the original and reply direction tuples (Reply shows the translation)
	Zone        uint16        // ct_zone
	Mark        uint32        // ct_mark
	Label       Label         // ct_label
	Class       Class         // protocol and state
	Timeout     time.Duration // time left before it expires
	TCP         [2]TCPState   // TCP: the original and reply ends' states
	NAT         NATKind       // NATSrc, NATDst or NATNone
}

// All returns an iterator over a snapshot of each entry in use (each
// entry is copied under its lock; the table may change during the walk).
// now is the time the timeouts are counted from.
func (t *Tracker) All(now Time) iter.Seq[Entry] {
	return func(yield func(Entry) bool) {
		n := t.bump.Load()
		for i := range n {
			if e, ok := t.snapshot(i, now); ok && !yield(e) {
				return
			}
		}
	}
}

// snapshot copies entry i if it is in use and not expired.
func (t *Tracker) snapshot(i uint32, now Time) (Entry, bool) {
	e := &t.entries[i]
	if e.gen.Load()&1 == 0 {
		return Entry{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gen.Load()&1 == 0 || e.expires <= now {
		return Entry{}, false
	}
	fwd := keyOf(e.k[0][0].Load(), e.k[0][1].Load())
	rev := keyOf(e.k[1][0].Load(), e.k[1][1].Load())
	x := Entry{
		Orig: fwd.tuple(), Reply: rev.tuple(), Zone: fwd.zone(), Mark: e.mark, Label: e.label,
		Class: e.class, Timeout: time.Duration(e.expires - now),
	}
	if fwd.proto() == ProtoTCP {
		x.TCP = [2]TCPState{TCPState(e.tcp[0].state), TCPState(e.tcp[1].state)}
	}
	switch e.nat {
	case natSrc:
		x.NAT = NATSrc
	case natDst:
		x.NAT = NATDst
	}
	return x, true
}

// String formats e as one line of `ovs-appctl dpctl/dump-conntrack`:
//
//	tcp,orig=(src=10.0.0.1,dst=10.0.0.2,sport=40000,dport=80),reply=(src=10.0.0.2,dst=10.0.0.1,sport=80,dport=40000),zone=1,mark=3,protoinfo=(state=ESTABLISHED)
func (e *Entry) String() string { return string(e.AppendText(nil, false)) }

// AppendText appends e as String formats it; with stats, it adds the
// timeout in seconds as `dpctl/dump-conntrack -s` does.
func (e *Entry) AppendText(b []byte, stats bool) []byte {
	b = appendProto(b, e.Orig.Proto)
	b = append(b, ",orig=("...)
	b = appendTuple(b, e.Orig)
	b = append(b, "),reply=("...)
	b = appendTuple(b, e.Reply)
	b = append(b, ')')
	if e.Zone != 0 {
		b = append(b, ",zone="...)
		b = strconv.AppendUint(b, uint64(e.Zone), 10)
	}
	if stats {
		b = append(b, ",timeout="...)
		b = strconv.AppendInt(b, int64(e.Timeout/time.Second), 10)
	}
	if e.Mark != 0 {
		b = append(b, ",mark="...)
		b = strconv.AppendUint(b, uint64(e.Mark), 10)
	}
	if !e.Label.IsZero() {
		b = append(b, ",labels="...)
		b = appendLabel(b, e.Label)
	}
	if e.Orig.Proto == ProtoTCP {
		// One state for both ends, as the kernel keeps; OVS prints the
		// larger, with its userspace-only states folded into the
		// kernel's.
		s := max(e.TCP[0], e.TCP[1])
		switch s {
		case TCPSFinWait2:
			s = TCPSTimeWait
		case TCPSSynRecv:
			s = TCPSEstablished
		}
		b = append(b, ",protoinfo=(state="...)
		b = append(b, s.String()...)
		b = append(b, ')')
	}
	return b
}

func appendProto(b []byte, p uint8) []byte {
	switch p {
	case ProtoICMP:
		return append(b, "icmp"...)
	case ProtoTCP:
		return append(b, "tcp"...)
	case ProtoUDP:
		return append(b, "udp"...)
	case ProtoSCTP:
		return append(b, "sctp"...)
	case 136:
		return append(b, "udplite"...)
	case 33:
		return append(b, "dccp"...)
	case 2:
		return append(b, "igmp"...)
	}
	return strconv.AppendUint(b, uint64(p), 10)
}

// ErrNotFound: FlushTuple found no connection with the tuple.
var ErrNotFound = errors.New("conntrack: no such connection")

// Flush removes every entry and returns how many it removed.
func (t *Tracker) Flush() int { return t.flushWhere(-1) }

// FlushZone removes the entries of zone and returns how many.
func (t *Tracker) FlushZone(zone uint16) int { return t.flushWhere(int32(zone)) }

func (t *Tracker) flushWhere(zone int32) int {
	now := t.Now()
	n := t.bump.Load()
	removed := 0
	for i := range n {
		e := &t.entries[i]
		g := e.gen.Load()
		if g&1 == 0 {
			continue
		}
		if zone >= 0 && uint16(e.k[0][1].Load()>>16) != uint16(zone) {
			continue
		}
		if t.remove(i, g, removeFlush, now) {
			removed++
		}
	}
	t.stats.flushed.Add(uint64(removed))
	return removed
}

// FlushTuple removes the connection of zone that has tup as its original
// or reply tuple (OVS's flush-conntrack with a tuple). For ICMP,
// tup.SrcPort is the type and tup.ID the identifier.
func (t *Tracker) FlushTuple(zone uint16, tup Tuple) error {
	k := mkKey(be32(tup.Src), be32(tup.Dst), tup.SrcPort, tup.DstPort, zone, tup.Proto, 0)
	if tup.Proto == ProtoICMP {
		k = mkKey(be32(tup.Src), be32(tup.Dst), tup.ID, tup.ID, zone, tup.Proto, uint8(tup.SrcPort))
	}
	now := t.Now()
	idx, _, gen, ok := t.lookup(k, t.hash(k))
	if !ok || !t.remove(idx, gen, removeFlush, now) {
		return ErrNotFound
	}
	t.stats.flushed.Add(1)
	return nil
}

// tupleKey is the key of a packet with tuple tup in zone (for ICMP,
// tup.SrcPort is the type and tup.ID the identifier).
func tupleKey(zone uint16, tup Tuple) key {
	if tup.Proto == ProtoICMP {
		return mkKey(be32(tup.Src), be32(tup.Dst), tup.ID, tup.ID, zone, tup.Proto, uint8(tup.SrcPort))
	}
	return mkKey(be32(tup.Src), be32(tup.Dst), tup.SrcPort, tup.DstPort, zone, tup.Proto, 0)
}

// Peek tells what the ct action a would find for a packet with tuple tup
// (in zone a.Zone), without changing anything: no connection is updated,
// committed, refreshed or removed, and no counter moves. It is for traces
// (gvsctl trace), not for the packet path.
//
// It fills m as Process would for a packet of tup that passes the
// protocol's checks (its TCP flags and window are not known, so it is
// taken to be valid): +trk, and +est or +new (a connection that has not
// seen a reply yet, or none), +rpl in the reply direction, +snat or +dnat
// when a has nat and the connection is translated; the connection's mark,
// label and original tuple (the packet's own tuple without one). Found
// reports whether a live connection exists, e its snapshot and reply
// whether tup is its reply direction. An ICMP error is looked up by its
// own tuple, not by the packet it quotes, so Peek finds no connection for
// it. Peek takes the entry's lock briefly and allocates nothing.
func (t *Tracker) Peek(now Time, tup Tuple, a *Action, m *Meta) (e Entry, reply, found bool) {
	k := tupleKey(a.Zone, tup)
	*m = Meta{State: StateTrk | StateNew, Zone: a.Zone}
	m.orig[0], m.orig[1] = k.words()
	idx, dir, gen, ok := t.lookup(k, t.hash(k))
	if !ok {
		return Entry{}, false, false
	}
	en := &t.entries[idx]
	en.mu.Lock()
	live := en.gen.Load() == gen && en.expires > now
	en.mu.Unlock()
	if !live {
		return Entry{}, false, false
	}
	if e, ok = t.snapshot(idx, now); !ok {
		return Entry{}, false, false
	}
	reply = dir == 1
	switch e.Class {
	case TCPSynSent, UDPUnreplied, ICMPUnreplied, OtherUnreplied:
	default:
		m.State = StateTrk | StateEst
	}
	if reply {
		m.State = StateTrk | StateEst | StateRpl
	}
	if a.NAT.Kind != NATNone {
		switch {
		case e.NAT == NATSrc && !reply, e.NAT == NATDst && reply:
			m.State |= StateSNAT
		case e.NAT == NATDst && !reply, e.NAT == NATSrc && reply:
			m.State |= StateDNAT
		}
	}
	m.Mark, m.Label = e.Mark, e.Label
	fk := tupleKey(e.Zone, e.Orig)
	m.orig[0], m.orig[1] = fk.words()
	return e, reply, true
}
