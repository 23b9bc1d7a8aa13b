package vswitch

import "github.com/gvswitch/gvs/port"

// Headroom is the number of bytes the switch leaves in front of every frame in
// the buffers it hands to ports. A port may use them to write its own header
// in place (virtio_net_hdr on a TAP, the VXLAN header on the tunnel port)
// without copying the frame.
const Headroom = 64

// Port is a switch port: it moves Ethernet frames in batches, each frame
// described by a port.Meta. tap.Device, vxlan.Port and vxlan.Queue are
// ports; docs/embedding.md shows how to write one.
//
// Buffer ownership: the caller owns bufs and meta. Read fills
// bufs[i][offset:] with one frame each, sets meta[i] and returns the number
// of frames; it never keeps a reference to bufs after it returns — except
// a port that lends the caller's buffers to the kernel between calls
// (uring.Port: the kernel reads each frame into whichever buffer comes
// next): its Read may reorder the entries of bufs among themselves, so
// that frame i is in bufs[i], and needs the same bufs (as it left them) and
// offset on every call, and the caller writes into none of them while a
// Read runs. The switch passes each worker's own buffers every time. Write
// sends frame i, bufs[i][offset:offset+meta[i].Size], and may overwrite
// bufs[i][:offset] (the headroom, at least Headroom bytes when the switch
// calls) and, to complete a partial checksum, the frame itself.
//
// Concurrency: Read is called by one goroutine at a time (the queue's
// worker); Write may be called concurrently from several workers; Close
// may be called at any time and must make a blocked Read return an error.
type Port interface {
	// Name returns the port's interface name (e.g. "vxlan0", "tun0").
	Name() string
	// Caps reports what the port can do. The switch asks once, when the
	// port is added.
	Caps() port.Caps
	// BatchSize is the preferred number of frames per Read and Write.
	BatchSize() int
	// Read reads up to len(bufs) frames; it blocks until at least one.
	Read(bufs [][]byte, meta []port.Meta, offset int) (n int, err error)
	// Write writes the frames; it returns how many were written. Frames
	// it could not write are counted as dropped (DropTxError).
	Write(bufs [][]byte, meta []port.Meta, offset int) (n int, err error)
	// Close releases the port; a blocked Read returns an error.
	Close() error
}

// Framer is an optional interface of a port whose frames travel inside
// outer headers (a tunnel). A capture on such a port (StartCapture) shows
// each frame behind the outer headers the port gives it on the wire, so
// that it reads like a capture taken on the underlay.
type Framer interface {
	// WireHeaderLen is the length of the outer headers, at most
	// MaxWireHeader.
	WireHeaderLen() int
	// PutWireHeader writes into b[:WireHeaderLen()] the outer headers of
	// the frame with metadata m, as the port received it (received) or
	// as it sends it. Concurrent calls must be safe, and it must not
	// allocate: workers call it on their hot path while a capture runs.
	PutWireHeader(b []byte, m *port.Meta, received bool)
}

// MaxWireHeader is the longest outer header a Framer may report.
const MaxWireHeader = 128
