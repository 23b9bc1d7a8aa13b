// Package afxdp is a prototype (issue 14, phase 1) of an AF_XDP port
// kind for veth pod ports, as Open vSwitch's afxdp netdev: an XDP
// program on the switch's end of the pod's veth redirects every frame into
// an XDP socket (XSKMAP), whose UMEM — one memory area the switch maps,
// split into frames — the kernel fills through the fill and RX rings and
// drains through the TX and completion rings. No cgo and no BPF library:
// the five-instruction program is built by hand and loaded with the bpf(2)
// system call through golang.org/x/sys/unix, and attached with a BPF link
// (Linux 5.9+), which detaches it when the socket closes.
//
// Frames are received lent (Read, then Release returns their UMEM frames
// to the fill ring) and written by copying into a TX frame of the UMEM.
// On veth only copy mode exists: the driver has no AF_XDP zero-copy
// support, so Open with ZeroCopy fails (ErrZeroCopy) and the kernel copies
// each frame between the skb and the UMEM. A frame is at most one UMEM
// frame (no TSO super-frames). Not wired into the switch: see
// bench/results/history.md, "I/O engine candidates".
package afxdp
