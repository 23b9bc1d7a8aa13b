// Package iofloor measures the physical floor of the I/O mechanisms a pod
// port can use on this machine: what it costs to move a frame between
// user space and the kernel through a TAP (read/write), io_uring
// (tap/uring), AF_XDP (afxdp), vhost-net (experiments/vhost), and a UDP socket with
// sendmmsg/recvmmsg, as the tunnel port does. It holds the lab the
// benchmarks of those packages share — a throwaway network namespace whose
// ports the kernel joins back to back with tc mirred, frames of the sizes
// measured, and the meters (CPU, context switches, latency percentiles) —
// and the baseline benchmarks of the plain TAP and of the UDP socket.
//
// The loop every throughput benchmark runs: user space writes a batch of
// frames to port A; A's ingress redirects each frame to port B's egress
// (tc u32 + mirred, in the writer's own system call); user space reads them
// back from B. A frame's cost is therefore one transmit, one receive and
// the same kernel glue for every mechanism. See bench/results/history.md, "I/O
// engine candidates".
//
// Everything here needs root and runs inside namespaces it creates.
package iofloor
