package vswitch

import (
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/vxlan"
)

// Headroom is the number of bytes the switch leaves in front of every frame in
// the buffers it hands to ports. A port may use them to write its own header
// in place (virtio_net_hdr on a TAP, the VXLAN header on the tunnel port)
// without copying the frame.
const Headroom = 64

// Port is a switch port that moves Ethernet frames in batches.
//
// Buffer ownership: the caller owns bufs. Read fills bufs[i][offset:] with one
// frame each, sets sizes[i] to its length and returns the number of frames; it
// never keeps a reference to bufs after it returns. Write sends the frames
// bufs[i][offset:] and may overwrite bufs[i][:offset] (the headroom, at least
// Headroom bytes). Read is called by one goroutine at a time; Write may be
// called concurrently from several workers.
type Port interface {
	// Name returns the port's interface name (e.g. "vxlan0", "tun0", "veth-pod").
	Name() string
	// Read reads up to len(bufs) frames; it blocks until at least one.
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	// Write writes the frames; it returns how many were written.
	Write(bufs [][]byte, offset int) (n int, err error)
	// BatchSize is the preferred number of buffers per Read and Write.
	BatchSize() int
	// Close releases the port; a blocked Read returns an error.
	Close() error
}

// TunnelPort is a port that carries frames over a tunnel. Each frame has an
// endpoint: on read, the remote node it came from and the VNI it carried; on
// write, where to send it and with which VNI.
type TunnelPort interface {
	Name() string
	// ReadTunnel is Read that also fills eps[i] for each frame.
	ReadTunnel(bufs [][]byte, sizes []int, eps []vxlan.Endpoint, offset int) (n int, err error)
	// WriteTunnel is Write with an endpoint per frame.
	WriteTunnel(bufs [][]byte, eps []vxlan.Endpoint, offset int) (n int, err error)
	BatchSize() int
	Close() error
}

// OffloadPort is an optional interface of a Port whose frames may be GSO
// super-frames (a TAP with TSO enabled). The switch calls ReadGSO and
// WriteGSO instead of Read and Write; gso[i] describes frame i (the zero
// value is a complete frame). A super-frame read from an OffloadPort is
// only queued to ports that implement OffloadPort or OffloadTunnelPort;
// for other ports it is dropped as DropGSO. Frames the switch passes to
// WriteGSO with zero metadata are complete frames, as with Write.
type OffloadPort interface {
	Port
	ReadGSO(bufs [][]byte, sizes []int, gso []packet.GSO, offset int) (n int, err error)
	WriteGSO(bufs [][]byte, gso []packet.GSO, offset int) (n int, err error)
}

// OffloadTunnelPort is the optional GSO-aware form of a TunnelPort: reads
// may return coalesced super-frames, writes accept super-frames and
// segment them.
type OffloadTunnelPort interface {
	TunnelPort
	ReadTunnelGSO(bufs [][]byte, sizes []int, gso []packet.GSO, eps []vxlan.Endpoint, offset int) (n int, err error)
	WriteTunnelGSO(bufs [][]byte, gso []packet.GSO, eps []vxlan.Endpoint, offset int) (n int, err error)
}
