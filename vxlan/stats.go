package vxlan

import "sync/atomic"

// DropReason says why the tunnel port dropped a received datagram. The set
// is closed: every drop is counted under exactly one of these.
type DropReason uint8

// Drop reasons, in Stats.Drops order.
const (
	// DropUnknownPeer: the outer source address is not in Config.Peers.
	DropUnknownPeer DropReason = iota
	// DropMalformed: the UDP payload is shorter than the VXLAN header.
	DropMalformed
	// DropBadFlags: the I flag is clear or a reserved bit is set (see
	// Header.Valid).
	DropBadFlags
	// DropShortInner: the inner frame is shorter than an Ethernet header.
	DropShortInner
	// DropTruncated: the datagram did not fit in the caller's buffer.
	DropTruncated
	// NumDropReasons is the number of drop reasons.
	NumDropReasons
)

var dropReasonNames = [NumDropReasons]string{
	DropUnknownPeer: "unknown_peer",
	DropMalformed:   "malformed",
	DropBadFlags:    "bad_flags",
	DropShortInner:  "short_inner",
	DropTruncated:   "truncated",
}

// String returns the reason's metric label, e.g. "unknown_peer".
func (r DropReason) String() string {
	if r < NumDropReasons {
		return dropReasonNames[r]
	}
	return "unknown"
}

// Stats is a snapshot of a tunnel port's counters. Byte counts are inner
// Ethernet frame bytes (without the VXLAN, UDP and IP headers).
type Stats struct {
	RxPackets, RxBytes uint64
	// RxWaits counts the times a reader found no datagram and waited in
	// the netpoller: wake-ups, each a thread hand-off.
	RxWaits uint64
	// TxPackets counts datagrams sent (a super-frame sends several);
	// TxBytes their inner frame bytes.
	TxPackets, TxBytes uint64
	// TxErrors counts frames whose send failed.
	TxErrors uint64
	// Drops counts received datagrams dropped, indexed by DropReason.
	Drops [NumDropReasons]uint64
}

// Dropped returns the total of Drops.
func (s Stats) Dropped() uint64 {
	var n uint64
	for _, d := range s.Drops {
		n += d
	}
	return n
}

// counter is an atomic counter alone on its cache line, so that the reader
// and the writers of a port do not false-share.
type counter struct {
	atomic.Uint64
	_ [56]byte
}

// counters are a port's live counters. The receive side is updated by the
// single reader; the transmit side by any number of concurrent writers. Each
// is added to once per batch, not per packet.
type counters struct {
	rxPackets, rxBytes counter
	rxWaits            counter
	txPackets, txBytes counter
	txErrors           counter
	drops              [NumDropReasons]counter
}

func (c *counters) snapshot() Stats {
	s := Stats{
		RxPackets: c.rxPackets.Load(),
		RxBytes:   c.rxBytes.Load(),
		RxWaits:   c.rxWaits.Load(),
		TxPackets: c.txPackets.Load(),
		TxBytes:   c.txBytes.Load(),
		TxErrors:  c.txErrors.Load(),
	}
	for i := range c.drops {
		s.Drops[i] = c.drops[i].Load()
	}
	return s
}
