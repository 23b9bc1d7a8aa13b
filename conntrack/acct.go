package conntrack

import "time"

// Accounting (Config.Accounting): per-connection packet and byte counts
// per direction and the times of a connection's first and last packets,
// as Linux's nf_conntrack_acct and nf_conntrack_timestamp keep them, for
// flow export (package ipfix).
//
//  1. create starts a connection's record with its first packet;
//     existing adds each later packet of either direction (one packet and
//     the IPv4 total length: a GSO super-frame counts once, as the kernel
//     counts an skb). Both hold the entry's lock already.
//  2. Flows, called by the exporter every second or so, reports the
//     connections idle for the idle timeout, or not reported for the
//     active timeout, with the counts since their last report.
//  3. remove reports what a connection counted since its last report to
//     Config.OnEnd as it frees the entry.
//
// The records live in a slab of their own, beside the entries, so that
// the entry stays two cache lines and a tracker without accounting pays
// nothing but a nil check per packet.

// acct is one connection's accounting record; guarded by its entry's mu.
type acct struct {
	pkts, bytes         [2]uint64 // [dir]: counted since the connection began
	start, last         Time      // first and latest packet
	sentPkts, sentBytes [2]uint64 // what the last report covered
	sentAt              Time      // when it was reported last (start before the first report)
}

// FlowEnd says why a Flow was reported; the values are IPFIX's
// flowEndReason (RFC 5102 section 5.11.3, IANA's registry, element 136).
type FlowEnd uint8

// The reasons.
const (
	FlowIdle    FlowEnd = 1 // no packet for the idle timeout (the connection may still be tracked)
	FlowActive  FlowEnd = 2 // long-lived: reported every active timeout while it lasts
	FlowEnded   FlowEnd = 3 // the connection ended: it expired, closed (TCP) or was replaced
	FlowForced  FlowEnd = 4 // removed by Flush, FlushZone or FlushTuple
	FlowEvicted FlowEnd = 5 // dropped early to make room (lack of resources)
)

// Flow is a connection's accounting since its last report, for flow
// export: a value, copied out of the table, that the receiver may keep.
type Flow struct {
	Orig, Reply Tuple     // the original and reply tuples (Reply shows the translation)
	Zone        uint16    // ct_zone
	Mark        uint32    // ct_mark
	NAT         NATKind   // NATSrc, NATDst or NATNone
	Class       Class     // protocol and state when reported
	Packets     [2]uint64 // [0] original direction, [1] reply, since the last report
	Bytes       [2]uint64 // IPv4 bytes, likewise
	Start, Last Time      // the connection's first and latest packets (tracker time)
	End         FlowEnd
}

// account adds one packet of n bytes in direction d to entry idx's record;
// the caller holds the entry's lock.
func (t *Tracker) account(idx uint32, d int, n int, now Time) {
	a := &t.acct[idx]
	a.pkts[d]++
	a.bytes[d] += uint64(n)
	a.last = now
}

// flowOf fills f from the locked entry idx with the counts since its last
// report and marks them reported. It reports false when there are none.
func (t *Tracker) flowOf(idx uint32, now Time, end FlowEnd, f *Flow) bool {
	e, a := &t.entries[idx], &t.acct[idx]
	if a.pkts == a.sentPkts {
		return false
	}
	fwd := keyOf(e.k[0][0].Load(), e.k[0][1].Load())
	rev := keyOf(e.k[1][0].Load(), e.k[1][1].Load())
	*f = Flow{Orig: fwd.tuple(), Reply: rev.tuple(), Zone: fwd.zone(), Mark: e.mark, Class: e.class,
		Start: a.start, Last: a.last, End: end}
	switch e.nat {
	case natSrc:
		f.NAT = NATSrc
	case natDst:
		f.NAT = NATDst
	}
	for d := range 2 {
		f.Packets[d] = a.pkts[d] - a.sentPkts[d]
		f.Bytes[d] = a.bytes[d] - a.sentBytes[d]
	}
	a.sentPkts, a.sentBytes, a.sentAt = a.pkts, a.bytes, now
	return true
}

// endReason is why a connection removed in mode is reported.
func endReason(mode removeMode, expired bool) FlowEnd {
	switch {
	case mode == removeFlush:
		return FlowForced
	case mode == removeEvictable && !expired:
		return FlowEvicted
	}
	return FlowEnded
}

// Flows reports, to fn, each connection with packets not yet reported
// that has had no packet for idle (End FlowIdle, or FlowEnded for a TCP
// connection closed or reset) or was last reported,
// or began, active ago or longer (End FlowActive); a connection reported
// here is reported again only for later packets. Connections that end
// go to Config.OnEnd instead. It walks the whole table, locking one entry
// at a time, and calls fn without locks; it returns how many flows it
// reported. Without Config.Accounting it reports nothing. Safe for
// concurrent use with Process; concurrent Flows calls take turns.
func (t *Tracker) Flows(now Time, active, idle time.Duration, fn func(*Flow)) int {
	if t.acct == nil {
		return 0
	}
	t.flowsMu.Lock()
	defer t.flowsMu.Unlock()
	n := t.bump.Load()
	reported := 0
	var f Flow
	for i := range n {
		e := &t.entries[i]
		if e.gen.Load()&1 == 0 {
			continue
		}
		e.mu.Lock()
		a := &t.acct[i]
		ok := false
		if e.gen.Load()&1 == 1 && e.expires > now {
			switch {
			case idle > 0 && now-a.last >= Time(idle):
				end := FlowIdle
				if e.class == TCPTimeWait || e.class == TCPClose {
					end = FlowEnded // closed or reset, waiting out its timeout
				}
				ok = t.flowOf(i, now, end, &f)
			case active > 0 && now-a.sentAt >= Time(active):
				ok = t.flowOf(i, now, FlowActive, &f)
			}
		}
		e.mu.Unlock()
		if ok {
			fn(&f)
			reported++
		}
	}
	return reported
}
