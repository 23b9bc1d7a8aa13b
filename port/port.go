// Package port holds what the switch (package vswitch) and its ports
// exchange: the metadata of each frame of a batch (Meta), the tunnel end a
// frame comes from or goes to (Endpoint), and what a port says it can do
// (Caps), and the allowance of receive-buffer memory the ports of a switch
// share (Budget). It imports nothing but package packet (and the system,
// to give a buffer's pages back: ReleasePages), so a port — a TAP (package
// tap), the VXLAN tunnel (package vxlan) or an embedder's own — implements
// vswitch.Port without importing the switch, and the switch knows no port
// type.
//
// The batch convention, as in wireguard-go's tun.Device: the caller owns
// the buffers; frame i of a batch is bufs[i][offset:offset+meta[i].Size];
// the offset bytes in front of it are headroom a port may write its own
// header into (a virtio_net_hdr, a VXLAN header), so that nothing is
// copied. docs/embedding.md shows a port written from scratch.
package port

import (
	"errors"
	"fmt"

	"github.com/gvswitch/gvs/packet"
)

// ErrWoken is what a port's Read returns, with no frames, when its reader
// was woken up on purpose (a port's Wake method, where it has one: the
// switch wakes an idle port's worker to give its buffers' memory back). The
// reader goes on reading; the port is fine.
var ErrWoken = errors.New("port: read woken up")

// ErrMoveReader is what a port's Read returns, with no frames, when its
// reader should go on reading from a new goroutine and let the calling one
// end. A port returns it when it had locked the reading goroutine to its OS
// thread (runtime.LockOSThread) for something of that thread's own (an
// io_uring ring: package tap/uring), gave that up while the port was idle,
// and left the goroutine locked so that the thread ends with the goroutine:
// Go keeps an unlocked thread for good, an idle pod's thread would stay. It
// is a wake-up too (errors.Is(err, ErrWoken)), so a reader that simply
// reads on still works, and keeps the thread.
var ErrMoveReader = fmt.Errorf("%w; read on from a new goroutine", ErrWoken)

// Endpoint is the tunnel end of a frame on a tunnel port (Caps.Tunnel): the
// remote node's underlay IPv4 address — the frame's outer source when it
// was read, its outer destination when it is written — and the 24-bit VNI
// it travels with.
type Endpoint struct {
	Addr [4]byte
	// Port is the remote's UDP port when the frame was read (the
	// datagram's source port). Write ignores it: a tunnel sends to the
	// UDP port it was configured with.
	Port uint16
	VNI  uint32
}

// Meta describes one frame of a batch. Read fills meta[i] for each frame
// it returns (every field it does not set is zero); Write reads meta[i] for
// frame i.
type Meta struct {
	// Size is the frame's length: the frame is bufs[i][offset:offset+Size].
	Size int
	// GSO is the frame's offload metadata. The zero value is a complete
	// frame with complete checksums; otherwise it is a super-frame to be
	// cut into segments of GSO.Size payload bytes (GSO.IsGSO), or a frame
	// whose L4 checksum is partial (GSO.NeedsCsum). Only ports whose Caps
	// have Offload read or are given such frames.
	GSO packet.GSO
	// Tunnel is the frame's tunnel end, on a tunnel port only: where it
	// came from when read, where it goes when written.
	Tunnel Endpoint
	// Hash is the frame's flow hash (vswitch.FlowHash): the same for every
	// frame of one flow, in both directions. The switch sets it for every
	// frame it writes; a port may spread flows by it (the tunnel picks the
	// send socket, and with it the outer UDP source port, by it). Read
	// leaves it zero.
	Hash uint32
	// CsumVerified says Read checked the frame's IPv4 header checksum
	// and its TCP or UDP checksum (the full one, or every merged
	// segment's before a super-frame's partial one) and found them valid,
	// as virtio's DATA_VALID does: the switch's connection tracker need
	// not sum the payload again. A port that did not check leaves it
	// false, and the checksums are checked where they matter. Write
	// ignores it.
	CsumVerified bool
}

// Caps is what a port can do, as its Caps method reports it. The zero
// value is a plain port of complete Ethernet frames.
type Caps struct {
	// Offload: frames may be GSO super-frames (up to packet.MaxSuperFrame
	// bytes) or carry a partial checksum, both ways: Read may return them
	// (with Meta.GSO set) and Write takes them, sending a super-frame whole
	// (a TAP) or cut into segments (the tunnel). The switch drops a
	// super-frame bound for a port without Offload (vswitch.DropGSO).
	Offload bool
	// Tunnel: the port carries frames to and from other nodes. Read sets
	// Meta.Tunnel; Write sends frame i to Meta.Tunnel, so the switch drops
	// a frame output to the port without a tunnel destination
	// (vswitch.DropNoTunnelDst).
	Tunnel bool
}
