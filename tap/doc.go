// Package tap implements TAP ports: Linux TAP devices opened with
// IFF_TAP|IFF_NO_PI|IFF_VNET_HDR, read and written in batches, each frame
// preceded by a virtio_net_hdr.
package tap
