package gen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// The blaster's frames, built by FrameBuilder:
//
//  1. Ethernet II: DstMAC, SrcMAC, type IPv4.
//  2. IPv4 (RFC 791): 20 bytes, no options, DF, ID 0, TTL 64, protocol UDP,
//     header checksum computed once (the header never changes).
//  3. UDP (RFC 768): source port BasePort+flow, DstPort, checksum over the
//     pseudo-header, header and payload (never 0: 0xffff instead).
//  4. Payload: the magic "gvsb", the flow number (4 bytes) and a sequence
//     number (8 bytes), then zeros up to the frame size.
//
// Only the source port, flow and sequence number change from frame to frame;
// Patch rewrites them and updates the UDP checksum from a precomputed sum of
// the fixed part, so a frame costs a few dozen instructions whatever its size.

// Header sizes of a blaster frame.
const (
	ethLen   = 14
	ipv4Len  = 20
	udpLen   = 8
	blastHdr = ethLen + ipv4Len + udpLen
	// blastMeta is the payload bytes the blaster writes: magic, flow, seq.
	blastMeta = 16
)

// BlastMagic opens the payload of every blaster frame ("gvsb").
const BlastMagic = 0x67767362

// MaxFlows is the largest number of flows the blaster and its receiver
// handle (distinct UDP source ports from FrameSpec.BasePort on).
const MaxFlows = 16384

// ErrFlows is returned for a flow count outside 1..MaxFlows, or one that
// would push the source ports past 65535.
var ErrFlows = errors.New("gen: flow count out of range")

// FrameSpec describes the frames of one blast.
type FrameSpec struct {
	SrcMAC, DstMAC [6]byte
	// Src and Dst are IPv4 addresses.
	Src, Dst netip.Addr
	// BasePort is the UDP source port of flow 0; flow i uses BasePort+i.
	BasePort uint16
	// DstPort is the UDP destination port.
	DstPort uint16
	// Size is the Ethernet frame size without FCS, MinFrame..MaxFrame.
	Size int
	// Flows is the number of flows, 1..MaxFlows.
	Flows int
}

// Validate checks the spec.
func (s FrameSpec) Validate() error {
	if s.Size < MinFrame || s.Size > MaxFrame {
		return fmt.Errorf("%w: %d B (want %d..%d)", ErrFrameSize, s.Size, MinFrame, MaxFrame)
	}
	if !s.Src.Is4() || !s.Dst.Is4() {
		return fmt.Errorf("gen: blast needs IPv4 addresses, have %v → %v", s.Src, s.Dst)
	}
	if s.Flows < 1 || s.Flows > MaxFlows || int(s.BasePort)+s.Flows-1 > 65535 {
		return fmt.Errorf("%w: %d flows from source port %d (max %d)", ErrFlows, s.Flows, s.BasePort, MaxFlows)
	}
	if s.DstPort == 0 {
		return errors.New("gen: blast needs a destination port")
	}
	return nil
}

// FrameBuilder writes blaster frames. It is immutable after
// NewFrameBuilder and safe for concurrent use.
type FrameBuilder struct {
	spec     FrameSpec
	template []byte
	// sum is the ones' complement sum (not folded) of the UDP pseudo-header,
	// header and payload with the source port, flow and sequence zero.
	sum uint64
}

// NewFrameBuilder checks spec and precomputes the frame template.
func NewFrameBuilder(spec FrameSpec) (*FrameBuilder, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	t := make([]byte, spec.Size)
	copy(t[0:6], spec.DstMAC[:])
	copy(t[6:12], spec.SrcMAC[:])
	binary.BigEndian.PutUint16(t[12:14], 0x0800)
	ip := t[ethLen : ethLen+ipv4Len]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(spec.Size-ethLen))
	binary.BigEndian.PutUint16(ip[6:8], 0x4000) // DF
	ip[8] = 64
	ip[9] = 17
	src, dst := spec.Src.As4(), spec.Dst.As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:12], ^fold(sum16(ip, 0)))
	udp := t[ethLen+ipv4Len:]
	binary.BigEndian.PutUint16(udp[2:4], spec.DstPort)
	binary.BigEndian.PutUint16(udp[4:6], uint16(len(udp)))
	binary.BigEndian.PutUint32(udp[udpLen:], BlastMagic)
	// Pseudo-header: addresses, protocol, UDP length.
	s := sum16(ip[12:20], 0) + 17 + uint64(len(udp))
	s = sum16(udp, s)
	return &FrameBuilder{spec: spec, template: t, sum: s}, nil
}

// Spec returns the builder's spec.
func (b *FrameBuilder) Spec() FrameSpec { return b.spec }

// Build writes a complete frame of flow and sequence number seq into
// frame, which must be Spec().Size bytes long.
func (b *FrameBuilder) Build(frame []byte, flow uint32, seq uint64) {
	copy(frame, b.template)
	b.Patch(frame, flow, seq)
}

// Patch turns frame, which already holds a frame built by b, into the frame
// of flow and sequence number seq: it rewrites the source port, the flow
// and sequence fields and the UDP checksum. It does not allocate.
func (b *FrameBuilder) Patch(frame []byte, flow uint32, seq uint64) {
	udp := frame[ethLen+ipv4Len : b.spec.Size]
	sport := b.spec.BasePort + uint16(flow)
	binary.BigEndian.PutUint16(udp[0:2], sport)
	binary.BigEndian.PutUint32(udp[udpLen+4:], flow)
	binary.BigEndian.PutUint64(udp[udpLen+8:], seq)
	s := b.sum + uint64(sport) + uint64(flow>>16) + uint64(flow&0xffff) +
		seq>>48 + (seq>>32)&0xffff + (seq>>16)&0xffff + seq&0xffff
	c := ^fold(s)
	if c == 0 {
		c = 0xffff // RFC 768: a computed zero is sent as all ones
	}
	binary.BigEndian.PutUint16(udp[6:8], c)
}

// sum16 adds b as big-endian 16-bit words (a trailing odd byte padded with
// zero) to s.
func sum16(b []byte, s uint64) uint64 {
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// fold folds a 64-bit ones' complement sum to 16 bits.
func fold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// BlastFrame is a received blaster frame's identity, as ParseBlastFrame
// finds it.
type BlastFrame struct {
	SrcPort, DstPort uint16
	Flow             uint32
	Seq              uint64
}

// ParseBlastFrame recognises a blaster frame: Ethernet II, IPv4 (any header
// length, first fragment), UDP, payload opening with BlastMagic. It reads
// only the first bytes, so frame may be truncated after the payload's 16
// bytes of metadata. It does not allocate.
func ParseBlastFrame(frame []byte) (BlastFrame, bool) {
	var f BlastFrame
	if len(frame) < ethLen+ipv4Len || binary.BigEndian.Uint16(frame[12:14]) != 0x0800 {
		return f, false
	}
	ip := frame[ethLen:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < ipv4Len || ip[9] != 17 || binary.BigEndian.Uint16(ip[6:8])&0x1fff != 0 {
		return f, false
	}
	udp := ip[min(ihl, len(ip)):]
	if len(udp) < udpLen+blastMeta || binary.BigEndian.Uint32(udp[udpLen:]) != BlastMagic {
		return f, false
	}
	f.SrcPort = binary.BigEndian.Uint16(udp[0:2])
	f.DstPort = binary.BigEndian.Uint16(udp[2:4])
	f.Flow = binary.BigEndian.Uint32(udp[udpLen+4:])
	f.Seq = binary.BigEndian.Uint64(udp[udpLen+8:])
	return f, true
}
