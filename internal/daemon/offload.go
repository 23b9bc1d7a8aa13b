package daemon

import (
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/tap"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// offload reports whether the data-path offloads are on (Config.Offload,
// default true).
func (d *Daemon) offload() bool { return d.cfg.Offload == nil || *d.cfg.Offload }

// maxFrame is the switch's buffer size: room for a 64 KiB super-frame
// (and the spare byte a TAP read needs to detect truncation) with offloads.
func (d *Daemon) maxFrame() int {
	if d.offload() {
		return packet.MaxSuperFrame + 1
	}
	return vswitch.DefaultMaxFrame
}

// podOffloads are the TUN_F_* bits of a pod TAP.
func (d *Daemon) podOffloads() uint {
	if d.offload() {
		return tap.OffloadsTSO | tap.OffloadsUSO
	}
	return 0
}

// usoSeen turns on the merging of UDP datagrams toward the pods (vxlan
// CoalesceUDP) once a pod TAP has USO in effect: the kernel then takes
// UDP super-frames on every TAP, pods' and tun0 alike. Before that, or on
// a kernel without USO (before 6.2), datagrams go to the pods one by one.
func (d *Daemon) usoSeen(dev *tap.Device) {
	if d.vx != nil && dev.Offloads()&tap.OffloadsUSO == tap.OffloadsUSO {
		d.vx.SetCoalesceUDP(true)
	}
}

// podQueues is how many queues a new pod TAP gets (Config.Queues).
func (d *Daemon) podQueues() int { return max(d.cfg.Queues, 1) }

// vxlanReaders is how many receive sockets vxlan0 gets
// (Config.VXLANReaders, else Config.Queues).
func (d *Daemon) vxlanReaders() int {
	if d.cfg.VXLANReaders > 0 {
		return d.cfg.VXLANReaders
	}
	return d.podQueues()
}
