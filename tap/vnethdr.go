package tap

import (
	"encoding/binary"
	"errors"

	"github.com/gvswitch/gvs/packet"
)

// VnetHdrLen is the length of the legacy virtio_net_hdr (struct
// virtio_net_hdr in include/uapi/linux/virtio_net.h) that a TAP opened with
// IFF_VNET_HDR puts in front of every frame. gvs sets TUNSETVNETHDRSZ to it.
const VnetHdrLen = 10

// Flag bits of VnetHdr.Flags.
const (
	// VnetNeedsCsum (VIRTIO_NET_HDR_F_NEEDS_CSUM) says the L4 checksum is
	// partial: the field at CsumStart+CsumOffset holds the pseudo-header sum
	// and the one's-complement sum from CsumStart to the end must be folded
	// into it.
	VnetNeedsCsum = 1
	// VnetDataValid (VIRTIO_NET_HDR_F_DATA_VALID) says the checksum was
	// already verified.
	VnetDataValid = 2
	// VnetRSCInfo (VIRTIO_NET_HDR_F_RSC_INFO) is accepted on parse and
	// otherwise ignored.
	VnetRSCInfo = 4
)

// GSO types of VnetHdr.GSOType.
const (
	GSONone  = 0    // VIRTIO_NET_HDR_GSO_NONE
	GSOTCPv4 = 1    // VIRTIO_NET_HDR_GSO_TCPV4
	GSOUDP   = 3    // VIRTIO_NET_HDR_GSO_UDP (UFO, deprecated)
	GSOTCPv6 = 4    // VIRTIO_NET_HDR_GSO_TCPV6
	GSOUDPL4 = 5    // VIRTIO_NET_HDR_GSO_UDP_L4 (USO)
	GSOECN   = 0x80 // VIRTIO_NET_HDR_GSO_ECN, or-ed into a TCP type
)

// ethernetLen is the Ethernet header length. It is repeated here so that
// the header code does not need package packet.
const ethernetLen = 14

// Errors returned by ParseVnetHdr. They are sentinels so that the read path
// can count them without allocating.
var (
	// ErrVnetShort: fewer than VnetHdrLen bytes.
	ErrVnetShort = errors.New("tap: virtio_net_hdr: short buffer")
	// ErrVnetFlags: a flag bit gvs does not know.
	ErrVnetFlags = errors.New("tap: virtio_net_hdr: unknown flags")
	// ErrVnetGSOType: an unknown GSO type, ECN on a non-TCP type, or a GSO
	// frame with gso_size 0.
	ErrVnetGSOType = errors.New("tap: virtio_net_hdr: bad gso type")
	// ErrVnetCsum: NEEDS_CSUM with csum_start or the checksum field outside
	// the frame, or csum_start inside the Ethernet header.
	ErrVnetCsum = errors.New("tap: virtio_net_hdr: checksum offsets outside frame")
	// ErrVnetHdrLen: hdr_len larger than the frame.
	ErrVnetHdrLen = errors.New("tap: virtio_net_hdr: hdr_len outside frame")
)

// VnetHdr is a view of a legacy virtio_net_hdr (10 bytes):
//
//	offset 0  u8   flags
//	offset 1  u8   gso_type
//	offset 2  u16  hdr_len      length of the headers (Ethernet included on a TAP)
//	offset 4  u16  gso_size     payload bytes per segment
//	offset 6  u16  csum_start   where checksumming starts, counted from the
//	                            start of the Ethernet header on a TAP
//	offset 8  u16  csum_offset  where the checksum is stored, from csum_start
//
// Byte order: the kernel reads and writes the legacy header in the host's
// ("guest native") byte order unless the fd was switched with TUNSETVNETLE
// or TUNSETVNETBE (drivers/net/tun.c, tun_is_little_endian). Create issues
// TUNSETVNETLE, so on every host a Device's headers are little-endian, as
// in virtio 1.0, and that is what VnetHdr reads and writes. (On a
// little-endian host the ioctl changes nothing.)
//
// The accessors are unchecked: call ParseVnetHdr, or make sure the view is
// at least VnetHdrLen long.
type VnetHdr []byte

