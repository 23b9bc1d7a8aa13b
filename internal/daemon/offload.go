package daemon

import (
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/tap"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// offload reports whether the data-path offloads are on (Config.Offload,
// default true).
func (dp *dataplane) offload() bool { return dp.cfg.Offload == nil || *dp.cfg.Offload }

// maxFrame is the switch's buffer size: room for a 64 KiB super-frame
// (and the spare byte a TAP read needs to detect truncation) with offloads.
func (dp *dataplane) maxFrame() int {
	if dp.offload() {
		return packet.MaxSuperFrame + 1
	}
	return vswitch.DefaultMaxFrame
}

// podOffloads are the TUN_F_* bits of a pod TAP.
func (dp *dataplane) podOffloads() uint {
	if dp.offload() {
		return tap.OffloadsTSO | tap.OffloadsUSO
	}
	return 0
}

// usoSeen turns on the merging of UDP datagrams toward the pods (vxlan
// CoalesceUDP) once a pod TAP has USO in effect: the kernel then takes
// UDP super-frames on every TAP, pods' and tun0 alike. Before that, or on
// a kernel without USO (before 6.2), datagrams go to the pods one by one.
func (dp *dataplane) usoSeen(dev *tap.Device) {
	if dp.vx != nil && dev.Offloads()&tap.OffloadsUSO == tap.OffloadsUSO {
		dp.vx.SetCoalesceUDP(true)
	}
}

// podQueues is how many queues a new pod TAP gets (Config.Queues).
func (dp *dataplane) podQueues() int { return max(dp.cfg.Queues, 1) }

// vxlanReaders is how many receive sockets vxlan0 gets
// (Config.VXLANReaders, else Config.Queues).
func (dp *dataplane) vxlanReaders() int {
	if dp.cfg.VXLANReaders > 0 {
		return dp.cfg.VXLANReaders
	}
	return dp.podQueues()
}
