package vxlan

// Endpoint is the tunnel metadata of one frame: the remote node's underlay
// IPv4 address (source on receive, destination on send) and the 24-bit VNI.
type Endpoint struct {
	Addr [4]byte
	VNI  uint32
}
