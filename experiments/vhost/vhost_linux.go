// Package vhost is the probe half of a vhost-net prototype (issue 14,
// phase 1): whether this kernel can run a TAP's virtio rings in the
// switch's memory, as QEMU and DPDK's virtio-user exception path do.
//
// The engine itself is NOT written: on the machine this was measured on
// (Linux 6.18 in a Firecracker VM) CONFIG_VHOST_NET is not set and the
// kernel has no modules, so /dev/vhost-net does not exist and nothing
// could be tested. What the engine would do, for phase 2 on a kernel that
// has it (bench/results/history.md, "I/O engine candidates"):
//
//  1. open /dev/vhost-net; VHOST_SET_OWNER (the calling process's mm is
//     the one the rings and buffers live in); VHOST_GET_FEATURES and
//     VHOST_SET_FEATURES (VIRTIO_F_VERSION_1, VIRTIO_NET_F_MRG_RXBUF,
//     VHOST_NET_F_VIRTIO_NET_HDR off: the TAP keeps its own vnet header);
//  2. VHOST_SET_MEM_TABLE with one region: the switch-wide packet pool,
//     mapped once (guest physical address = user address);
//  3. per queue (0 = RX, 1 = TX): VHOST_SET_VRING_NUM, _ADDR (descriptor
//     table, avail ring, used ring of a split virtqueue, virtio 1.x
//     §2.7), _BASE, _KICK (an eventfd the switch writes after adding
//     buffers: the vhost worker's wake-up) and _CALL (an eventfd the
//     kernel signals on used buffers: the switch's wake-up);
//  4. VHOST_NET_SET_BACKEND (queue, TAP fd) for both queues.
//
// Then a frame costs no system call on either side while the vhost worker
// is busy (it polls the TX ring and the TAP's socket), and one eventfd
// write per batch to wake it (VRING_USED_F_NO_NOTIFY suppresses kicks it
// does not need). Its cost is a kernel thread per device (vhost-<pid>),
// which on a 2-vCPU node competes with the pods.
package vhost

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DevicePath is the vhost-net character device.
const DevicePath = "/dev/vhost-net"

// ErrUnavailable: this kernel has no vhost-net (no device node, or
// opening it fails).
var ErrUnavailable = errors.New("vhost: vhost-net not available")

// vhostGetFeatures is VHOST_GET_FEATURES, _IOR(0xAF, 0x00, __u64).
const vhostGetFeatures = 0x8008af00

// Features bits the probe reports.
const (
	FeatureVersion1  = 1 << 32 // VIRTIO_F_VERSION_1
	FeatureMrgRxbuf  = 1 << 15 // VIRTIO_NET_F_MRG_RXBUF
	FeatureVnetHdr   = 1 << 27 // VHOST_NET_F_VIRTIO_NET_HDR
	FeatureIOMMUPlat = 1 << 33 // VIRTIO_F_ACCESS_PLATFORM
)

// Probe opens the vhost-net device and returns the features the kernel
// offers, or an error wrapping ErrUnavailable that says why not.
func Probe() (uint64, error) {
	fd, err := unix.Open(DevicePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		reason := "open failed"
		if errors.Is(err, unix.ENOENT) {
			reason = "no device node (CONFIG_VHOST_NET not set, or the vhost_net module not loaded)"
		}
		return 0, fmt.Errorf("%w: %s: %s: %w", ErrUnavailable, DevicePath, reason, err)
	}
	defer unix.Close(fd)
	var f uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), vhostGetFeatures, uintptr(unsafe.Pointer(&f))); e != 0 {
		return 0, fmt.Errorf("%w: VHOST_GET_FEATURES: %w", ErrUnavailable, e)
	}
	return f, nil
}

// deviceExists reports whether the device node is there (for the test).
func deviceExists() bool {
	_, err := os.Stat(DevicePath)
	return err == nil
}