// ParseVnetHdr checks the virtio_net_hdr at the start of b, where b is the
// header followed by the Ethernet frame as read from a TAP, and returns a
// view of the header. It checks that the flags and GSO type are known, that
// a GSO frame has a segment size, that hdr_len lies within the frame, and,
// with NEEDS_CSUM, that csum_start is past the Ethernet header and the
// 2-byte checksum field at csum_start+csum_offset lies within the frame.
// It does not allocate.
func ParseVnetHdr(b []byte) (VnetHdr, error) {
	if len(b) < VnetHdrLen {
		return nil, ErrVnetShort
	}
	h := VnetHdr(b[:VnetHdrLen])
	frameLen := len(b) - VnetHdrLen
	if h.Flags()&^(VnetNeedsCsum|VnetDataValid|VnetRSCInfo) != 0 {
		return nil, ErrVnetFlags
	}
	gt := h.GSOType()
	switch gt &^ GSOECN {
	case GSONone:
		if gt&GSOECN != 0 {
			return nil, ErrVnetGSOType
		}
	case GSOTCPv4, GSOTCPv6:
		if h.GSOSize() == 0 {
			return nil, ErrVnetGSOType
		}
	case GSOUDP, GSOUDPL4:
		if gt&GSOECN != 0 || h.GSOSize() == 0 {
			return nil, ErrVnetGSOType
		}
	default:
		return nil, ErrVnetGSOType
	}
	if int(h.HdrLen()) > frameLen {
		return nil, ErrVnetHdrLen
	}
	if h.Flags()&VnetNeedsCsum != 0 {
		start := int(h.CsumStart())
		if start < ethernetLen || start+int(h.CsumOffset())+2 > frameLen {
			return nil, ErrVnetCsum
		}
	}
	return h, nil
}

// Flags returns the flags byte.
func (h VnetHdr) Flags() uint8 { return h[0] }

// GSOType returns the gso_type byte (GSONone … GSOUDPL4, maybe | GSOECN).
func (h VnetHdr) GSOType() uint8 { return h[1] }

// HdrLen returns hdr_len.
func (h VnetHdr) HdrLen() uint16 { return binary.LittleEndian.Uint16(h[2:4]) }

// GSOSize returns gso_size.
func (h VnetHdr) GSOSize() uint16 { return binary.LittleEndian.Uint16(h[4:6]) }

// CsumStart returns csum_start.
func (h VnetHdr) CsumStart() uint16 { return binary.LittleEndian.Uint16(h[6:8]) }

// CsumOffset returns csum_offset.
func (h VnetHdr) CsumOffset() uint16 { return binary.LittleEndian.Uint16(h[8:10]) }

// NeedsCsum reports whether VnetNeedsCsum is set.
func (h VnetHdr) NeedsCsum() bool { return h[0]&VnetNeedsCsum != 0 }

// IsGSO reports whether the frame is a GSO super-frame.
func (h VnetHdr) IsGSO() bool { return h[1]&^GSOECN != GSONone }

// SetFlags overwrites the flags byte.
func (h VnetHdr) SetFlags(f uint8) { h[0] = f }

// SetGSOType overwrites gso_type.
func (h VnetHdr) SetGSOType(t uint8) { h[1] = t }

// SetHdrLen overwrites hdr_len.
func (h VnetHdr) SetHdrLen(n uint16) { binary.LittleEndian.PutUint16(h[2:4], n) }

// SetGSOSize overwrites gso_size.
func (h VnetHdr) SetGSOSize(n uint16) { binary.LittleEndian.PutUint16(h[4:6], n) }

// SetCsumStart overwrites csum_start.
func (h VnetHdr) SetCsumStart(n uint16) { binary.LittleEndian.PutUint16(h[6:8], n) }

// SetCsumOffset overwrites csum_offset.
func (h VnetHdr) SetCsumOffset(n uint16) { binary.LittleEndian.PutUint16(h[8:10], n) }

// Reset zeroes the header: no flags, no GSO, a complete frame. This is the
// header gvs writes in front of every frame while offloads are off.
func (h VnetHdr) Reset() { clear(h[:VnetHdrLen]) }

// SetPartialCsum marks the checksum partial: sets VnetNeedsCsum, csum_start
// (counted from the Ethernet header on a TAP) and csum_offset (16 for TCP,
// 6 for UDP). The caller stores the pseudo-header sum in the field.
func (h VnetHdr) SetPartialCsum(start, offset uint16) {
	h[0] |= VnetNeedsCsum
	h.SetCsumStart(start)
	h.SetCsumOffset(offset)
}

// Put resets the header and describes g in it: nothing for a complete
// frame; the GSO type, header length and segment size of a super-frame; the
// partial checksum's start and offset if g.NeedsCsum. It is the header a
// port writes in front of a frame it sends to the kernel.
func (h VnetHdr) Put(g packet.GSO) {
	h.Reset()
	if g.IsGSO() || g.NeedsCsum {
		h.SetGSO(g.Type, g.HdrLen, g.Size)
		if g.NeedsCsum {
			h.SetPartialCsum(g.CsumStart, g.CsumOffset)
		}
	}
}

// SetGSO describes a GSO super-frame: type (GSOTCPv4 …), header length and
// segment payload size.
func (h VnetHdr) SetGSO(gsoType uint8, hdrLen, gsoSize uint16) {
	h[1] = gsoType
	h.SetHdrLen(hdrLen)
	h.SetGSOSize(gsoSize)
}
