package ipfix

import (
	"encoding/binary"
	"time"

	"github.com/gvswitch/gvs/conntrack"
)

// The IANA information elements gvs exports (IANA's "IP Flow Information
// Export (IPFIX) Entities" registry, RFC 7012; the NAT ones from RFC 8158's
// additions, as OVS and NSEL exporters use them).
const (
	IEOctetDeltaCount                  = 1   // unsigned64: IPv4 bytes since the previous record of the flow
	IEPacketDeltaCount                 = 2   // unsigned64
	IEProtocolIdentifier               = 4   // unsigned8
	IESourceTransportPort              = 7   // unsigned16
	IESourceIPv4Address                = 8   // ipv4Address
	IEDestinationTransportPort         = 11  // unsigned16
	IEDestinationIPv4Address           = 12  // ipv4Address
	IEICMPTypeCodeIPv4                 = 32  // unsigned16: type << 8 | code
	IEFlowEndReason                    = 136 // unsigned8: conntrack.FlowEnd
	IEFlowStartMilliseconds            = 152 // dateTimeMilliseconds
	IEFlowEndMilliseconds              = 153 // dateTimeMilliseconds
	IEPostNATSourceIPv4Address         = 225 // ipv4Address
	IEPostNATDestinationIPv4Address    = 226 // ipv4Address
	IEPostNAPTSourceTransportPort      = 227 // unsigned16
	IEPostNAPTDestinationTransportPort = 228 // unsigned16
	IEBiflowDirection                  = 239 // unsigned8: 1 initiator, 2 reverse initiator
)

// DocumentationPEN is the Private Enterprise Number gvs's own elements
// carry unless Config.Enterprise says otherwise: 32473, which IANA
// reserved for documentation and examples (RFC 5612). It is a
// placeholder: gvs has no number of its own yet; an operator whose
// collector decodes these elements may configure the number it knows them
// by.
const DocumentationPEN = 32473

// gvs's enterprise-specific elements (under Config.Enterprise): no IANA
// element says which project or pod an address belongs to.
const (
	IESourceVNID         = 1 // unsigned32: the source pod's project VNID; NoVNID when not a pod of this cluster
	IEDestinationVNID    = 2 // unsigned32: the destination pod's
	IESourcePodName      = 3 // string, variable length: "namespace/name" of the source pod, "" when not a pod
	IEDestinationPodName = 4 // string: the destination pod's
)

// NoVNID is the VNID of an address that is no pod's (VNIDs are 24 bits).
const NoVNID = 0xffffffff

// Biflow directions (IANA biflowDirection, RFC 5103 section 6.3).
const (
	DirInitiator        = 1 // the connection's original direction
	DirReverseInitiator = 2 // its reply direction
)

// The templates gvs's records use.
const (
	TemplateFlow    = 256 // a direction of a connection without address translation
	TemplateFlowNAT = 257 // the same with the post-NAT addresses and ports
)

// Templates returns gvs's two templates with its enterprise elements under
// pen.
func Templates(pen uint32) [2]Template {
	base := []Field{
		{ID: IESourceIPv4Address, Length: 4},
		{ID: IEDestinationIPv4Address, Length: 4},
		{ID: IESourceTransportPort, Length: 2},
		{ID: IEDestinationTransportPort, Length: 2},
		{ID: IEProtocolIdentifier, Length: 1},
		{ID: IEICMPTypeCodeIPv4, Length: 2},
		{ID: IEOctetDeltaCount, Length: 8},
		{ID: IEPacketDeltaCount, Length: 8},
		{ID: IEFlowStartMilliseconds, Length: 8},
		{ID: IEFlowEndMilliseconds, Length: 8},
		{ID: IEFlowEndReason, Length: 1},
		{ID: IEBiflowDirection, Length: 1},
		{ID: IESourceVNID, Length: 4, Enterprise: pen},
		{ID: IEDestinationVNID, Length: 4, Enterprise: pen},
		{ID: IESourcePodName, Length: VarLen, Enterprise: pen},
		{ID: IEDestinationPodName, Length: VarLen, Enterprise: pen},
	}
	nat := append(append([]Field(nil), base...),
		Field{ID: IEPostNATSourceIPv4Address, Length: 4},
		Field{ID: IEPostNATDestinationIPv4Address, Length: 4},
		Field{ID: IEPostNAPTSourceTransportPort, Length: 2},
		Field{ID: IEPostNAPTDestinationTransportPort, Length: 2},
	)
	return [2]Template{{ID: TemplateFlow, Fields: base}, {ID: TemplateFlowNAT, Fields: nat}}
}

// Record is one direction of a connection as gvs exports it: a data
// record of TemplateFlow, or of TemplateFlowNAT when NAT is set.
type Record struct {
	Src, Dst         [4]byte
	SrcPort, DstPort uint16 // 0 for ICMP and protocols without ports
	Proto            uint8
	ICMPTypeCode     uint16 // ICMP: type << 8 | code
	Octets, Packets  uint64
	StartMs, EndMs   uint64 // milliseconds since the UNIX epoch
	EndReason        conntrack.FlowEnd
	Direction        uint8 // DirInitiator or DirReverseInitiator
	SrcVNID, DstVNID uint32
	SrcPod, DstPod   string

	NAT                      bool // the post-NAT fields below are set
	PostSrc, PostDst         [4]byte
	PostSrcPort, PostDstPort uint16
}

