package vswitch

import (
	"sync/atomic"

	"github.com/gvswitch/gvs/flowtable"
)

// DropReason says why the switch dropped a frame. The set is closed so that
// monitoring can export one counter per value (see DropReasonNames).
type DropReason uint8

// The switch's drop reasons. The first ones mirror flowtable.DropReason.
const (
	DropTableMiss      DropReason = iota // no rule matched in some table
	DropAction                           // the rules ended without an output (explicit drop)
	DropLoop                             // the pipeline visited too many tables
	DropTooManyOutputs                   // more outputs than flowtable.MaxOutputs
	DropMalformed                        // the frame is not a parsable Ethernet frame
	DropNoPort                           // an output named a port that does not exist
	DropNoTunnelDst                      // output to the tunnel port without tun_dst
	DropNoBuffer                         // no spare buffer to copy a frame sent to several ports
	DropTxError                          // the output port's write failed
	DropGSO                              // a GSO super-frame for a port that cannot take one
	DropTooManyCT                        // a pipeline run met more than flowtable.MaxCT ct actions
	DropNoConntrack                      // the rules reached a ct action, and the switch has no tracker (Config.Conntrack)
	DropRecirc                           // recirculated more than flowtable.MaxRecirc times (ct(table=N) loops)
	DropPoliced                          // above the egress bandwidth limit of the port it came from (SetPortLimit)
	DropShaperQueue                      // toward a port with an ingress limit whose queue was full (SetPortLimit)
	NumDropReasons
)

// DropReasonNames are the label values for DropReason, in order.
var DropReasonNames = [NumDropReasons]string{
	"table_miss", "action_drop", "loop", "too_many_outputs", "malformed",
	"no_port", "no_tunnel_dst", "no_buffer", "tx_error", "gso",
	"too_many_ct", "no_conntrack", "recirc_depth", "policed", "shaper_queue",
}

// String returns the reason's label value.
func (r DropReason) String() string {
	if r < NumDropReasons {
		return DropReasonNames[r]
	}
	return "unknown"
}

func fromPipeline(r flowtable.DropReason) DropReason {
	switch r {
	case flowtable.DropTableMiss:
		return DropTableMiss
	case flowtable.DropLoop:
		return DropLoop
	case flowtable.DropTooManyOutputs:
		return DropTooManyOutputs
	case flowtable.DropTooManyCT:
		return DropTooManyCT
	default:
		return DropAction
	}
}

// counter is an atomic counter alone on its cache line, so that workers
// updating neighbouring counters do not share a line.
type counter struct {
	n atomic.Uint64
	_ [56]byte
}

// PortStats are a port's counters as the switch sees them: frames it read
// from the port (rx) and wrote to it (tx). Drops are frames that arrived on
// the port and were dropped, or that could not be written to it.
type PortStats struct {
	RxPackets, RxBytes uint64
	TxPackets, TxBytes uint64
	RxDrops, TxDrops   uint64
}

type portCounters struct {
	rxPackets, rxBytes, rxDrops counter
	txPackets, txBytes, txDrops counter
}

func (c *portCounters) snapshot() PortStats {
	return PortStats{
		RxPackets: c.rxPackets.n.Load(), RxBytes: c.rxBytes.n.Load(), RxDrops: c.rxDrops.n.Load(),
		TxPackets: c.txPackets.n.Load(), TxBytes: c.txBytes.n.Load(), TxDrops: c.txDrops.n.Load(),
	}
}

// Stats are the switch-wide counters.
type Stats struct {
	// Drops counts dropped frames by reason.
	Drops [NumDropReasons]uint64
	// TableDrops counts frames dropped in each table (table misses and
	// explicit drops), which is how a rule program tells its drops apart:
	// for the OpenShift program, drops in table 20 are anti-spoofing drops.
	TableDrops [256]uint64
	// Lookups counts pipeline runs (a recirculation is a run of its
	// own); CacheHits those answered by a worker's exact-match cache.
	Lookups, CacheHits uint64
	// Recirculations counts the runs that were recirculations after a
	// ct action with table= (they are among Lookups too).
	Recirculations uint64
	// BufferReleases counts idle workers that gave their buffers' pages
	// back (Config.TrimIdle).
	BufferReleases uint64
}
