package conntrack

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
)

// State is a packet's ct_state: the flags of ovs-fields(7), with the bit
// values OpenFlow gives them, so a flow table can match it with a mask as
// it is.
type State uint32

// The ct_state flags (ovs-fields(7) "Connection Tracking State Field").
const (
	StateNew  State = 1 << iota // new (0x01): a new connection, or an uncommitted one
	StateEst                    // est (0x02): part of a connection seen in both directions
	StateRel                    // rel (0x04): related to a connection (an ICMP error quoting it)
	StateRpl                    // rpl (0x08): in the reply direction of a committed connection
	StateInv                    // inv (0x10): the tracker could not make sense of the packet
	StateTrk                    // trk (0x20): the packet went through the tracker
	StateSNAT                   // snat (0x40): a ct action translated the source
	StateDNAT                   // dnat (0x80): a ct action translated the destination
)

var stateNames = [...]string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}

// String formats s as ovs-ofctl writes a ct_state match, "+new+trk", in
// bit order; 0 is "0".
func (s State) String() string {
	if s == 0 {
		return "0"
	}
	var b []byte
	for i, n := range stateNames {
		if s&(1<<i) != 0 {
			b = append(b, '+')
			b = append(b, n...)
		}
	}
	if rest := s &^ (1<<len(stateNames) - 1); rest != 0 {
		b = append(b, "+0x"...)
		b = strconv.AppendUint(b, uint64(rest), 16)
	}
	return string(b)
}

// Label is a 128-bit ct_label; Hi holds the most significant 64 bits (bit
// 127 of the field is bit 63 of Hi), as OpenFlow writes the field.
type Label struct{ Hi, Lo uint64 }

// IsZero reports whether every bit of l is clear.
func (l Label) IsZero() bool { return l.Hi == 0 && l.Lo == 0 }

// set returns l with the bits of mask taken from v (v is not masked first,
// as OVS's set_label does not mask it either).
func (l Label) set(v, mask Label) Label {
	return Label{Hi: v.Hi | l.Hi&^mask.Hi, Lo: v.Lo | l.Lo&^mask.Lo}
}

// String formats l as ovs-appctl dpctl/dump-conntrack does: "0x" and the
// big-endian bytes in hexadecimal without leading zeros, or "0".
func (l Label) String() string { return string(appendLabel(nil, l)) }

func appendLabel(b []byte, l Label) []byte {
	var be [16]byte
	binary.BigEndian.PutUint64(be[:8], l.Hi)
	binary.BigEndian.PutUint64(be[8:], l.Lo)
	const hex = "0123456789abcdef"
	printed := false
	for _, v := range be {
		switch {
		case printed:
			b = append(b, hex[v>>4], hex[v&15])
		case v != 0:
			b = append(b, "0x"...)
			if v >= 16 {
				b = append(b, hex[v>>4])
			}
			b = append(b, hex[v&15])
			printed = true
		}
	}
	if !printed {
		b = append(b, '0')
	}
	return b
}

// IP protocol numbers the tracker knows by name.
const (
	ProtoICMP uint8 = 1
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
	// ProtoSCTP is tracked by its ports, as the kernel's conntrack does
	// (nf_conntrack_proto_sctp), without its association states: its
	// verification tags are not checked and it keeps the other protocols'
	// states and timeouts (first, multiple, replied).
	// Without the ports, one association between two addresses would
	// make every later one between them, in either direction, part of
	// it: a NetworkPolicy admitting SCTP one way would admit the other.
	ProtoSCTP uint8 = 132
)

// Tuple is a connection's 5-tuple in one direction: the ct_nw_src,
// ct_nw_dst, ct_nw_proto, ct_tp_src and ct_tp_dst fields of ovs-fields(7)
// for the original direction, and the orig/reply tuples of a dump.
//
// For ICMP, SrcPort and DstPort hold the ICMP type and code (as ct_tp_src
// and ct_tp_dst do) and ID the query's identifier. For protocols other than
// TCP, UDP and ICMP the ports are 0.
type Tuple struct {
	Src, Dst         [4]byte
	SrcPort, DstPort uint16
	ID               uint16
	Proto            uint8
}

// String formats t as a dpctl/dump-conntrack tuple:
// "src=10.0.0.1,dst=10.0.0.2,sport=1,dport=2" or, for ICMP,
// "src=…,dst=…,id=7,type=8,code=0".
func (t Tuple) String() string { return string(appendTuple(nil, t)) }