// TemplateID is the template r is encoded with.
func (r *Record) TemplateID() uint16 {
	if r.NAT {
		return TemplateFlowNAT
	}
	return TemplateFlow
}

// AppendRecord appends r as a data record of its template (the fields in
// Templates' order, network byte order, RFC 7011 section 6.1).
func AppendRecord(b []byte, r *Record) []byte {
	b = append(b, r.Src[:]...)
	b = append(b, r.Dst[:]...)
	b = binary.BigEndian.AppendUint16(b, r.SrcPort)
	b = binary.BigEndian.AppendUint16(b, r.DstPort)
	b = append(b, r.Proto)
	b = binary.BigEndian.AppendUint16(b, r.ICMPTypeCode)
	b = binary.BigEndian.AppendUint64(b, r.Octets)
	b = binary.BigEndian.AppendUint64(b, r.Packets)
	b = binary.BigEndian.AppendUint64(b, r.StartMs)
	b = binary.BigEndian.AppendUint64(b, r.EndMs)
	b = append(b, byte(r.EndReason), r.Direction)
	b = binary.BigEndian.AppendUint32(b, r.SrcVNID)
	b = binary.BigEndian.AppendUint32(b, r.DstVNID)
	b = AppendVarLen(b, r.SrcPod)
	b = AppendVarLen(b, r.DstPod)
	if r.NAT {
		b = append(b, r.PostSrc[:]...)
		b = append(b, r.PostDst[:]...)
		b = binary.BigEndian.AppendUint16(b, r.PostSrcPort)
		b = binary.BigEndian.AppendUint16(b, r.PostDstPort)
	}
	return b
}

// Endpoint is what the exporter knows of an address: the pod that has it
// ("namespace/name") and its project's VNID.
type Endpoint struct {
	Pod  string
	VNID uint32
}

// Resolver finds the pod of an address; ok is false for an address that
// is no pod's. It is called off the packet path, by the exporter's
// goroutine, and must be safe for concurrent use with the pods' changes.
type Resolver func(addr [4]byte) (ep Endpoint, ok bool)

// Clock pairs a wall-clock time with the tracker's time at the same
// moment, to date the tracker's times.
type Clock struct {
	Wall time.Time
	Now  conntrack.Time
}

// Ms returns tracker time t in milliseconds since the UNIX epoch.
func (c Clock) Ms(t conntrack.Time) uint64 {
	return uint64(c.Wall.Add(time.Duration(t - c.Now)).UnixMilli())
}

// Records turns one report of a connection into its records, one per
// direction that carried packets since the previous report (n is 0, 1
// or 2). clock dates the tracker's times; resolve (nil: none) names the
// pods.
func Records(f *conntrack.Flow, clock Clock, resolve Resolver, out *[2]Record) (n int) {
	dirs := [2]struct {
		pre, post conntrack.Tuple
		dir       uint8
	}{
		{f.Orig, conntrack.Tuple{Src: f.Reply.Dst, Dst: f.Reply.Src, SrcPort: f.Reply.DstPort, DstPort: f.Reply.SrcPort}, DirInitiator},
		{f.Reply, conntrack.Tuple{Src: f.Orig.Dst, Dst: f.Orig.Src, SrcPort: f.Orig.DstPort, DstPort: f.Orig.SrcPort}, DirReverseInitiator},
	}
	start, end := clock.Ms(f.Start), clock.Ms(f.Last)
	for d, x := range dirs {
		if f.Packets[d] == 0 {
			continue
		}
		r := &out[n]
		n++
		*r = Record{
			Src: x.pre.Src, Dst: x.pre.Dst, Proto: f.Orig.Proto,
			Octets: f.Bytes[d], Packets: f.Packets[d], StartMs: start, EndMs: end,
			EndReason: f.End, Direction: x.dir, SrcVNID: NoVNID, DstVNID: NoVNID,
		}
		icmp := f.Orig.Proto == conntrack.ProtoICMP
		if icmp {
			r.ICMPTypeCode = x.pre.SrcPort<<8 | x.pre.DstPort&0xff
		} else {
			r.SrcPort, r.DstPort = x.pre.SrcPort, x.pre.DstPort
		}
		if f.NAT != conntrack.NATNone {
			r.NAT = true
			r.PostSrc, r.PostDst = x.post.Src, x.post.Dst
			if !icmp {
				r.PostSrcPort, r.PostDstPort = x.post.SrcPort, x.post.DstPort
			}
		}
		if resolve != nil {
			if ep, ok := lookup(resolve, r.Src, x.post.Src); ok {
				r.SrcPod, r.SrcVNID = ep.Pod, ep.VNID
			}
			if ep, ok := lookup(resolve, r.Dst, x.post.Dst); ok {
				r.DstPod, r.DstVNID = ep.Pod, ep.VNID
			}
		}
	}
	return n
}

// lookup resolves the address a packet had before translation, else the
// one it had after (a pod behind a DNAT is found by its own address).
func lookup(resolve Resolver, pre, post [4]byte) (Endpoint, bool) {
	if ep, ok := resolve(pre); ok {
		return ep, true
	}
	if post != pre && post != ([4]byte{}) {
		return resolve(post)
	}
	return Endpoint{}, false
}
