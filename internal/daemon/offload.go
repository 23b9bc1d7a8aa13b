package daemon

import (
	"github.com/gvswitch/gvs/packet"
	vswitch "github.com/gvswitch/gvs/switch"
	"github.com/gvswitch/gvs/tap"
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