func appendTuple(b []byte, t Tuple) []byte {
	b = append(b, "src="...)
	b = netip.AddrFrom4(t.Src).AppendTo(b)
	b = append(b, ",dst="...)
	b = netip.AddrFrom4(t.Dst).AppendTo(b)
	if t.Proto == ProtoICMP {
		b = append(b, ",id="...)
		b = strconv.AppendUint(b, uint64(t.ID), 10)
		b = append(b, ",type="...)
		b = strconv.AppendUint(b, uint64(t.SrcPort), 10)
		b = append(b, ",code="...)
		return strconv.AppendUint(b, uint64(t.DstPort), 10)
	}
	b = append(b, ",sport="...)
	b = strconv.AppendUint(b, uint64(t.SrcPort), 10)
	b = append(b, ",dport="...)
	return strconv.AppendUint(b, uint64(t.DstPort), 10)
}

// Meta is the connection-tracking metadata a packet carries through the
// pipeline: the ct_* match fields and, hidden, the connection the last ct
// action found (OVS keeps it in the packet so that a second ct action in
// the same zone does not look the connection up again).
//
// The zero Meta is an untracked packet; the caller starts every packet with
// a zero Meta and passes the same Meta to each ct action the packet meets.
// Clear is the ct_clear action. A Meta belongs to one packet and is not
// safe for concurrent use.
type Meta struct {
	State State  // ct_state
	Zone  uint16 // ct_zone
	Mark  uint32 // ct_mark
	Label Label  // ct_label

	orig    [2]uint64 // the original direction's key (see Orig), as key.words
	conn    uint32    // cached connection: slab index + 1, 0 for none
	gen     uint32    // its generation when cached
	reply   bool      // the packet is in the connection's reply direction
	related bool      // the packet is an ICMP error related to the connection
	step    uint8     // ct actions met since the packet started (or ct_clear): keys fragment records
	// A later fragment's ports: those its first fragment left with
	// (FragmentPorts).
	fragPorts    bool
	sport, dport uint16
}

// FragmentPorts returns, for a later IPv4 fragment (one without an L4
// header) that took its first fragment's verdict, the TCP, UDP or SCTP
// ports the first fragment left this ct action with; ok is false for
// every other packet. A switch gives them to the fragment's match fields,
// so that rules on ports judge every fragment of a datagram as they judged
// its first, as OVS does by reassembling the datagram before its rules
// see it.
func (m *Meta) FragmentPorts() (sport, dport uint16, ok bool) {
	return m.sport, m.dport, m.fragPorts
}

// Clear makes m untracked, as the ct_clear action does.
func (m *Meta) Clear() { *m = Meta{} }

// Orig returns the connection's original-direction tuple: the ct_nw_src,
// ct_nw_dst, ct_nw_proto, ct_tp_src and ct_tp_dst match fields (zero for
// an untracked or invalid packet). It is decoded on demand so that
// Process need not.
func (m *Meta) Orig() Tuple {
	if m.orig == [2]uint64{} {
		return Tuple{}
	}
	return keyOf(m.orig[0], m.orig[1]).tuple()
}

// NATKind says what a ct action's nat argument asks for.
type NATKind uint8

// The kinds of nat argument (ovs-actions(7) "The ct action", nat).
const (
	NATNone NATKind = iota // no nat argument
	NATBare                // a bare "nat": apply the translation recorded for the connection
	NATSrc                 // nat(src=…): source translation for a new connection
	NATDst                 // nat(dst=…): destination translation for a new connection
)

// NAT is a ct action's nat argument. For NATSrc and NATDst, the
// translated address is chosen from MinAddr–MaxAddr (MaxAddr zero means
// MinAddr alone; an all-zero MinAddr keeps the packet's own address, the
// nat(src=0.0.0.0) special case) and the port from MinPort–MaxPort (both
// zero: keep the port unless it collides, then pick one from the
// ephemeral class of the original port, as OVS does). Random picks the
// first port to try at random instead of from a hash of the tuple (OVS's
// hash flag, the default, needs no field);
// Persistent makes the address choice depend on the source address only,
// so it survives a restart. The range of a connection that already exists
// is ignored: it keeps the translation it was committed with.
type NAT struct {
	Kind             NATKind
	MinAddr, MaxAddr [4]byte
	MinPort, MaxPort uint16
	Random           bool
	Persistent       bool
}

