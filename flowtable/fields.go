package flowtable

import "github.com/gvswitch/gvs/conntrack"

// Fields is everything a rule can match on: the packet's header fields,
// parsed once (see Extract), and the pipeline's metadata (in_port, tunnel
// metadata, registers, connection tracking). It is a plain value with no
// pointers so that it can be masked, compared and used as a map key without
// allocating.
//
// For ARP, NwSrc/NwDst hold the sender/target protocol addresses and NwProto
// holds the low 8 bits of the ARP opcode, as in OpenFlow; ArpOp holds it whole.
//
// The Ct fields are the connection-tracking match fields of ovs-fields(7):
// zero for a packet no ct action has tracked; a recirculation after a ct
// action (ct(table=N)) fills them from the tracker's conntrack.Meta (see
// SetConntrack). CtNwSrc … CtTpDst are the connection's original-direction
// tuple (for ICMP, CtTpSrc and CtTpDst hold its type and code). The fields
// are ordered so that the struct has no padding to speak of.
type Fields struct {
	InPort    uint32
	CtState   conntrack.State
	Regs      [8]uint32
	TunID     uint64
	TunSrc    [4]byte
	TunDst    [4]byte
	EthSrc    [6]byte
	EthDst    [6]byte
	EthType   uint16
	NwSrc     [4]byte
	NwDst     [4]byte
	NwProto   uint8
	CtNwProto uint8
	ArpOp     uint16
	ArpSha    [6]byte
	ArpTha    [6]byte
	TpSrc     uint16
	TpDst     uint16
	CtZone    uint16
	CtTpSrc   uint16
	CtTpDst   uint16
	CtMark    uint32
	CtNwSrc   [4]byte
	CtNwDst   [4]byte
	CtLabel   conntrack.Label
}

// SetConntrack sets f's Ct fields from the connection-tracking metadata
// m, as a recirculation after a ct action sees them. It does not allocate.
func (f *Fields) SetConntrack(m *conntrack.Meta) {
	f.CtState, f.CtZone, f.CtMark, f.CtLabel = m.State, m.Zone, m.Mark, m.Label
	o := m.Orig()
	f.CtNwSrc, f.CtNwDst, f.CtNwProto, f.CtTpSrc, f.CtTpDst = o.Src, o.Dst, o.Proto, o.SrcPort, o.DstPort
}

// ClearConntrack zeroes f's Ct fields: the packet is untracked, as after
// ct_clear, and as the pipeline sees it after any ct action.
func (f *Fields) ClearConntrack() {
	f.CtState, f.CtZone, f.CtMark, f.CtLabel = 0, 0, 0, conntrack.Label{}
	f.CtNwSrc, f.CtNwDst, f.CtNwProto, f.CtTpSrc, f.CtTpDst = [4]byte{}, [4]byte{}, 0, 0, 0
}

// Special port numbers, as in OpenFlow.
const (
	PortNone   uint32 = 0          // no port
	PortInPort uint32 = 0xfffffff8 // OFPP_IN_PORT: send back out of in_port
	PortMax    uint32 = 0xffffff00 // ports above this are reserved
)

// MaxOutputs is the most outputs one pipeline run may produce; further output
// actions are ignored and counted as dropped (DropTooManyOutputs). It
// bounds multicast's head-end replication (a copy per remote node, then
// one per local pod of the VNID: OpenShift's table 111), hence 64; the
// exact-match cache keeps only verdicts of a few outputs, so a Verdict's
// size costs a worker's memory, not a cache entry's.
const MaxOutputs = 64

// MaxHits is the most rules one pipeline run records for counter attribution;
// a pipeline deeper than this stops (DropLoop).
const MaxHits = 32

// Output is one frame to send, produced by an output action.
//
// TunID and TunDst are meaningful only when the port is a tunnel port: they
// are the tunnel metadata at the time of the output action. EthDst is set
// when a set_field rewrote the Ethernet destination before the output.
type Output struct {
	Port      uint32
	TunID     uint64
	TunDst    [4]byte
	EthDst    [6]byte
	SetEthDst bool
}

// MaxCT is the most ct and ct_clear actions one pipeline run may meet;
// a run that meets more is dropped (DropTooManyCT).
const MaxCT = 4

// MaxRecirc is how deep recirculations (ct(table=N)) may nest: a packet
// recirculated MaxRecirc times is not recirculated again (the switch drops
// that fork), as OVS's userspace datapath bounds them (MAX_RECIRC_DEPTH).
const MaxRecirc = 8

// CTStep is one ct or ct_clear action a pipeline run met, for the caller
// to carry out in order (the pipeline itself never calls the tracker, so
// that a run depends on the packet's fields alone and can be cached):
// the outputs Outputs[:At] of the verdict come before it, the rest after.
//
// For a ct action with CT.Recirc, the packet is also to be recirculated to
// CT.Table with the pipeline's metadata as it was at the action (Regs,
// TunID, TunSrc, TunDst; EthDst when SetEthDst: a set_field to eth_dst
// before the action, which is to be written into the frame first, as OVS
// commits header changes before ct) and the ct_* fields the tracker gave.
type CTStep struct {
	CT        *CT    // the action; nil for ct_clear
	Zone      uint16 // the zone, resolved (from CT.ZoneField when given)
	At        uint8  // outputs of the verdict before this step
	SetEthDst bool
	EthDst    [6]byte
	TunSrc    [4]byte
	TunDst    [4]byte
	TunID     uint64
	Regs      [8]uint32
}

// Verdict is the outcome of one pipeline run: the outputs to perform, or a
// drop with its reason, the ct actions met (CT), and the rules that were
// hit (for counters and the exact-match cache). A Verdict holds no pointers
// into the snapshot other than Hits and CT[i].CT, which stay valid as long
// as the snapshot that made them.
type Verdict struct {
	Outputs [MaxOutputs]Output
	NOut    int
	// Drop is DropNone when NOut > 0 (unless outputs overflowed:
	// DropTooManyOutputs) and when the run produced no output but
	// recirculated (a ct action with table=): what becomes of the packet
	// is then the recirculation's verdict.
	Drop  DropReason
	Table uint8 // table where a drop happened
	CT    [MaxCT]CTStep
	NCT   int
	Hits  [MaxHits]*Rule
	NHits int
}

// Recirculates reports whether v has a ct step that recirculates.
func (v *Verdict) Recirculates() bool {
	for i := range v.CT[:v.NCT] {
		if c := v.CT[i].CT; c != nil && c.Recirc {
			return true
		}
	}
	return false
}

// DropReason says why a pipeline produced no output. The set is closed: the
// switch exports a counter per value.
type DropReason uint8

// The drop reasons of a pipeline run.
const (
	DropNone           DropReason = iota
	DropTableMiss                 // no rule matched in a table
	DropAction                    // a rule's actions ended without output (explicit drop)
	DropLoop                      // too many tables visited (resubmit loop)
	DropTooManyOutputs            // more than MaxOutputs outputs
	DropTooManyCT                 // more than MaxCT ct and ct_clear actions in one run
	numPipelineDrops
)