// Action is one ct action's arguments (ovs-actions(7) "The ct action").
// The flow table builds it once per rule; Process only reads it.
type Action struct {
	Zone   uint16 // zone=N
	Commit bool   // commit
	Force  bool   // force (implies commit, as in OVS; Validate wants Commit too, as ovs-ofctl does)
	NAT    NAT    // nat, nat(src=…), nat(dst=…)

	// exec(set_field:Mark/MarkMask->ct_mark)
	SetMark        bool
	Mark, MarkMask uint32

	// exec(set_field:Label/LabelMask->ct_label)
	SetLabel         bool
	Label, LabelMask Label
}

// Validate reports whether a is an action Process can carry out as
// written: force and exec need commit, and a nat range must not be
// reversed. Process itself never fails on an Action; it clamps what
// Validate would refuse.
func (a *Action) Validate() error {
	if a.Force && !a.Commit {
		return fmt.Errorf("%w: force without commit", ErrAction)
	}
	if (a.SetMark || a.SetLabel) && !a.Commit {
		return fmt.Errorf("%w: exec(set_field) without commit", ErrAction)
	}
	n := &a.NAT
	switch n.Kind {
	case NATNone, NATBare:
		if n.MinAddr != ([4]byte{}) || n.MaxAddr != ([4]byte{}) || n.MinPort != 0 || n.MaxPort != 0 {
			return fmt.Errorf("%w: a nat range needs src= or dst=", ErrAction)
		}
	case NATSrc, NATDst:
		if n.MaxAddr != ([4]byte{}) && be32(n.MaxAddr) < be32(n.MinAddr) {
			return fmt.Errorf("%w: nat address range %v-%v is reversed", ErrAction,
				netip.AddrFrom4(n.MinAddr), netip.AddrFrom4(n.MaxAddr))
		}
		if n.MaxPort != 0 && n.MaxPort < n.MinPort {
			return fmt.Errorf("%w: nat port range %d-%d is reversed", ErrAction, n.MinPort, n.MaxPort)
		}
		if n.MinPort == 0 && n.MaxPort != 0 {
			return fmt.Errorf("%w: nat port range starts at 0", ErrAction)
		}
	default:
		return fmt.Errorf("%w: unknown nat kind %d", ErrAction, n.Kind)
	}
	return nil
}

// PacketFlags tell Process what the caller knows about a packet's
// checksums.
type PacketFlags uint8

const (
	// CsumPartial: the L4 checksum is partial (virtio_net_hdr
	// NEEDS_CSUM, Linux CHECKSUM_PARTIAL): the checksum field holds the
	// folded pseudo-header sum only and a later stage completes it.
	// Process neither validates it nor folds port changes into it, and
	// updates it for address changes as Linux's inet_proto_csum_replace4
	// does with pseudohdr set.
	CsumPartial PacketFlags = 1 << iota
	// CsumVerified: the caller vouches for the IPv4 header and L4
	// checksums (virtio DATA_VALID, or checked already); Process does not
	// check them. Without it (and without CsumPartial for the L4 sum)
	// Process validates them as OVS does when their state is unknown, and
	// a bad one makes the packet +inv.
	CsumVerified
)

// Reason says why Process marked a packet +inv, or why a commit did not
// create a connection. The set is closed so that the embedder can keep a
// counter per value (Stats.Reasons).
type Reason uint8

// The reasons.
const (
	ReasonNone         Reason = iota
	ReasonMalformed           // headers too short or inconsistent, port 0, not IPv4
	ReasonChecksum            // bad IPv4 header or L4 checksum
	ReasonTCPFlags            // an impossible TCP flag combination
	ReasonTCPWindow           // a TCP segment outside the sequence window
	ReasonNotNew              // cannot start a connection (SYN+ACK, ICMP reply, …)
	ReasonNoRelated           // an ICMP error that quotes no known connection
	ReasonFragment            // a non-first fragment whose first fragment was not seen
	ReasonTableFull           // commit refused: the global entry limit, nothing to evict
	ReasonZoneFull            // commit refused: the zone's entry limit
	ReasonNATExhausted        // commit refused: no free tuple in the nat range
	NumReasons
)

var reasonNames = [NumReasons]string{
	"none", "malformed", "checksum", "tcp_flags", "tcp_window", "not_new",
	"no_related", "fragment", "table_full", "zone_full", "nat_exhausted",
}

// String returns the reason's name, as a metric label.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Invalid reports whether r makes a packet +inv (the commit failures do
// not: such a packet stays +trk+new, untracked by any entry).
func (r Reason) Invalid() bool {
	return r != ReasonNone && r < ReasonTableFull
}

func be32(a [4]byte) uint32 { return binary.BigEndian.Uint32(a[:]) }

func addr4(v uint32) (a [4]byte) {
	binary.BigEndian.PutUint32(a[:], v)
	return a
}
